"""The transaction coordinator loads and unloads single `__transaction_state` partitions.

The coordinator of a transactional id is the leader of its log partition, at that
partition's leader epoch (the coordinator epoch every marker carries). `load_partition`
rebuilds the partition's ids and finishes what was decided, `unload` forgets them. Two
coordinators on one MemoryLog stand for two brokers that lead the partition in turn.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from typing import Any, TypeVar

import pytest

from onceflow.clock import ManualClock
from onceflow.coordinator.transaction import coordinator as coordinator_module
from onceflow.coordinator.transaction.coordinator import (
    TransactionCoordinator,
    TxnCoordinatorConfig,
)
from onceflow.coordinator.transaction.log import decode_key, decode_value
from onceflow.coordinator.transaction.metadata import TopicPartition
from onceflow.coordinator.transaction.producer_ids import ProducerIdManager
from onceflow.coordinator.transaction.state import TxnState
from onceflow.errors import ErrorCode, KafkaError
from onceflow.records.record import decode_records
from onceflow.storage.fs import SimFileSystem

T = TypeVar("T")
PARTITIONS = 3
TIMEOUT_MS = 10_000
DATA = ("orders", 0)

Record = tuple[bytes | None, bytes | None]


def run(make_coro: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(make_coro())


class MemoryLog:
    """__transaction_state in memory. Reads wait for `gate` and see the partition as it was
    when they began; appends wait for `append_gate` when it is set."""

    def __init__(self) -> None:
        self.records: dict[int, list[Record]] = {}
        self.gate = asyncio.Event()
        self.gate.set()
        self.append_gate: asyncio.Event | None = None

    async def append(self, partition: int, batch: bytes) -> None:
        if self.append_gate is not None:
            await self.append_gate.wait()
        for record in decode_records(batch):
            self.records.setdefault(partition, []).append((record.key, record.value))

    def read(self, partition: int) -> AsyncIterator[Record]:
        snapshot = list(self.records.get(partition, []))

        async def records() -> AsyncIterator[Record]:
            await self.gate.wait()
            for record in snapshot:
                yield record

        return records()

    def states(self, txn_id: str) -> list[TxnState | None]:
        return [
            None if value is None else decode_value(txn_id, value).state
            for records in self.records.values()
            for key, value in records
            if key is not None and decode_key(key) == txn_id
        ]


class SyncLog(MemoryLog):
    """The single broker's kind of log: read in one go."""

    def read(self, partition: int) -> Iterable[Record]:  # type: ignore[override]
        return list(self.records.get(partition, []))


class Markers:
    """Records every marker write with its coordinator epoch; `block` holds writes, and
    `fail` makes them raise (counted in `attempts`)."""

    def __init__(self) -> None:
        self.written: list[tuple[int, int, int, bool, frozenset[TopicPartition]]] = []
        self.block: asyncio.Event | None = None
        self.fail = False
        self.attempts = 0

    async def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: frozenset[TopicPartition],
    ) -> None:
        self.attempts += 1
        if self.block is not None:
            await self.block.wait()
        if self.fail:
            raise OSError("the partition leader is unreachable")
        self.written.append((producer_id, producer_epoch, coordinator_epoch, commit, partitions))


def make(
    log: MemoryLog, *, clock: ManualClock | None = None, serve_all: bool = False
) -> tuple[TransactionCoordinator, Markers]:
    markers = Markers()
    ids = ProducerIdManager(SimFileSystem(), "/")
    config = TxnCoordinatorConfig(
        num_partitions=PARTITIONS, max_timeout_ms=60_000, id_expiration_ms=3_600_000
    )
    coord = TransactionCoordinator(
        log, markers, ids, clock or ManualClock(), config, 0, serve_all=serve_all
    )
    return coord, markers


def ids_in(partition: int, count: int) -> list[str]:
    probe, _ = make(MemoryLog())
    found = [f"tx-{i}" for i in range(200) if probe.partition_for(f"tx-{i}") == partition]
    return found[:count]


TX, TX2 = ids_in(0, 2)
(ELSEWHERE,) = ids_in(1, 1)


