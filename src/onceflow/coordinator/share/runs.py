"""The values a share-partition is made of: runs of offsets in one state, the batches a
fetch read, acquired ranges, durable state batches, limits; and the helpers on them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from onceflow.coordinator.share.state import AcknowledgeType, RecordState

ACQUIRE_BATCH_OPTIMIZED = 0  # ShareFetch v2's share_acquire_mode: whole batches
ACQUIRE_RECORD_LIMIT = 1  # never more than max_records, splitting a batch if need be


@dataclass(slots=True)
class Run:
    first: int
    last: int
    state: RecordState
    delivery_count: int = 0
    member: str | None = None
    deadline_ms: int = 0
    #: A transactional acknowledgement waiting for its transaction's outcome (KIP-1289's
    #: idea): (producer id, the state it takes on commit). The run stays Acquired meanwhile.
    pending: tuple[int, RecordState] | None = None

    @property
    def size(self) -> int:
        return self.last - self.first + 1


class FetchedBatch(NamedTuple):
    """A log batch a share fetch read: its offsets and whether it is never delivered
    (a control batch, or a batch of an aborted transaction)."""

    first: int
    last: int
    skip: bool


class AcquiredRange(NamedTuple):
    first: int
    last: int
    delivery_count: int


class StateBatch(NamedTuple):
    """What `__share_group_state` keeps of a run (Kafka's PersisterStateBatch)."""

    first: int
    last: int
    state: RecordState
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ShareLimits:
    lock_duration_ms: int = 30_000
    delivery_count_limit: int = 5
    max_record_locks: int = 2000


TYPES = frozenset(int(t) for t in AcknowledgeType)
PENDING_TARGETS = {
    AcknowledgeType.ACCEPT: RecordState.ACKNOWLEDGED,
    AcknowledgeType.REJECT: RecordState.ARCHIVED,
    AcknowledgeType.RELEASE: RecordState.AVAILABLE,
}


def type_runs(
    first: int, last: int, types: Sequence[int]
) -> list[tuple[int, int, AcknowledgeType]]:
    """(first, last, type) for each stretch of equal types."""
    if len(types) == 1:
        return [(first, last, AcknowledgeType(types[0]))]
    out: list[tuple[int, int, AcknowledgeType]] = []
    start = first
    for i in range(1, len(types) + 1):
        if i == len(types) or types[i] != types[i - 1]:
            out.append((start, first + i - 1, AcknowledgeType(types[i - 1])))
            start = first + i
    return out


def coalesce(ranges: list[AcquiredRange]) -> list[AcquiredRange]:
    out: list[AcquiredRange] = []
    for r in ranges:
        if out and out[-1].last + 1 == r.first and out[-1].delivery_count == r.delivery_count:
            out[-1] = AcquiredRange(out[-1].first, r.last, r.delivery_count)
        else:
            out.append(r)
    return out
