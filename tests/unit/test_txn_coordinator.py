"""The transaction coordinator against an in-memory log and marker writer."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import pytest

from onceflow.clock import ManualClock
from onceflow.coordinator.transaction.coordinator import (
    TransactionCoordinator,
    TxnCoordinatorConfig,
    txn_partition_for,
)
from onceflow.coordinator.transaction.log import decode_key, decode_value, encode_value
from onceflow.coordinator.transaction.metadata import TopicPartition
from onceflow.coordinator.transaction.producer_ids import ProducerIdManager
from onceflow.coordinator.transaction.state import (
    VALID_PREVIOUS_STATES,
    IllegalTransition,
    TxnState,
    check_transition,
)
from onceflow.errors import ErrorCode, KafkaError
from onceflow.records.record import decode_records
from onceflow.storage.fs import SimFileSystem


class MemoryLog:
    def __init__(self) -> None:
        self.records: dict[int, list[tuple[bytes | None, bytes | None]]] = {}
        self.fail = False

    async def append(self, partition: int, batch: bytes) -> None:
        if self.fail:
            raise OSError("disk full")
        for record in decode_records(batch):
            self.records.setdefault(partition, []).append((record.key, record.value))

    def read(self, partition: int) -> Iterable[tuple[bytes | None, bytes | None]]:
        return list(self.records.get(partition, []))

    def states(self, txn_id: str) -> list[TxnState | None]:
        out: list[TxnState | None] = []
        for records in self.records.values():
            for key, value in records:
                if key is not None and decode_key(key) == txn_id:
                    out.append(None if value is None else decode_value(txn_id, value).state)
        return out


class Markers:
    def __init__(self) -> None:
        self.written: list[tuple[int, int, bool, frozenset[TopicPartition]]] = []
        self.block: asyncio.Event | None = None

    async def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: frozenset[TopicPartition],
    ) -> None:
        if self.block is not None:
            await self.block.wait()
        self.written.append((producer_id, producer_epoch, commit, partitions))


def make(
    log: MemoryLog | None = None, clock: ManualClock | None = None
) -> tuple[TransactionCoordinator, MemoryLog, Markers, ManualClock]:
    log = log or MemoryLog()
    clock = clock or ManualClock()
    markers = Markers()
    ids = ProducerIdManager(SimFileSystem(), "/")
    config = TxnCoordinatorConfig(num_partitions=5, max_timeout_ms=60_000, id_expiration_ms=100_000)
    return TransactionCoordinator(log, markers, ids, clock, config, 1), log, markers, clock


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


def run(coro: object) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


def test_state_table_allows_exactly_the_listed_transitions() -> None:
    for target, previous in VALID_PREVIOUS_STATES.items():
        for current in TxnState:
            if current in previous:
                check_transition(current, target)
            else:
                with pytest.raises(IllegalTransition, match=target.display):
                    check_transition(current, target)


def test_partition_mapping_is_kafkas() -> None:
    # Java: "my-group".hashCode() == -1906497762 -> 1906497762 % 50 == 12
    assert txn_partition_for("my-group", 50) == 12


def test_new_id_then_epoch_bumps_on_each_init() -> None:
    async def go() -> None:
        coord, log, _, _ = make()
        first = await coord.init_producer_id("t", 10_000)
        assert first.error is ErrorCode.none and first.producer_epoch == 0
        second = await coord.init_producer_id("t", 10_000)
        assert second.producer_id == first.producer_id and second.producer_epoch == 1
        assert log.states("t") == [TxnState.EMPTY, TxnState.EMPTY]

    run(go())


def test_timeout_above_the_maximum_is_refused() -> None:
    async def go() -> None:
        coord, _, _, _ = make()
        result = await coord.init_producer_id("t", 61_000)
        assert result.error is ErrorCode.invalid_transaction_timeout

    run(go())


def test_commit_writes_prepare_markers_then_complete() -> None:
    async def go() -> None:
        coord, log, markers, _ = make()
        init = await coord.init_producer_id("t", 10_000)
        pid, epoch = init.producer_id, init.producer_epoch
        assert await coord.add_partitions("t", pid, epoch, [("a", 0), ("b", 1)]) is ErrorCode.none
        assert await coord.end_txn("t", pid, epoch, commit=True) is ErrorCode.none
        await settle()
        assert markers.written == [(pid, epoch, True, frozenset({("a", 0), ("b", 1)}))]
        assert log.states("t")[-3:] == [
            TxnState.ONGOING,
            TxnState.PREPARE_COMMIT,
            TxnState.COMPLETE_COMMIT,
        ]
        # A retried EndTxn of the same outcome succeeds; the other outcome does not.
        assert await coord.end_txn("t", pid, epoch, commit=True) is ErrorCode.none
        assert await coord.end_txn("t", pid, epoch, commit=False) is ErrorCode.invalid_txn_state

    run(go())


def test_end_txn_while_markers_are_written_is_concurrent() -> None:
    async def go() -> None:
        coord, _, markers, _ = make()
        init = await coord.init_producer_id("t", 10_000)
        pid, epoch = init.producer_id, init.producer_epoch
        await coord.add_partitions("t", pid, epoch, [("a", 0)])
        markers.block = asyncio.Event()
        await coord.end_txn("t", pid, epoch, commit=True)
        await settle()
        retry = await coord.end_txn("t", pid, epoch, commit=True)
        assert retry is ErrorCode.concurrent_transactions
        assert await coord.add_partitions("t", pid, epoch, [("a", 0)]) is (
            ErrorCode.concurrent_transactions
        )
        markers.block.set()
        await settle()
        assert coord.txns["t"].state is TxnState.COMPLETE_COMMIT

    run(go())


def test_the_next_transaction_waits_for_the_markers_instead_of_failing() -> None:
    """Kafka answers CONCURRENT_TRANSACTIONS, and librdkafka then backs off 20 ms, a fifth
    of a 100 ms transaction; the coordinator waits for the markers (a few ms) instead."""

    async def go() -> None:
        coord, log, markers, _ = make()
        init = await coord.init_producer_id("t", 10_000)
        pid, epoch = init.producer_id, init.producer_epoch
        await coord.add_partitions("t", pid, epoch, [("a", 0)])
        markers.block = asyncio.Event()
        assert await coord.end_txn("t", pid, epoch, commit=True) is ErrorCode.none
        # Sent at once, before the markers task has even started.
        adding = asyncio.ensure_future(coord.add_partitions("t", pid, epoch, [("b", 0)]))
        await settle()
        assert not adding.done(), "held while the markers are written"
        markers.block.set()
        assert await asyncio.wait_for(adding, 5) is ErrorCode.none
        assert coord.txns["t"].state is TxnState.ONGOING
        assert coord.txns["t"].partitions == frozenset({("b", 0)})
        assert log.states("t")[-3:] == [
            TxnState.PREPARE_COMMIT,
            TxnState.COMPLETE_COMMIT,
            TxnState.ONGOING,
        ]

    run(go())


def test_a_second_instance_fences_the_first_and_aborts_its_transaction() -> None:
    async def go() -> None:
        coord, _, markers, _ = make()
        old = await coord.init_producer_id("t", 10_000)
        await coord.add_partitions("t", old.producer_id, old.producer_epoch, [("a", 0)])
        retry = await coord.init_producer_id("t", 10_000)
        assert retry.error is ErrorCode.concurrent_transactions
        await settle()
        # The abort markers carry the bumped epoch: that fences the old instance's writes.
        assert markers.written == [
            (old.producer_id, old.producer_epoch + 1, False, frozenset({("a", 0)}))
        ]
        new = await coord.init_producer_id("t", 10_000)
        assert new.error is ErrorCode.none and new.producer_epoch == old.producer_epoch + 2
        fenced = await coord.add_partitions("t", old.producer_id, old.producer_epoch, [("a", 1)])
        assert fenced is ErrorCode.producer_fenced
        assert await coord.end_txn("t", old.producer_id, old.producer_epoch, True) is (
            ErrorCode.producer_fenced
        )

    run(go())


def test_a_zombies_epoch_bump_never_aborts_the_new_instances_transaction() -> None:
    """Kafka aborts an ongoing transaction for any KIP-360 bump naming its producer id, so
    a fenced zombie's bump at its old epoch aborted the new instance's transaction."""

    async def go() -> None:
        coord, log, markers, _ = make()
        old = await coord.init_producer_id("t", 10_000)
        pid = old.producer_id
        new = await coord.init_producer_id("t", 10_000)
        assert await coord.add_partitions("t", pid, new.producer_epoch, [("a", 0)]) is (
            ErrorCode.none
        )
        zombie = await coord.init_producer_id("t", 10_000, pid, old.producer_epoch)
        assert zombie.error is ErrorCode.producer_fenced
        await settle()
        assert markers.written == []
        assert log.states("t")[-1] is TxnState.ONGOING
        assert await coord.end_txn("t", pid, new.producer_epoch, commit=True) is ErrorCode.none
        await settle()
        assert markers.written == [(pid, new.producer_epoch, True, frozenset({("a", 0)}))]
        # A bump at the current epoch still aborts the ongoing transaction, as Kafka's.
        assert await coord.add_partitions("t", pid, new.producer_epoch, [("a", 1)]) is (
            ErrorCode.none
        )
        bump = await coord.init_producer_id("t", 10_000, pid, new.producer_epoch)
        assert bump.error is ErrorCode.concurrent_transactions
        await settle()
        assert markers.written[-1] == (pid, new.producer_epoch + 1, False, frozenset({("a", 1)}))

    run(go())


def test_wrong_producer_id_is_a_mapping_error() -> None:
    async def go() -> None:
        coord, _, _, _ = make()
        init = await coord.init_producer_id("t", 10_000)
        error = await coord.add_partitions("t", init.producer_id + 1, 0, [("a", 0)])
        assert error is ErrorCode.invalid_producer_id_mapping
        assert await coord.add_partitions("nope", 1, 0, [("a", 0)]) is (
            ErrorCode.invalid_producer_id_mapping
        )

    run(go())


def test_a_stalled_transaction_is_aborted_by_timeout_and_its_producer_fenced() -> None:
    async def go() -> None:
        coord, _, markers, clock = make()
        init = await coord.init_producer_id("t", 5_000)
        await coord.add_partitions("t", init.producer_id, init.producer_epoch, [("a", 0)])
        clock.advance(4_000)
        await coord.poll()
        assert coord.txns["t"].state is TxnState.ONGOING
        clock.advance(2_000)
        await coord.poll()
        await settle()
        assert coord.txns["t"].state is TxnState.COMPLETE_ABORT
        assert markers.written[-1][1:3] == (init.producer_epoch + 1, False)
        late = await coord.end_txn("t", init.producer_id, init.producer_epoch, commit=True)
        assert late is ErrorCode.producer_fenced

    run(go())


def test_verify_accepts_only_partitions_of_the_ongoing_transaction() -> None:
    """Kafka's verify-only answers (TransactionCoordinator.handleVerifyPartitionsInTransaction),
    which the broker maps for the client's version."""

    def refusal(txn_id: str, pid: int, epoch: int, tp: tuple[str, int]) -> ErrorCode:
        with pytest.raises(KafkaError) as refused:
            coord.verify(txn_id, pid, epoch, tp)
        return refused.value.code

    async def go() -> None:
        init = await coord.init_producer_id("t", 10_000)
        pid, epoch = init.producer_id, init.producer_epoch
        await coord.add_partitions("t", pid, epoch, [("a", 0)])
        coord.verify("t", pid, epoch, ("a", 0))
        assert refusal("t", pid, epoch, ("a", 1)) is ErrorCode.transaction_abortable
        assert refusal("t", pid + 1, epoch, ("a", 0)) is ErrorCode.invalid_producer_id_mapping
        assert refusal("other", pid, epoch, ("a", 0)) is ErrorCode.invalid_producer_id_mapping
        assert refusal("t", pid, epoch + 1, ("a", 0)) is ErrorCode.producer_fenced
        assert refusal("t", pid, epoch - 1, ("a", 0)) is ErrorCode.producer_fenced
        await coord.end_txn("t", pid, epoch, commit=False)
        # Markers being written: the transaction is ending (retriable for the producer).
        assert refusal("t", pid, epoch, ("a", 0)) is ErrorCode.concurrent_transactions
        await settle()
        # A produce that arrives after the abort cannot open a hanging transaction.
        assert refusal("t", pid, epoch, ("a", 0)) is ErrorCode.transaction_abortable

    coord, _, _, _ = make()
    run(go())