async def open_txn(coord: TransactionCoordinator, txn_id: str = TX) -> tuple[int, int]:
    init = await coord.init_producer_id(txn_id, TIMEOUT_MS)
    assert init.error is ErrorCode.none
    pid, epoch = init.producer_id, init.producer_epoch
    assert await coord.add_partitions(txn_id, pid, epoch, [DATA]) is ErrorCode.none
    return pid, epoch


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def until(condition: Callable[[], bool]) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.002)
    raise AssertionError("condition never met")


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(coordinator_module, "RETRY_BACKOFF_S", 0.005)
    monkeypatch.setattr(coordinator_module, "MAX_RETRY_BACKOFF_S", 0.01)


# ---------------------------------------------------------------- serving one partition


def test_nothing_is_served_until_a_partition_is_loaded_at_its_epoch() -> None:
    async def scenario() -> None:
        coord, _ = make(MemoryLog())
        assert (await coord.init_producer_id(TX, TIMEOUT_MS)).error is ErrorCode.not_coordinator
        assert await coord.end_txn(TX, 0, 0, True) is ErrorCode.not_coordinator
        assert coord.coordinator_epoch_for(0) is None
        await coord.load_partition(0, 5)
        assert coord.loaded_partitions == frozenset({0})
        assert coord.coordinator_epoch_for(0) == 5
        assert coord.owns(TX) and not coord.owns(ELSEWHERE)
        assert coord.coordinator_error(ELSEWHERE) is ErrorCode.not_coordinator
        assert (await coord.init_producer_id(TX, TIMEOUT_MS)).error is ErrorCode.none
        init = await coord.init_producer_id(ELSEWHERE, TIMEOUT_MS)
        assert init.error is ErrorCode.not_coordinator

    run(scenario)


def test_markers_carry_the_partitions_own_coordinator_epoch() -> None:
    async def scenario() -> None:
        coord, markers = make(MemoryLog())
        await coord.load_partition(0, 5)
        await coord.load_partition(1, 9)
        for txn_id in (TX, ELSEWHERE):
            pid, epoch = await open_txn(coord, txn_id)
            assert await coord.end_txn(txn_id, pid, epoch, commit=True) is ErrorCode.none
        await until(lambda: len(markers.written) == 2)
        assert sorted(epoch for _, _, epoch, _, _ in markers.written) == [5, 9]

    run(scenario)


def test_the_single_broker_path_uses_the_durable_epoch_for_every_partition() -> None:
    async def scenario() -> None:
        log = SyncLog()
        coord, markers = make(log, serve_all=True)
        coord.coordinator_epoch = 7  # as the broker sets it at start, before load()
        await coord.load()
        assert coord.loaded_partitions == frozenset(range(PARTITIONS))
        assert coord.coordinator_epoch_for(2) == 7
        pid, epoch = await open_txn(coord)
        assert await coord.end_txn(TX, pid, epoch, commit=False) is ErrorCode.none
        await until(lambda: bool(markers.written))
        assert markers.written == [(pid, epoch, 7, False, frozenset({DATA}))]

    run(scenario)


def test_before_load_a_single_broker_coordinator_serves_as_it_always_did() -> None:
    async def scenario() -> None:
        coord, _ = make(SyncLog(), serve_all=True)
        assert (await coord.init_producer_id(TX, TIMEOUT_MS)).error is ErrorCode.none
        # Finding out it is one of a cluster: only what it loads is served from then on.
        coord.serve_loaded_only()
        assert (await coord.init_producer_id(TX, TIMEOUT_MS)).error is ErrorCode.not_coordinator

    run(scenario)


# ---------------------------------------------------------------- failover


def test_a_prepared_commit_found_at_load_is_finished_at_the_new_epoch() -> None:
    async def scenario() -> None:
        log = MemoryLog()
        old, old_markers = make(log)
        await old.load_partition(0, 3)
        pid, epoch = await open_txn(old)
        old_markers.block = asyncio.Event()  # its broker dies before any marker is written
        assert await old.end_txn(TX, pid, epoch, commit=True) is ErrorCode.none
        await settle()
        old.unload(0, 4)
        assert TX not in old.txns

        new, new_markers = make(log)
        await new.load_partition(0, 4)
        await until(lambda: new.txns[TX].state is TxnState.COMPLETE_COMMIT)
        assert new_markers.written == [(pid, epoch, 4, True, frozenset({DATA}))]
        assert log.states(TX)[-2:] == [TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT]
        # The old one's marker write, already under way, ends; nothing else of it follows.
        records = sum(len(r) for r in log.records.values())
        old_markers.block.set()
        await settle()
        assert [epoch for _, _, epoch, _, _ in old_markers.written] == [3]
        assert sum(len(r) for r in log.records.values()) == records
        await old.close()
        await new.close()

    run(scenario)


