"""Adds of one producer waiting together are logged as one record (issue 26).

librdkafka sends AddOffsetsToTxn right behind AddPartitionsToTxn; while the first waits for
the previous transaction's markers, the second joins it: one `__transaction_state` record.
What must hold: every add is in the transaction before anyone is answered, a producer's
EndTxn takes effect after the adds it sent before it (never on the previous transaction's
Complete state, which would answer a commit of nothing as done), and an add of another
epoch (a fenced zombie) never rides along.
"""

from __future__ import annotations

import asyncio

from tests.unit.test_txn_complete_pipelined import ReplicatedLog, coordinator
from tests.unit.test_txn_coordinator import Markers, run, settle

from onceflow.coordinator.transaction.coordinator import TransactionCoordinator
from onceflow.coordinator.transaction.state import TxnState
from onceflow.errors import ErrorCode


async def ending_with_markers_held(
    log: ReplicatedLog, markers: Markers
) -> tuple[TransactionCoordinator, int, int]:
    """ "t" (at its second epoch) committed a transaction on ("a", 0); its markers are
    not written yet."""
    coord = coordinator(log, markers)
    await coord.load()
    await coord.init_producer_id("t", 10_000)
    init = await coord.init_producer_id("t", 10_000)
    pid, epoch = init.producer_id, init.producer_epoch
    assert await coord.add_partitions("t", pid, epoch, [("a", 0)]) is ErrorCode.none
    markers.block = asyncio.Event()
    assert await coord.end_txn("t", pid, epoch, commit=True) is ErrorCode.none
    return coord, pid, epoch


def test_adds_waiting_for_the_markers_are_one_record() -> None:
    async def go() -> None:
        log, markers = ReplicatedLog(), Markers()
        coord, pid, epoch = await ending_with_markers_held(log, markers)
        first = coord.add_partitions("t", pid, epoch, [("a", 1)])
        offsets = coord.add_partitions("t", pid, epoch, [("__consumer_offsets", 7)])
        await settle()
        assert not first.done() and not offsets.done()
        assert markers.block is not None
        markers.block.set()
        assert await first is ErrorCode.none
        assert await offsets is ErrorCode.none
        states = log.states("t")
        assert states[-3:] == [TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT, TxnState.ONGOING]
        meta = coord.txns["t"]
        assert meta.state is TxnState.ONGOING
        assert meta.partitions == {("a", 1), ("__consumer_offsets", 7)}

    run(go())


def test_an_end_waits_for_the_adds_sent_before_it() -> None:
    async def go() -> None:
        log, markers = ReplicatedLog(), Markers()
        coord, pid, epoch = await ending_with_markers_held(log, markers)
        added = coord.add_partitions("t", pid, epoch, [("a", 1)])
        ending = asyncio.ensure_future(coord.end_txn("t", pid, epoch, commit=True))
        await settle()
        # Not answered on the previous transaction's state: it waits for the add.
        assert not ending.done()
        assert markers.block is not None
        markers.block.set()
        assert await added is ErrorCode.none
        assert await ending is ErrorCode.none
        await settle()
        states = log.states("t")
        second = states.index(TxnState.ONGOING, states.index(TxnState.ONGOING) + 1)
        assert states[second:] == [
            TxnState.ONGOING,
            TxnState.PREPARE_COMMIT,
            TxnState.COMPLETE_COMMIT,
        ]
        assert markers.written[-1] == (pid, epoch, True, frozenset({("a", 1)}))

    run(go())


def test_an_add_of_another_epoch_does_not_join() -> None:
    async def go() -> None:
        log, markers = ReplicatedLog(), Markers()
        coord, pid, epoch = await ending_with_markers_held(log, markers)
        added = coord.add_partitions("t", pid, epoch, [("a", 1)])
        zombie = coord.add_partitions("t", pid, epoch - 1, [("a", 2)])
        await settle()
        assert markers.block is not None
        markers.block.set()
        assert await added is ErrorCode.none
        assert await zombie is ErrorCode.producer_fenced
        assert coord.txns["t"].partitions == {("a", 1)}

    run(go())


class FetchingLog(ReplicatedLog):
    """Notes what a follower's fetch woken by each append would find: the log as it is
    at the next pass of the event loop (a parked fetch wakes no sooner)."""

    def __init__(self) -> None:
        super().__init__()
        self.fetched: list[int] = []  # the log's length each woken fetch saw

    def append(self, partition: int, batch: bytes) -> asyncio.Future[None]:
        done = super().append(partition, batch)
        asyncio.get_running_loop().call_soon(lambda: self.fetched.append(len(self.records)))
        return done


def test_the_waiting_add_is_appended_in_the_same_step_as_the_complete_record() -> None:
    """The previous transaction's Complete record and the add waiting for it reach the
    followers in one fetch: the add's record is in the log before the loop runs again."""

    async def go() -> None:
        log, markers = FetchingLog(), Markers()
        coord, pid, epoch = await ending_with_markers_held(log, markers)
        first = coord.add_partitions("t", pid, epoch, [("a", 1)])
        offsets = coord.add_partitions("t", pid, epoch, [("__consumer_offsets", 7)])
        await settle()
        log.holding = True
        log.fetched.clear()
        assert markers.block is not None
        markers.block.set()
        await settle()
        states = log.states("t")
        assert states[-2:] == [TxnState.COMPLETE_COMMIT, TxnState.ONGOING]
        # The fetch woken by the Complete append already finds the Ongoing record.
        assert log.fetched[0] == len(log.records)
        assert not first.done() and not offsets.done()  # answered once durable
        log.replicate()
        assert await first is ErrorCode.none
        assert await offsets is ErrorCode.none
        assert coord.txns["t"].partitions == {("a", 1), ("__consumer_offsets", 7)}

    run(go())