def test_idle_ids_expire_with_a_tombstone() -> None:
    async def go() -> None:
        coord, log, _, clock = make()
        await coord.init_producer_id("t", 10_000)
        clock.advance(100_001)
        await coord.poll()
        assert "t" not in coord.txns
        assert log.states("t")[-1] is None

    run(go())


def test_recovery_finishes_a_prepared_commit_from_the_log_alone() -> None:
    async def go() -> None:
        coord, log, markers, clock = make()
        init = await coord.init_producer_id("t", 10_000)
        pid, epoch = init.producer_id, init.producer_epoch
        await coord.add_partitions("t", pid, epoch, [("a", 0)])
        markers.block = asyncio.Event()  # "crash" before any marker is written
        await coord.end_txn("t", pid, epoch, commit=True)
        await coord.close()
        restarted, _, new_markers, _ = make(log, clock)
        await restarted.load()
        await settle()
        assert new_markers.written == [(pid, epoch, True, frozenset({("a", 0)}))]
        assert restarted.txns["t"].state is TxnState.COMPLETE_COMMIT

    run(go())


def test_a_failed_log_append_leaves_the_state_unchanged() -> None:
    async def go() -> None:
        coord, log, _, _ = make()
        init = await coord.init_producer_id("t", 10_000)
        log.fail = True
        error = await coord.add_partitions("t", init.producer_id, init.producer_epoch, [("a", 0)])
        assert error is ErrorCode.coordinator_not_available
        meta = coord.txns["t"]
        assert meta.state is TxnState.EMPTY and meta.pending is None and not meta.partitions
        log.fail = False
        ok = await coord.add_partitions("t", init.producer_id, init.producer_epoch, [("a", 0)])
        assert ok is ErrorCode.none

    run(go())


def test_log_value_round_trips() -> None:
    coord, _, _, _ = make()
    run(coord.init_producer_id("t", 10_000))
    transit = coord.txns["t"].current()
    assert decode_value("t", encode_value(transit)) == transit