def test_a_prepared_abort_found_at_load_is_finished_too() -> None:
    async def scenario() -> None:
        log = MemoryLog()
        old, old_markers = make(log)
        await old.load_partition(0, 1)
        pid, epoch = await open_txn(old)
        old_markers.block = asyncio.Event()
        assert await old.end_txn(TX, pid, epoch, commit=False) is ErrorCode.none
        old.unload(0)
        new, new_markers = make(log)
        await new.load_partition(0, 2)
        await until(lambda: new.txns[TX].state is TxnState.COMPLETE_ABORT)
        assert new_markers.written == [(pid, epoch, 2, False, frozenset({DATA}))]
        await old.close()

    run(scenario)


def test_unload_stops_marker_retries_and_releases_waiting_requests() -> None:
    async def scenario() -> None:
        coord, markers = make(MemoryLog())
        await coord.load_partition(0, 1)
        pid, epoch = await open_txn(coord)
        markers.fail = True
        assert await coord.end_txn(TX, pid, epoch, commit=True) is ErrorCode.none
        await until(lambda: markers.attempts >= 3)  # retrying, backing off
        # The next transaction's AddPartitions waits for this one's markers.
        waiting = asyncio.ensure_future(coord.add_partitions(TX, pid, epoch, [DATA]))
        await settle()
        assert not waiting.done()
        coord.unload(0)
        assert await asyncio.wait_for(waiting, 0.1) is ErrorCode.not_coordinator
        attempts = markers.attempts
        await asyncio.sleep(0.1)  # ten backoffs at least
        assert markers.attempts == attempts
        assert TX not in coord.txns
        assert coord.coordinator_error(TX) is ErrorCode.not_coordinator

    run(scenario)


def test_an_end_txn_in_flight_at_unload_answers_not_coordinator() -> None:
    async def scenario() -> None:
        log = MemoryLog()
        coord, markers = make(log)
        await coord.load_partition(0, 1)
        pid, epoch = await open_txn(coord)
        log.append_gate = asyncio.Event()  # the PrepareCommit append is slow
        ending = asyncio.ensure_future(coord.end_txn(TX, pid, epoch, commit=True))
        await settle()
        coord.unload(0)
        # A reload waits for the append under way, then reads it.
        reloading = asyncio.ensure_future(coord.load_partition(0, 2))
        await settle()
        assert coord.loading(TX) and not reloading.done()
        log.append_gate.set()
        assert await ending is ErrorCode.not_coordinator
        await reloading
        await until(lambda: coord.txns[TX].state is TxnState.COMPLETE_COMMIT)
        assert markers.written == [(pid, epoch, 2, True, frozenset({DATA}))]

    run(scenario)


def test_unload_forgets_ids_and_their_timeouts() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        log = MemoryLog()
        coord, markers = make(log, clock=clock)
        await coord.load_partition(0, 1)
        await coord.load_partition(1, 1)
        await open_txn(coord, TX)
        await open_txn(coord, ELSEWHERE)
        coord.unload(0)
        assert TX not in coord.txns and ELSEWHERE in coord.txns
        assert coord.txns.keys() == {ELSEWHERE}
        clock.advance(TIMEOUT_MS + 1)
        await coord.poll()
        await until(lambda: coord.txns[ELSEWHERE].state is TxnState.COMPLETE_ABORT)
        assert log.states(TX)[-1] is TxnState.ONGOING  # not aborted: not served here
        assert len(markers.written) == 1
        await coord.load_partition(0, 2)
        await coord.poll()
        await until(lambda: coord.txns[TX].state is TxnState.COMPLETE_ABORT)
        assert markers.written[-1][2] == 2

    run(scenario)


