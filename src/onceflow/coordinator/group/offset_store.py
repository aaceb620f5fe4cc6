"""One group's offsets: the committed ones, the ones being written, and transactional ones.

Committed offsets are keyed by (topic, partition) and carry the position of their record in
`__consumer_offsets` (`log_seq`). Ordinary commits become visible once their append is
durable; transactional commits (TxnOffsetCommit) are written at once but stay in
`pending_txn` under their producer id until the transaction's marker arrives, and then only
replace a committed offset whose record is older. Comparing record positions, not arrival
order, is what keeps a late-materialised transaction from hiding a newer plain commit.

A transactional append still in flight is a TxnAppend. If the transaction ends while it is
in flight (the coordinator aborted it on a timeout, say), the outcome is kept on it and
applied when the append finishes, so the offsets never linger as pending for a transaction
that is already over.

A deleted partition (OffsetDelete, DeleteGroups) remembers its tombstone's position until a
newer commit lands: a commit or transactional commit whose record came before the tombstone,
still in flight when the deletion was made, must not bring the offset back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from onceflow.coordinator.group.offsets import OffsetAndMetadata, TopicPartition


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    value: OffsetAndMetadata
    log_seq: int  # order of its record in the group's __consumer_offsets partition


@dataclass(slots=True)
class Deleted:
    """What a tombstone took from one partition, to put back if it is never written."""

    tp: TopicPartition
    seq: int
    committed: CommittedOffset | None
    pending: dict[int, CommittedOffset] = field(default_factory=dict)


@dataclass(slots=True)
class TxnAppend:
    """Offsets of one TxnOffsetCommit whose append has not finished yet."""

    producer_id: int
    offsets: dict[TopicPartition, CommittedOffset]
    outcome: bool | None = None  # set if the transaction ended meanwhile: True = committed
    done: bool = False


class GroupOffsets:
    def __init__(self) -> None:
        self.committed: dict[TopicPartition, CommittedOffset] = {}
        # Partitions with a commit in flight: they must not expire under the writer's feet.
        self._in_flight: dict[TopicPartition, int] = {}
        # producer id -> offsets written inside its open transaction.
        self.pending_txn: dict[int, dict[TopicPartition, CommittedOffset]] = {}
        self._txn_appends: list[TxnAppend] = []
        # Partitions deleted by a tombstone at this position: older records never come back.
        self._deleted: dict[TopicPartition, int] = {}

    def get(self, tp: TopicPartition) -> OffsetAndMetadata | None:
        entry = self.committed.get(tp)
        return None if entry is None else entry.value

    def all(self) -> dict[TopicPartition, OffsetAndMetadata]:
        return {tp: entry.value for tp, entry in self.committed.items()}

    def has_offsets(self) -> bool:
        return bool(self.committed or self._in_flight or self.pending_txn or self._txn_appends)

    def is_unstable(self, tp: TopicPartition) -> bool:
        """A commit of this partition is not settled yet (OffsetFetch's require_stable).

        Like Kafka's classic coordinator this covers plain commits still being written as
        well as transactional ones waiting for their marker.
        """
        return tp in self._in_flight or self.has_pending_txn_for(tp)

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
        """Install an offset unless a newer record (or tombstone) already set this partition."""
        if entry.log_seq < self._deleted.get(tp, -1):
            return
        current = self.committed.get(tp)
        if current is None or current.log_seq < entry.log_seq:
            self.committed[tp] = entry
            self._deleted.pop(tp, None)

    def remove(self, tp: TopicPartition) -> OffsetAndMetadata | None:
        for offsets in self.pending_txn.values():
            offsets.pop(tp, None)
        entry = self.committed.pop(tp, None)
        return None if entry is None else entry.value

    # -- deletion: OffsetDelete and DeleteGroups

    def partitions(self) -> set[TopicPartition]:
        """Every partition with an offset: committed, being written, or in a transaction."""
        out = set(self.committed) | set(self._in_flight)
        for offsets in self.pending_txn.values():
            out.update(offsets)
        for append in self._txn_appends:
            out.update(append.offsets)
        return out

    def has_offset(self, tp: TopicPartition) -> bool:
        """Committed, being written or pending in a transaction: Kafka, whose cache holds a
        commit from the moment it is written, writes a tombstone for any of them."""
        return tp in self.partitions()

    def delete(self, tp: TopicPartition, seq: int) -> Deleted:
        """Apply a tombstone at log position `seq`: the partition's committed and pending
        offsets go, and records older than it that are still being written stay out."""
        removed = Deleted(tp, seq, self.committed.pop(tp, None))
        for producer_id, offsets in self.pending_txn.items():
            entry = offsets.pop(tp, None)
            if entry is not None:
                removed.pending[producer_id] = entry
        self._deleted[tp] = max(seq, self._deleted.get(tp, -1))
        return removed

    def undelete(self, removed: Deleted) -> None:
        """Take back a deletion whose tombstone was never written (its append failed)."""
        if self._deleted.get(removed.tp) == removed.seq:
            del self._deleted[removed.tp]
        if removed.committed is not None:
            self.put(removed.tp, removed.committed)
        for producer_id, entry in removed.pending.items():
            if producer_id in self.pending_txn:  # else its marker came meanwhile
                self.pending_txn[producer_id].setdefault(removed.tp, entry)

    # -- transactional commits: TxnOffsetCommit, then the transaction's marker

    def add_pending_txn(self, producer_id: int, tp: TopicPartition, entry: CommittedOffset) -> None:
        if entry.log_seq < self._deleted.get(tp, -1):
            return  # written before a tombstone of its partition: its commit changes nothing
        self.pending_txn.setdefault(producer_id, {})[tp] = entry

    def begin_txn_append(
        self, producer_id: int, offsets: dict[TopicPartition, CommittedOffset]
    ) -> TxnAppend:
        """Track a TxnOffsetCommit whose batch is being appended."""
        append = TxnAppend(producer_id, offsets)
        self._txn_appends.append(append)
        return append

    def finish_txn_append(self, append: TxnAppend, *, appended: bool) -> None:
        """The append finished: its offsets become pending, or settle if the txn already ended.

        A failed append leaves nothing behind. Calling this twice is a no-op.
        """
        if append.done:
            return
        append.done = True
        self._txn_appends.remove(append)
        if not appended or append.outcome is False:
            return
        for tp, entry in append.offsets.items():
            if append.outcome is None:
                self.add_pending_txn(append.producer_id, tp, entry)
            else:
                self.put(tp, entry)

    def complete_txn(self, producer_id: int, *, commit: bool) -> None:
        """A commit marker materialises the producer's offsets; an abort drops them."""
        offsets = self.pending_txn.pop(producer_id, {})
        if commit:
            for tp, entry in offsets.items():
                self.put(tp, entry)
        for append in self._txn_appends:
            if append.producer_id == producer_id and append.outcome is None:
                append.outcome = commit

    def has_pending_txn_for(self, tp: TopicPartition) -> bool:
        return any(tp in offsets for offsets in self.pending_txn.values()) or any(
            tp in a.offsets for a in self._txn_appends if a.outcome is None
        )

    def has_pending_txn_from(self, producer_id: int) -> bool:
        return producer_id in self.pending_txn or any(
            a.producer_id == producer_id for a in self._txn_appends
        )

    # -- retention

    def expired(
        self,
        now_ms: int,
        retention_ms: int,
        base_timestamp: Callable[[OffsetAndMetadata], int],
        keep_topics: frozenset[str] = frozenset(),
    ) -> list[TopicPartition]:
        """Partitions whose offsets outlived their retention, skipping busy and kept ones.

        A partition with a transactional commit pending is busy too: its marker may still
        make the pending offset the committed one.

        A commit with its own expire timestamp (OffsetCommit v2-v4 retention_time) expires
        then; any other expires `retention_ms` after `base_timestamp(offset)`.
        """
        out = []
        for tp, entry in self.committed.items():
            if tp.topic in keep_topics or tp in self._in_flight or self.has_pending_txn_for(tp):
                continue
            value = entry.value
            if value.expire_timestamp_ms is not None:
                if now_ms >= value.expire_timestamp_ms:
                    out.append(tp)
            elif now_ms - base_timestamp(value) >= retention_ms:
                out.append(tp)
        return out
