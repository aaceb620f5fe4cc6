"""Two-phase commit in the coordinator (KIP-939): enable2Pc and keepPreparedTxn."""

from __future__ import annotations

import asyncio

import pytest
from tests.unit.test_txn_coordinator import Markers, MemoryLog, make, run, settle

from onceflow.clock import ManualClock
from onceflow.coordinator.transaction.coordinator import (
    TransactionCoordinator,
    TxnCoordinatorConfig,
)
from onceflow.coordinator.transaction.log import decode_value, encode_value
from onceflow.coordinator.transaction.metadata import MAX_EPOCH, NO_TIMEOUT_MS
from onceflow.coordinator.transaction.producer_ids import ProducerIdManager
from onceflow.coordinator.transaction.state import TxnState
from onceflow.errors import ErrorCode, KafkaError
from onceflow.storage.fs import SimFileSystem

TP = ("a", 0)
DAY_MS = 86_400_000


def make_2pc(
    log: MemoryLog | None = None, clock: ManualClock | None = None, *, enabled: bool = True
) -> tuple[TransactionCoordinator, MemoryLog, Markers, ManualClock]:
    """A coordinator with `transaction.two.phase.commit.enable` as given."""
    log = log or MemoryLog()
    clock = clock or ManualClock()
    markers = Markers()
    config = TxnCoordinatorConfig(
        num_partitions=5, max_timeout_ms=60_000, id_expiration_ms=100_000, two_phase_commit=enabled
    )
    ids = ProducerIdManager(SimFileSystem(), "/")
    return TransactionCoordinator(log, markers, ids, clock, config, 1), log, markers, clock


def _last_value(log: MemoryLog, coord: TransactionCoordinator, txn_id: str) -> bytes:
    value = log.records[coord.partition_for(txn_id)][-1][1]
    assert value is not None
    return value


def test_enable2pc_is_refused_while_the_broker_switch_is_off() -> None:
    async def go() -> None:
        coord, _, _, _ = make_2pc(enabled=False)
        refused = await coord.init_producer_id("t", 10_000, two_phase=True)
        assert refused.error is ErrorCode.transactional_id_authorization_failed
        assert "t" not in coord.txns
        # The switch does not concern ordinary transactions, nor keepPreparedTxn alone.
        assert (await coord.init_producer_id("t", 10_000)).error is ErrorCode.none
        kept = await coord.init_producer_id("t", 10_000, keep_prepared=True)
        assert kept.error is ErrorCode.none

    run(go())


def test_enable2pc_ignores_the_timeout_and_logs_the_flag() -> None:
    async def go() -> None:
        coord, log, _, _ = make_2pc()
        # Above transaction.max.timeout.ms, or zero: ignored with enable2Pc, as the KIP says.
        for timeout in (10**9, 0):
            init = await coord.init_producer_id("t", timeout, two_phase=True)
            assert init.error is ErrorCode.none
            assert (init.ongoing_producer_id, init.ongoing_producer_epoch) == (-1, -1)
        meta = coord.txns["t"]
        assert meta.two_phase and meta.timeout_ms == NO_TIMEOUT_MS
        logged = decode_value("t", _last_value(log, coord, "t"))
        assert logged.two_phase and logged.timeout_ms == NO_TIMEOUT_MS
        # An init without the flag makes the id's transactions ordinary again.
        assert (await coord.init_producer_id("t", 10**9)).error is (
            ErrorCode.invalid_transaction_timeout
        )
        assert (await coord.init_producer_id("t", 10_000)).error is ErrorCode.none
        assert not coord.txns["t"].two_phase

    run(go())


def test_a_two_phase_transaction_is_never_aborted_and_its_id_never_expires() -> None:
    async def go() -> None:
        coord, _, markers, clock = make_2pc()
        two = await coord.init_producer_id("t", 1_000, two_phase=True)
        plain = await coord.init_producer_id("p", 1_000)
        for txn_id, init in (("t", two), ("p", plain)):
            assert (
                await coord.add_partitions(txn_id, init.producer_id, init.producer_epoch, [TP])
                is ErrorCode.none
            )
        clock.advance(30 * DAY_MS)  # past any timeout and transactional.id.expiration.ms
        await coord.poll()
        await settle()
        await coord.poll()
        assert coord.txns["p"].state is TxnState.COMPLETE_ABORT  # the ordinary one is
        meta = coord.txns["t"]
        assert meta.state is TxnState.ONGOING and meta.partitions == {TP}
        assert [m[0] for m in markers.written] == [plain.producer_id]
        assert await coord.end_txn("t", two.producer_id, two.producer_epoch, commit=True) is (
            ErrorCode.none
        )
        await settle()
        assert markers.written[-1] == (two.producer_id, two.producer_epoch, True, frozenset({TP}))

    run(go())