def test_an_idle_id_expires_at_the_new_coordinator_from_its_logged_time() -> None:
    # transactional.id.expiration.ms counts from the id's last logged update, not from
    # the move: the new coordinator neither forgets it early nor keeps it for ever.
    async def scenario() -> None:
        clock = ManualClock()
        log = MemoryLog()
        old, _ = make(log, clock=clock)
        await old.load_partition(0, 1)
        pid, epoch = await open_txn(old, TX)
        assert await old.end_txn(TX, pid, epoch, commit=True) is ErrorCode.none
        await until(lambda: old.txns[TX].state is TxnState.COMPLETE_COMMIT)
        old.unload(0)
        expiration_ms = old.config.id_expiration_ms
        clock.advance(expiration_ms - 1_000)
        new, _ = make(log, clock=clock)
        await new.load_partition(0, 2)
        await new.poll()
        assert new.txns[TX].state is TxnState.COMPLETE_COMMIT, "expired early"
        clock.advance(1_000)
        await new.poll()
        assert TX not in new.txns
        assert log.states(TX)[-1] is None  # the tombstone: a later load forgets it too

    run(scenario)


# ---------------------------------------------------------------- loading and epochs


def test_a_partition_being_loaded_answers_coordinator_load_in_progress() -> None:
    async def scenario() -> None:
        log = MemoryLog()
        writer, _ = make(log)
        await writer.load_partition(0, 1)
        pid, epoch = await open_txn(writer)
        writer.unload(0)

        coord, _ = make(log)
        log.gate.clear()
        loading = asyncio.ensure_future(coord.load_partition(0, 2))
        await settle()
        assert coord.loading(TX) and not coord.owns(TX)
        assert coord.loading_partitions == frozenset({0})
        assert coord.coordinator_error(TX) is ErrorCode.coordinator_load_in_progress
        init = await coord.init_producer_id(TX2, TIMEOUT_MS)
        assert init.error is ErrorCode.coordinator_load_in_progress
        assert await coord.add_partitions(TX, pid, epoch, [DATA]) is (
            ErrorCode.coordinator_load_in_progress
        )
        assert await coord.end_txn(TX, pid, epoch, True) is ErrorCode.coordinator_load_in_progress
        with pytest.raises(KafkaError) as refused:
            coord.verify(TX, pid, epoch, DATA)
        assert refused.value.code is ErrorCode.coordinator_load_in_progress
        log.gate.set()
        await loading
        assert coord.owns(TX) and coord.coordinator_epoch_for(0) == 2
        coord.verify(TX, pid, epoch, DATA)
        assert await coord.end_txn(TX, pid, epoch, True) is ErrorCode.none

    run(scenario)


def test_stale_loads_and_unloads_are_ignored_and_a_newer_epoch_reloads() -> None:
    async def scenario() -> None:
        log = MemoryLog()
        here, _ = make(log)
        there, _ = make(log)
        await here.load_partition(0, 5)
        first = await here.init_producer_id(TX, TIMEOUT_MS)
        here.unload(0, 4)  # older than the load it would undo
        assert here.owns(TX)
        await here.load_partition(0, 4)
        assert here.coordinator_epoch_for(0) == 5
        # Leadership went elsewhere (epoch 6) without this broker hearing of it.
        await there.load_partition(0, 6)
        bumped = await there.init_producer_id(TX, TIMEOUT_MS)
        assert bumped.producer_epoch == first.producer_epoch + 1
        await here.load_partition(0, 5)  # a duplicate: nothing re-read
        assert here.txns[TX].producer_epoch == first.producer_epoch
        await here.load_partition(0, 7)
        assert here.coordinator_epoch_for(0) == 7
        assert here.txns[TX].producer_epoch == bumped.producer_epoch

    run(scenario)


def test_an_unload_during_the_load_installs_nothing() -> None:
    async def scenario() -> None:
        log = MemoryLog()
        writer, _ = make(log)
        await writer.load_partition(0, 1)
        await open_txn(writer)
        writer.unload(0)
        coord, _ = make(log)
        log.gate.clear()
        loading = asyncio.ensure_future(coord.load_partition(0, 2))
        await settle()
        coord.unload(0, 2)
        log.gate.set()
        await loading
        assert TX not in coord.txns and not coord.owns(TX)
        assert coord.coordinator_error(TX) is ErrorCode.not_coordinator

    run(scenario)
