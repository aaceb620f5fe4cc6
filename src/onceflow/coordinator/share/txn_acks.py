"""Transactional acknowledgements (beyond Kafka: TxnShareAcknowledge) on the side of the
share-partition's leader: runs marked pending on a producer, the acknowledgement written
where the key's state partition is led, and the outcome applied when the marker lands
here (`complete_txn`) or, when the state partition is led elsewhere or the records were
recovered, when the share coordinator says so (`check_pending`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from onceflow.clock import Clock
from onceflow.coordinator.share.partition import PENDING_TARGETS, SharePartition, type_runs
from onceflow.coordinator.share.persister import SnapshotPersister
from onceflow.coordinator.share.records import ShareKey
from onceflow.coordinator.share.store import ShareStateStore
from onceflow.errors import ErrorCode, KafkaError

AckBatch = tuple[int, int, Sequence[int]]  # first offset, last offset, types
#: Who holds records tied to an open transaction found at load (their consumer is gone;
#: the transaction's end decides them).
RECOVERED_MEMBER = "<recovered transaction>"
#: How often a share-partition with transactional acknowledgements pending asks its share
#: coordinator whether their transactions ended (the markers land there, maybe on
#: another broker, and in a new leader after a failover).
PENDING_CHECK_MS = 200
#: The producer of records found tied to a transaction at load from another broker (its
#: id stays there): only the share coordinator's answer settles them.
UNKNOWN_PRODUCER = -1


@dataclass(slots=True)
class HeldPartition:
    topic: str
    partition: SharePartition
    state_epoch: int = 0
    #: Transactional acknowledgement writes not yet answered, and a count of them ever
    #: started: a check of the pending runs against the share coordinator is trusted only
    #: when none was in flight from its start to its answer.
    txn_writes_in_flight: int = 0
    txn_writes_started: int = 0
    next_pending_check_ms: int = 0


class TransactionalAcknowledgements:
    """The ShareCoordinator's transactional acknowledgements (a mixin: it provides the
    held share-partitions, the store, the persister, the clock and `_changed`)."""

    held: dict[ShareKey, HeldPartition]
    store: ShareStateStore
    persister: SnapshotPersister
    _clock: Clock
    _changed: Callable[[ShareKey, HeldPartition], None]

    def txn_acknowledge(
        self,
        key: ShareKey,
        member: str,
        batches: Sequence[AckBatch],
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
    ) -> tuple[ErrorCode, Awaitable[int] | None]:
        """Acknowledgements inside `producer_id`'s transaction (its state partition was
        added to it): validated now, written as the producer's transactional record, and
        applied by `complete_txn` when its marker arrives."""
        held = self.held.get(key)
        if held is None:
            return ErrorCode.invalid_record_state, None
        pieces = [p for first, last, types in batches for p in type_runs(first, last, types)]
        error = held.partition.acknowledge_pending(member, pieces, producer_id)
        if error is not ErrorCode.none:
            return error, None
        ranges = tuple((first, last, PENDING_TARGETS[kind]) for first, last, kind in pieces)
        try:
            written = self.persister.write_txn(
                key, ranges, transactional_id, producer_id, producer_epoch, self._clock.now_ms()
            )
        except KafkaError as exc:
            written = _failed(exc)
        held.txn_writes_in_flight += 1
        held.txn_writes_started += 1
        return ErrorCode.none, _counted(held, written)

    def complete_txn(self, producer_id: int, commit: bool, partition: int) -> None:
        """A transaction's marker reached a `__share_group_state` partition: its
        acknowledgements there take effect (commit) or the records are released (abort)."""
        for key in self.store.complete_txn(producer_id, commit, partition):
            held = self.held.get(key)
            if held is not None and held.partition.complete_pending(producer_id, commit):
                self._changed(key, held)

    async def check_pending(self, key: ShareKey, held: HeldPartition) -> None:
        """Settle the pending runs whose transaction ended at the share coordinator."""
        if held.txn_writes_in_flight:
            return
        started = held.txn_writes_started
        try:
            decided = await self.persister.read(key)
        except KafkaError:
            return  # a coordinator moving or loading: asked again at the next check
        if held.txn_writes_in_flight or held.txn_writes_started != started:
            return  # a write raced the answer
        if self.held.get(key) is not held or decided is None:
            return
        if decided.state_epoch == held.state_epoch and held.partition.resolve_pending(
            decided.start_offset, decided.batches
        ):
            self._changed(key, held)


async def _counted(held: HeldPartition, written: Awaitable[Any]) -> Any:
    try:
        return await written
    finally:
        held.txn_writes_in_flight -= 1


async def _failed(exc: KafkaError) -> Any:
    raise exc
