"""One group's offsets: the committed ones, the ones being written, and transactional ones.

Committed offsets are keyed by (topic, partition) and carry the position of their record in
`__consumer_offsets` (`log_seq`). Ordinary commits become visible once their append is
durable; transactional commits (TxnOffsetCommit, added later) are written at once but stay in
`pending_txn` under their producer id until the transaction's marker arrives, and then only
replace a committed offset whose record is older. Comparing record positions, not arrival
order, is what keeps a late-materialised transaction from hiding a newer plain commit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from onceflow.coordinator.group.offsets import OffsetAndMetadata, TopicPartition


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    value: OffsetAndMetadata
    log_seq: int  # order of its record in the group's __consumer_offsets partition


class GroupOffsets:
    def __init__(self) -> None:
        self.committed: dict[TopicPartition, CommittedOffset] = {}
        # Partitions with a commit in flight: they must not expire under the writer's feet.
        self._in_flight: dict[TopicPartition, int] = {}
        # producer id -> offsets written inside its open transaction.
        self.pending_txn: dict[int, dict[TopicPartition, CommittedOffset]] = {}

    def get(self, tp: TopicPartition) -> OffsetAndMetadata | None:
        entry = self.committed.get(tp)
        return None if entry is None else entry.value

    def all(self) -> dict[TopicPartition, OffsetAndMetadata]:
        return {tp: entry.value for tp, entry in self.committed.items()}

    def has_offsets(self) -> bool:
        return bool(self.committed or self._in_flight or self.pending_txn)

    # -- ordinary commits: prepare before the append, complete after it

    def prepare(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self._in_flight[tp] = self._in_flight.get(tp, 0) + 1

    def complete(self, tp: TopicPartition, entry: CommittedOffset | None) -> None:
        """Finish one in-flight commit; `entry` is None when its append failed."""
        left = self._in_flight.get(tp, 0) - 1
        if left > 0:
            self._in_flight[tp] = left
        else:
            self._in_flight.pop(tp, None)
        if entry is not None:
            self.put(tp, entry)

    def put(self, tp: TopicPartition, entry: CommittedOffset) -> None:
        """Install an offset unless a newer record already set this partition."""
        current = self.committed.get(tp)
        if current is None or current.log_seq < entry.log_seq:
            self.committed[tp] = entry

    def remove(self, tp: TopicPartition) -> OffsetAndMetadata | None:
        for offsets in self.pending_txn.values():
            offsets.pop(tp, None)
        entry = self.committed.pop(tp, None)
        return None if entry is None else entry.value

    # -- transactional commits (TxnOffsetCommit and markers build on these)

    def add_pending_txn(self, producer_id: int, tp: TopicPartition, entry: CommittedOffset) -> None:
        self.pending_txn.setdefault(producer_id, {})[tp] = entry

    def complete_txn(self, producer_id: int, *, commit: bool) -> None:
        """A commit marker materialises the producer's offsets; an abort drops them."""
        offsets = self.pending_txn.pop(producer_id, {})
        if commit:
            for tp, entry in offsets.items():
                self.put(tp, entry)

    def has_pending_txn_for(self, tp: TopicPartition) -> bool:
        return any(tp in offsets for offsets in self.pending_txn.values())

    # -- retention

    def expired(
        self,
        now_ms: int,
        retention_ms: int,
        base_timestamp: Callable[[OffsetAndMetadata], int],
        keep_topics: frozenset[str] = frozenset(),
    ) -> list[TopicPartition]:
        """Partitions whose offsets outlived their retention, skipping busy and kept ones.

        A commit with its own expire timestamp (OffsetCommit v2-v4 retention_time) expires
        then; any other expires `retention_ms` after `base_timestamp(offset)`.
        """
        out = []
        for tp, entry in self.committed.items():
            if tp.topic in keep_topics or tp in self._in_flight:
                continue
            value = entry.value
            if value.expire_timestamp_ms is not None:
                if now_ms >= value.expire_timestamp_ms:
                    out.append(tp)
            elif now_ms - base_timestamp(value) >= retention_ms:
                out.append(tp)
        return out
