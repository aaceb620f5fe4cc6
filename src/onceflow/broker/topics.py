"""Topic names, as Kafka allows them."""

from __future__ import annotations

import re
import uuid
from typing import NamedTuple

from onceflow.errors import ErrorCode, KafkaError

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
OFFSETS_TOPIC = "__consumer_offsets"
TXN_TOPIC = "__transaction_state"
SHARE_STATE_TOPIC = "__share_group_state"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TXN_TOPIC, SHARE_STATE_TOPIC})


class CreatedTopic(NamedTuple):
    """What CreateTopics v5+ tells of a topic it created (or would create, validate-only)."""

    topic_id: uuid.UUID
    partitions: int
    replication_factor: int


def validate_topic_name(name: str) -> None:
    if not name or name in (".", ".."):
        raise KafkaError(ErrorCode.invalid_topic_exception, f"illegal topic name '{name}'")
    if len(name) > MAX_NAME_LENGTH:
        raise KafkaError(
            ErrorCode.invalid_topic_exception,
            f"topic name is longer than {MAX_NAME_LENGTH} characters",
        )
    if not _LEGAL.match(name):
        raise KafkaError(
            ErrorCode.invalid_topic_exception,
            f"topic name '{name}' may contain only ASCII letters, digits, '.', '_' and '-'",
        )


def partition_count_message(current: int, requested: int) -> str:
    """Kafka's words for a CreatePartitions that would not add any partition."""
    if requested == current:
        return f"Topic already has {current} partitions."
    return (
        f"Topic currently has {current} partitions, which is higher than the requested {requested}."
    )