def test_keep_prepared_keeps_the_transaction_and_reports_it() -> None:
    async def go() -> None:
        coord, _, markers, _ = make_2pc()
        init = await coord.init_producer_id("t", 10_000, two_phase=True)
        pid, epoch = init.producer_id, init.producer_epoch
        await coord.add_partitions("t", pid, epoch, [TP, ("b", 1)])
        kept = await coord.init_producer_id("t", 10_000, two_phase=True, keep_prepared=True)
        assert (kept.error, kept.producer_id, kept.producer_epoch) == (
            ErrorCode.none,
            pid,
            epoch + 1,
        )
        assert (kept.ongoing_producer_id, kept.ongoing_producer_epoch) == (pid, epoch)
        meta = coord.txns["t"]
        assert meta.state is TxnState.ONGOING and meta.partitions == {TP, ("b", 1)}
        assert markers.written == []
        # The crashed instance is fenced; the new one may only complete the transaction.
        assert await coord.end_txn("t", pid, epoch, commit=True) is ErrorCode.producer_fenced
        assert await coord.add_partitions("t", pid, epoch + 1, [("c", 0)]) is (
            ErrorCode.invalid_txn_state
        )
        for write_epoch, code in (
            (epoch, ErrorCode.producer_fenced),
            (epoch + 1, ErrorCode.transaction_abortable),
        ):
            with pytest.raises(KafkaError) as refused:
                coord.verify("t", pid, write_epoch, TP)
            assert refused.value.code is code
        # A second crash and keep reports the same transaction, at a newer instance epoch.
        again = await coord.init_producer_id("t", 10_000, two_phase=True, keep_prepared=True)
        assert (again.producer_epoch, again.ongoing_producer_epoch) == (epoch + 2, epoch)
        assert await coord.end_txn("t", pid, epoch + 1, commit=True) is ErrorCode.producer_fenced
        assert await coord.end_txn("t", pid, epoch + 2, commit=True) is ErrorCode.none
        await settle()
        # The markers carry the completing instance's epoch, fencing every earlier one.
        assert markers.written == [(pid, epoch + 2, True, frozenset({TP, ("b", 1)}))]
        assert meta.state is TxnState.COMPLETE_COMMIT and not meta.kept
        # The next transaction is an ordinary one of the new instance.
        assert await coord.add_partitions("t", pid, epoch + 2, [TP]) is ErrorCode.none

    run(go())


def test_keep_prepared_then_end_txn_v5_aborts_with_a_bump() -> None:
    async def go() -> None:
        coord, _, markers, _ = make_2pc()
        init = await coord.init_producer_id("t", 10_000, two_phase=True)
        pid, epoch = init.producer_id, init.producer_epoch
        await coord.add_partitions("t", pid, epoch, [TP], client_version=2)
        kept = await coord.init_producer_id("t", 10_000, two_phase=True, keep_prepared=True)
        ended = await coord.end_txn_bumping("t", pid, kept.producer_epoch, commit=False)
        assert (ended.error, ended.producer_epoch) == (ErrorCode.none, epoch + 2)
        await settle()
        assert markers.written == [(pid, epoch + 2, False, frozenset({TP}))]
        assert coord.txns["t"].state is TxnState.COMPLETE_ABORT

    run(go())


def test_without_keep_prepared_a_new_instance_aborts_the_open_transaction() -> None:
    async def go() -> None:
        coord, _, markers, _ = make_2pc()
        init = await coord.init_producer_id("t", 10_000, two_phase=True)
        pid, epoch = init.producer_id, init.producer_epoch
        await coord.add_partitions("t", pid, epoch, [TP])
        fenced = await coord.init_producer_id("t", 10_000, two_phase=True)
        assert fenced.error is ErrorCode.concurrent_transactions
        await settle()
        assert markers.written == [(pid, epoch + 1, False, frozenset({TP}))]
        retried = await coord.init_producer_id("t", 10_000, two_phase=True)
        assert (retried.error, retried.producer_epoch) == (ErrorCode.none, epoch + 2)
        assert (retried.ongoing_producer_id, retried.ongoing_producer_epoch) == (-1, -1)

    run(go())


