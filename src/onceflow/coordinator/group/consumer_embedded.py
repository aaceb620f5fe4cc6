"""The "consumer" embedded protocol of classic members (Kafka's ConsumerProtocol).

A classic consumer's JoinGroup metadata is an int16 version and a
ConsumerProtocolSubscription of that version (topics, owned partitions); SyncGroup answers
an int16 version and a ConsumerProtocolAssignment. Newer versions only append fields, so a
version above the newest known one is read as the newest (Kafka does the same). kio has
the structs; this module adds the version prefix.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from kio.schema.consumer_protocol_assignment import v0 as assignment_v0
from kio.schema.consumer_protocol_assignment import v1 as assignment_v1
from kio.schema.consumer_protocol_assignment import v2 as assignment_v2
from kio.schema.consumer_protocol_assignment import v3 as assignment_v3
from kio.schema.consumer_protocol_subscription import v0 as subscription_v0
from kio.schema.consumer_protocol_subscription import v1 as subscription_v1
from kio.schema.consumer_protocol_subscription import v2 as subscription_v2
from kio.schema.consumer_protocol_subscription import v3 as subscription_v3
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32

from onceflow.coordinator.group.offsets import TopicPartition

_VERSION = struct.Struct(">h")
_SUBSCRIPTIONS: tuple[ModuleType, ...] = (
    subscription_v0,
    subscription_v1,
    subscription_v2,
    subscription_v3,
)
_ASSIGNMENTS: tuple[ModuleType, ...] = (assignment_v0, assignment_v1, assignment_v2, assignment_v3)


class MalformedProtocol(ValueError):
    """The embedded protocol's bytes do not parse."""


@dataclass(frozen=True, slots=True)
class Subscription:
    topics: tuple[str, ...]
    owned: frozenset[TopicPartition]
    rack_id: str | None


def decode_subscription(data: bytes) -> Subscription:
    body = _decode(_SUBSCRIPTIONS, "ConsumerProtocolSubscription", data)
    owned = frozenset(
        TopicPartition(tp.topic, int(p))
        for tp in getattr(body, "owned_partitions", ())
        for p in tp.partitions
    )
    return Subscription(tuple(body.topics), owned, getattr(body, "rack_id", None))


def subscription_version(data: bytes) -> int:
    return _version(data)


def encode_assignment(partitions: frozenset[TopicPartition], version: int) -> bytes:
    """A ConsumerProtocolAssignment of the member's own subscription version (or the newest
    known, for a newer one), as Kafka answers it."""
    version = max(0, min(version, len(_ASSIGNMENTS) - 1))
    module = _ASSIGNMENTS[version]
    by_topic: dict[str, list[i32]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(i32(tp.partition))
    topic_partitions = tuple(
        module.data.TopicPartition(topic=topic, partitions=tuple(parts))
        for topic, parts in by_topic.items()
    )
    assignment: Any = module.ConsumerProtocolAssignment(
        assigned_partitions=topic_partitions, user_data=None
    )
    buf = io.BytesIO()
    buf.write(_VERSION.pack(version))
    entity_writer(module.ConsumerProtocolAssignment)(buf, assignment)
    return buf.getvalue()


def decode_assignment(data: bytes) -> frozenset[TopicPartition]:
    """A SyncGroup assignment; empty bytes (a member not yet assigned anything) is none."""
    if not data:
        return frozenset()
    body = _decode(_ASSIGNMENTS, "ConsumerProtocolAssignment", data)
    return frozenset(
        TopicPartition(tp.topic, int(p)) for tp in body.assigned_partitions for p in tp.partitions
    )


def _decode(modules: tuple[ModuleType, ...], entity: str, data: bytes) -> Any:
    """The embedded `entity` read with its own version's schema (a newer one's with the
    newest known, whose fields it starts with)."""
    module = modules[min(_version(data), len(modules) - 1)]
    try:
        body, _ = entity_reader(getattr(module, entity))(data, _VERSION.size)
    except Exception as exc:  # kio raises assorted errors on malformed input
        raise MalformedProtocol(f"malformed {entity}: {exc}") from exc
    return body


def _version(data: bytes) -> int:
    if len(data) < _VERSION.size:
        raise MalformedProtocol("embedded consumer protocol without a version")
    (version,) = _VERSION.unpack_from(data)
    if version < 0:
        raise MalformedProtocol(f"embedded consumer protocol version {version}")
    return int(version)
