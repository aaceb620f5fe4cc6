"""A transaction's Complete record is off the next transaction's path (issue 26).

The next transaction of an id waits for the previous one's markers, then appends its first
record right behind the Complete record in the leader's log, without waiting for that one
to be replicated. The guarantees it must keep: the next record lands after the Complete
one, nobody is answered before their own record is durable (so never before the Complete
one), and a leader that dies with the Complete record unreplicated leaves a log whose next
coordinator finishes the transaction again (its markers written again, none lost).

`ReplicatedLog` models a leader's log with replication held: an append is in the log at
once, and durable only when the test lets the replicated prefix grow, in log order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from tests.unit.test_txn_coordinator import Markers, run, settle

from onceflow.clock import ManualClock
from onceflow.coordinator.transaction.coordinator import (
    TransactionCoordinator,
    TxnCoordinatorConfig,
)
from onceflow.coordinator.transaction.log import decode_key, decode_value
from onceflow.coordinator.transaction.producer_ids import ProducerIdManager
from onceflow.coordinator.transaction.state import TxnState
from onceflow.errors import ErrorCode
from onceflow.records.record import decode_records
from onceflow.storage.fs import SimFileSystem

Record = tuple[bytes | None, bytes | None]


class ReplicatedLog:
    """Appends land in the log at once; each is durable once `replicate()` passes it."""

    def __init__(self) -> None:
        self.records: list[tuple[int, Record]] = []  # (partition, record), in log order
        self.durable = 0  # records replicated (a prefix of the log)
        self.holding = False
        self._pending: list[tuple[int, asyncio.Future[None]]] = []

    def append(self, partition: int, batch: bytes) -> asyncio.Future[None]:
        for record in decode_records(batch):
            self.records.append((partition, (record.key, record.value)))
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((len(self.records), done))
        if not self.holding:
            self.replicate()
        return done

    def replicate(self, upto: int | None = None) -> None:
        """The high watermark moves to `upto` records (all of them by default)."""
        self.durable = len(self.records) if upto is None else upto
        still = []
        for end, done in self._pending:
            if end <= self.durable:
                done.set_result(None)
            else:
                still.append((end, done))
        self._pending = still

    def fail_pending(self, error: Exception) -> None:
        """Every append not yet replicated fails (as a replication timeout does)."""
        pending, self._pending = self._pending, []
        for _, done in pending:
            done.set_exception(error)

    def read(self, partition: int) -> Iterable[Record]:
        return [r for p, r in self.records if p == partition]

    def states(self, txn_id: str, durable_only: bool = False) -> list[TxnState | None]:
        records = self.records[: self.durable] if durable_only else self.records
        return [
            None if value is None else decode_value(txn_id, value).state
            for _, (key, value) in records
            if key is not None and decode_key(key) == txn_id
        ]

    def truncated(self) -> ReplicatedLog:
        """What a new leader holds: the replicated prefix only (the old leader died)."""
        survivor = ReplicatedLog()
        survivor.records = self.records[: self.durable]
        survivor.durable = self.durable
        return survivor


def coordinator(log: ReplicatedLog, markers: Markers) -> TransactionCoordinator:
    ids = ProducerIdManager(SimFileSystem(), "/")
    config = TxnCoordinatorConfig(num_partitions=5, max_timeout_ms=60_000, id_expiration_ms=100_000)
    return TransactionCoordinator(log, markers, ids, ManualClock(), config, 1)


async def committed_and_complete_held(
    log: ReplicatedLog, markers: Markers
) -> tuple[TransactionCoordinator, int, int]:
    """A committed transaction of "t" on ("a", 0), its markers written, its
    CompleteCommit record in the log but not replicated."""
    coord = coordinator(log, markers)
    await coord.load()
    init = await coord.init_producer_id("t", 10_000)
    pid, epoch = init.producer_id, init.producer_epoch
    assert await coord.add_partitions("t", pid, epoch, [("a", 0)]) is ErrorCode.none
    log.holding = True
    ending = asyncio.ensure_future(coord.end_txn("t", pid, epoch, commit=True))
    await settle()
    log.replicate()  # PrepareCommit: the client is answered
    assert await ending is ErrorCode.none
    await settle()
    assert markers.written == [(pid, epoch, True, frozenset({("a", 0)}))]
    assert log.states("t")[-1] is TxnState.COMPLETE_COMMIT
    assert log.states("t", durable_only=True)[-1] is TxnState.PREPARE_COMMIT
    return coord, pid, epoch


def test_the_next_transaction_is_logged_behind_an_unreplicated_complete() -> None:
    async def go() -> None:
        log, markers = ReplicatedLog(), Markers()
        coord, pid, epoch = await committed_and_complete_held(log, markers)
        adding = asyncio.ensure_future(coord.add_partitions("t", pid, epoch, [("a", 0)]))
        await settle()
        # Appended at once behind CompleteCommit, without waiting for it to replicate...
        assert log.states("t")[-2:] == [TxnState.COMPLETE_COMMIT, TxnState.ONGOING]
        # ...and answered only once its own record, so the Complete one too, is durable.
        assert not adding.done()
        log.replicate(log.durable + 1)  # CompleteCommit only
        await settle()
        assert not adding.done()
        log.replicate()
        assert await adding is ErrorCode.none
        assert coord.txns["t"].state is TxnState.ONGOING

    run(go())


def test_a_leader_lost_with_the_complete_unreplicated_finishes_it_again() -> None:
    async def go() -> None:
        log, markers = ReplicatedLog(), Markers()
        coord, pid, epoch = await committed_and_complete_held(log, markers)
        adding = asyncio.ensure_future(coord.add_partitions("t", pid, epoch, [("a", 0)]))
        await settle()
        assert not adding.done()  # nobody was told the next transaction started
        # The leader dies: its successor holds the log up to PrepareCommit only.
        survivor = log.truncated()
        new_markers = Markers()
        successor = coordinator(survivor, new_markers)
        await successor.load()
        await settle()
        # The decided commit is finished again: its markers are not lost.
        assert new_markers.written == [(pid, epoch, True, frozenset({("a", 0)}))]
        assert survivor.states("t")[-2:] == [TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT]
        assert successor.txns["t"].state is TxnState.COMPLETE_COMMIT
        # The producer's retry reaches the successor and starts its next transaction.
        answer = await successor.add_partitions("t", pid, epoch, [("a", 0)])
        assert answer is ErrorCode.none
        await coord.close()

    run(go())


def test_a_failed_complete_replication_leaves_the_complete_state() -> None:
    """The Complete record is not replicated in time (the leader stays): the state stays
    Complete and is not logged again; what the log holds decides at the next load."""

    async def go() -> None:
        log, markers = ReplicatedLog(), Markers()
        coord, pid, epoch = await committed_and_complete_held(log, markers)
        log.fail_pending(TimeoutError("not replicated in time"))
        await settle()
        assert coord.txns["t"].state is TxnState.COMPLETE_COMMIT
        assert log.states("t").count(TxnState.COMPLETE_COMMIT) == 1
        log.holding = False
        assert await coord.add_partitions("t", pid, epoch, [("a", 0)]) is ErrorCode.none

    run(go())
