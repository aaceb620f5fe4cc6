"""Topic ids (KIP-516): Kafka's zero id, which stands for none, and an id as it is stored
(text, in the topics file or a ZooKeeper assignment) parsed."""

from __future__ import annotations

import uuid

ZERO_UUID = uuid.UUID(int=0)  # Kafka's Uuid.ZERO_UUID: no topic id


def parse_topic_id(text: str | None) -> uuid.UUID | None:
    """The id stored as `text`; None for a topic stored without one (or a damaged one)."""
    try:
        return uuid.UUID(text) if text else None
    except ValueError:
        return None