def test_keep_prepared_without_an_open_transaction_is_an_ordinary_init() -> None:
    async def go() -> None:
        coord, _, _, _ = make_2pc()
        first = await coord.init_producer_id("t", 10_000, two_phase=True, keep_prepared=True)
        assert (first.error, first.producer_epoch) == (ErrorCode.none, 0)
        assert (first.ongoing_producer_id, first.ongoing_producer_epoch) == (-1, -1)
        again = await coord.init_producer_id("t", 10_000, two_phase=True, keep_prepared=True)
        assert (again.producer_epoch, again.ongoing_producer_epoch) == (1, -1)

    run(go())


def test_keep_prepared_without_enable2pc_keeps_with_the_requested_timeout() -> None:
    """The KIP allows keepPreparedTxn alone; the transaction then has that timeout again."""

    async def go() -> None:
        coord, _, markers, clock = make_2pc()
        init = await coord.init_producer_id("t", 10_000, two_phase=True)
        await coord.add_partitions("t", init.producer_id, init.producer_epoch, [TP])
        kept = await coord.init_producer_id("t", 5_000, keep_prepared=True)
        assert (kept.error, kept.ongoing_producer_epoch) == (ErrorCode.none, init.producer_epoch)
        assert not coord.txns["t"].two_phase
        clock.advance(6_000)
        await coord.poll()
        await settle()
        assert coord.txns["t"].state is TxnState.COMPLETE_ABORT
        assert markers.written[-1][1:3] == (kept.producer_epoch + 1, False)

    run(go())


def test_keep_prepared_is_refused_while_the_transaction_ends_or_at_the_last_epochs() -> None:
    async def go() -> None:
        coord, _, markers, _ = make_2pc()
        init = await coord.init_producer_id("t", 10_000, two_phase=True)
        pid, epoch = init.producer_id, init.producer_epoch
        await coord.add_partitions("t", pid, epoch, [TP])
        markers.block = asyncio.Event()
        await coord.end_txn("t", pid, epoch, commit=True)
        ending = await coord.init_producer_id("t", 10_000, two_phase=True, keep_prepared=True)
        assert ending.error is ErrorCode.concurrent_transactions
        markers.block.set()
        await settle()
        meta = coord.txns["t"]
        meta.producer_epoch = MAX_EPOCH - 1  # as if 32766 instances had come and gone
        await coord.add_partitions("t", pid, MAX_EPOCH - 1, [TP])
        exhausted = await coord.init_producer_id("t", 10_000, two_phase=True, keep_prepared=True)
        assert exhausted.error is ErrorCode.invalid_txn_state
        assert meta.state is TxnState.ONGOING and meta.producer_epoch == MAX_EPOCH - 1

    run(go())


def test_the_flag_and_the_kept_epoch_are_rebuilt_from_the_log() -> None:
    async def go() -> None:
        coord, log, _, clock = make_2pc()
        init = await coord.init_producer_id("t", 10_000, two_phase=True)
        pid, epoch = init.producer_id, init.producer_epoch
        await coord.add_partitions("t", pid, epoch, [TP])
        await coord.init_producer_id("t", 10_000, two_phase=True, keep_prepared=True)
        await coord.close()
        restarted, _, markers, _ = make_2pc(log, clock)
        await restarted.load()
        meta = restarted.txns["t"]
        assert meta.two_phase and meta.kept_epoch == epoch and meta.state is TxnState.ONGOING
        clock.advance(30 * DAY_MS)
        await restarted.poll()
        await settle()
        assert meta.state is TxnState.ONGOING and markers.written == []
        kept = await restarted.init_producer_id("t", 1, two_phase=True, keep_prepared=True)
        assert (kept.producer_epoch, kept.ongoing_producer_epoch) == (epoch + 2, epoch)
        assert await restarted.end_txn("t", pid, epoch + 2, commit=False) is ErrorCode.none
        await settle()
        assert markers.written == [(pid, epoch + 2, False, frozenset({TP}))]

    run(go())


def test_log_value_version_3_is_written_only_for_two_phase_commit() -> None:
    async def go() -> None:
        coord, log, _, _ = make_2pc()
        await coord.init_producer_id("plain", 10_000)
        plain = _last_value(log, coord, "plain")
        assert plain[:2] == b"\x00\x01"
        await coord.init_producer_id("two", 10_000, two_phase=True)
        two = _last_value(log, coord, "two")
        assert two[:2] == b"\x00\x03"
        transit = decode_value("two", two)
        assert transit.two_phase and transit.kept_epoch == -1
        assert encode_value(transit) == two

    run(go())


def test_the_plain_coordinator_defaults_to_the_switch_off() -> None:
    async def go() -> None:
        coord, _, _, _ = make()
        refused = await coord.init_producer_id("t", 10_000, two_phase=True)
        assert refused.error is ErrorCode.transactional_id_authorization_failed

    run(go())
