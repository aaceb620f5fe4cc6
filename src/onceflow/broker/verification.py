"""A KIP-890 question a partition leader must put to another broker's coordinator."""

from __future__ import annotations

import dataclasses

from onceflow.errors import ErrorCode


@dataclasses.dataclass(frozen=True)
class RemoteVerification(Exception):
    """A transactional write whose coordinator is another broker: the caller asks it
    (`Writes.ask_coordinator`) and appends again with the answer."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    topic: str
    partition: int
    markers_before: int | None  # the producer's markers here when asked; None: unguarded
    add: bool = False  # transaction version 2: add the partition, not only verify it
    error: ErrorCode = ErrorCode.none
