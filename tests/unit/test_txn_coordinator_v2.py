"""Transaction version 2 in the coordinator (KIP-890 part 2): an epoch bump at every end."""

from __future__ import annotations

import asyncio

from tests.unit.test_txn_coordinator import make, run, settle

from onceflow.coordinator.transaction.log import decode_key, decode_value, encode_value
from onceflow.coordinator.transaction.metadata import MAX_EPOCH
from onceflow.coordinator.transaction.state import TxnState
from onceflow.errors import ErrorCode, KafkaError

TP = ("a", 0)


def test_every_end_bumps_the_epoch_and_markers_carry_it() -> None:
    async def go() -> None:
        coord, log, markers, _ = make()
        init = await coord.init_producer_id("t", 10_000)
        pid, epoch = init.producer_id, init.producer_epoch
        assert await coord.add_partitions("t", pid, epoch, [TP], client_version=2) is (
            ErrorCode.none
        )
        ended = await coord.end_txn_bumping("t", pid, epoch, commit=True)
        assert (ended.error, ended.producer_id, ended.producer_epoch) == (
            ErrorCode.none,
            pid,
            epoch + 1,
        )
        await settle()
        assert markers.written[-1] == (pid, epoch + 1, True, frozenset({TP}))
        assert coord.txns["t"].state is TxnState.COMPLETE_COMMIT
        # A retry at the epoch before the bump is answered as the first call was.
        again = await coord.end_txn_bumping("t", pid, epoch, commit=True)
        assert (again.error, again.producer_epoch) == (ErrorCode.none, epoch + 1)
        # The old epoch can neither add nor end anything any more.
        assert await coord.add_partitions("t", pid, epoch, [TP], client_version=2) is (
            ErrorCode.producer_fenced
        )
        wrong = await coord.end_txn_bumping("t", pid, epoch, commit=False)
        assert wrong.error is ErrorCode.invalid_txn_state
        # The next transaction, at the bumped epoch, aborts with another bump.
        assert await coord.add_partitions("t", pid, epoch + 1, [TP], client_version=2) is (
            ErrorCode.none
        )
        aborted = await coord.end_txn_bumping("t", pid, epoch + 1, commit=False)
        assert aborted.producer_epoch == epoch + 2
        await settle()
        assert markers.written[-1] == (pid, epoch + 2, False, frozenset({TP}))
        # The log holds the client's transaction version, so a reload rebuilds it.
        value = log.records[coord.partition_for("t")][-1][1]
        assert value is not None and decode_value("t", value).client_version == 2

    run(go())


def test_an_empty_abort_bumps_without_markers() -> None:
    async def go() -> None:
        coord, _, markers, _ = make()
        init = await coord.init_producer_id("t", 10_000)
        pid, epoch = init.producer_id, init.producer_epoch
        assert (await coord.end_txn_bumping("t", pid, epoch, commit=True)).error is (
            ErrorCode.invalid_txn_state
        )
        aborted = await coord.end_txn_bumping("t", pid, epoch, commit=False)
        assert (aborted.error, aborted.producer_epoch) == (ErrorCode.none, epoch + 1)
        await settle()
        assert coord.txns["t"].state is TxnState.COMPLETE_ABORT
        assert all(not partitions for *_, partitions in markers.written)

    run(go())


def test_an_exhausted_epoch_rolls_to_a_new_producer_id() -> None:
    async def go() -> None:
        coord, log, markers, _ = make()
        init = await coord.init_producer_id("t", 10_000)
        pid = init.producer_id
        meta = coord.txns["t"]
        meta.producer_epoch = MAX_EPOCH - 1  # as if 32766 transactions had ended
        assert await coord.add_partitions("t", pid, MAX_EPOCH - 1, [TP], client_version=2) is (
            ErrorCode.none
        )
        ended = await coord.end_txn_bumping("t", pid, MAX_EPOCH - 1, commit=True)
        assert ended.error is ErrorCode.none
        assert ended.producer_id != pid and ended.producer_epoch == 0
        await settle()
        # The markers end the old id's transaction at the last epoch, fencing it for good.
        assert markers.written[-1] == (pid, MAX_EPOCH, True, frozenset({TP}))
        assert (meta.producer_id, meta.producer_epoch) == (ended.producer_id, 0)
        assert (meta.last_producer_id, meta.last_producer_epoch) == (pid, MAX_EPOCH - 1)
        # A retry with the old id and epoch gets the new ones.
        again = await coord.end_txn_bumping("t", pid, MAX_EPOCH - 1, commit=True)
        assert (again.error, again.producer_id, again.producer_epoch) == (
            ErrorCode.none,
            ended.producer_id,
            0,
        )
        # The new id works at once.
        new = ended.producer_id
        assert await coord.add_partitions("t", new, 0, [TP], client_version=2) is ErrorCode.none
        # The Prepare record held the next id, so a coordinator that crashed before the
        # Complete record would roll over the same way after loading.
        prepares = [
            decode_value("t", v)
            for k, v in log.records[coord.partition_for("t")]
            if k is not None and v is not None and decode_key(k) == "t"
        ]
        (prepare,) = [t for t in prepares if t.state is TxnState.PREPARE_COMMIT]
        assert (prepare.next_producer_id, prepare.producer_epoch) == (new, MAX_EPOCH)

    run(go())


def test_a_reload_after_the_prepare_finishes_with_the_bumped_epoch_and_rolls_over() -> None:
    async def go() -> None:
        coord, log, markers, _ = make()
        init = await coord.init_producer_id("t", 10_000)
        pid = init.producer_id
        coord.txns["t"].producer_epoch = MAX_EPOCH - 1
        await coord.add_partitions("t", pid, MAX_EPOCH - 1, [TP], client_version=2)
        markers.block = asyncio.Event()  # the markers never get written
        ended = await coord.end_txn_bumping("t", pid, MAX_EPOCH - 1, commit=False)
        assert ended.error is ErrorCode.none
        await coord.close()  # the broker dies after PrepareAbort
        again, _, markers2, _ = make(log)
        await again.load()
        await settle()
        assert markers2.written == [(pid, MAX_EPOCH, False, frozenset({TP}))]
        meta = again.txns["t"]
        assert meta.state is TxnState.COMPLETE_ABORT
        assert (meta.producer_id, meta.producer_epoch) == (ended.producer_id, 0)

    run(go())


def test_a_transaction_version_0_record_stays_version_1() -> None:
    async def go() -> None:
        coord, log, _, _ = make()
        init = await coord.init_producer_id("t", 10_000)
        await coord.add_partitions("t", init.producer_id, init.producer_epoch, [TP])
        for _, value in log.records[coord.partition_for("t")]:
            assert value is not None and value[:2] == b"\x00\x01"
        transit = coord.txns["t"].current()
        assert decode_value("t", encode_value(transit)) == transit

    run(go())


def test_no_producer_id_block_is_coordinator_not_available_not_a_crash() -> None:
    """On a cluster the blocks come from ZooKeeper, whose failure is a KafkaError."""

    def no_block(size: int) -> tuple[int, int]:
        raise KafkaError(ErrorCode.coordinator_not_available, "ZooKeeper away")

    async def go() -> None:
        coord, _, _, _ = make()
        init = await coord.init_producer_id("t", 10_000)
        pid = init.producer_id
        coord.txns["t"].producer_epoch = MAX_EPOCH - 1
        await coord.add_partitions("t", pid, MAX_EPOCH - 1, [TP], client_version=2)
        coord._producer_ids._next = coord._producer_ids._block_end  # the block is used up
        coord._producer_ids.allocate_block = no_block
        ended = await coord.end_txn_bumping("t", pid, MAX_EPOCH - 1, commit=True)
        assert ended.error is ErrorCode.coordinator_not_available
        assert coord.txns["t"].state is TxnState.ONGOING  # nothing was logged
        fresh = await coord.init_producer_id("new-id", 10_000)
        assert fresh.error is ErrorCode.coordinator_not_available

    run(go())


def test_a_fenced_instance_never_gets_the_epoch_back_through_end_txn() -> None:
    """A fence (a new instance's InitProducerId, or the timeout) bumps the epoch by one, as
    an EndTxn v5 does: the old instance's EndTxn at its epoch must be refused, not taken for
    a retry of an end that bumped, which would hand it the new epoch."""

    async def go(fence: str) -> None:
        coord, _, _, clock = make()
        init = await coord.init_producer_id("t", 10_000)
        pid, epoch = init.producer_id, init.producer_epoch
        assert await coord.add_partitions("t", pid, epoch, [TP], client_version=2) is (
            ErrorCode.none
        )
        if fence == "new instance":
            fenced = await coord.init_producer_id("t", 10_000)
            assert fenced.error is ErrorCode.concurrent_transactions
        else:
            clock.advance(10_001)
            await coord.poll()
        await settle()
        assert coord.txns["t"].producer_epoch == epoch + 1
        for commit in (False, True):
            zombie = await coord.end_txn_bumping("t", pid, epoch, commit=commit)
            assert zombie.error is ErrorCode.producer_fenced, (fence, commit)
        assert await coord.add_partitions("t", pid, epoch, [TP], client_version=2) is (
            ErrorCode.producer_fenced
        )

    for fence in ("new instance", "timeout"):
        run(go(fence))


def test_the_next_end_while_the_last_ones_markers_are_written_is_retriable() -> None:
    """KAFKA-18464: a client that committed (and got the bumped epoch) may abort its next,
    empty transaction at once; while the commit's markers are written that end must be
    CONCURRENT_TRANSACTIONS, never PRODUCER_FENCED. Also when the commit rolled the
    producer id over (the new id is handed out before the Complete record)."""

    async def go() -> None:
        coord, _, markers, _ = make()
        init = await coord.init_producer_id("t", 10_000)
        pid = init.producer_id
        for start_epoch in (init.producer_epoch, MAX_EPOCH - 1):
            coord.txns["t"].producer_epoch = start_epoch
            assert (
                await coord.add_partitions("t", pid, start_epoch, [TP], client_version=2)
                is ErrorCode.none
            )
            markers.block = asyncio.Event()
            ended = await coord.end_txn_bumping("t", pid, start_epoch, commit=True)
            assert ended.error is ErrorCode.none
            early = await coord.end_txn_bumping(
                "t", ended.producer_id, ended.producer_epoch, commit=False
            )
            assert early.error is ErrorCode.concurrent_transactions
            markers.block.set()
            await settle()
            empty = await coord.end_txn_bumping(
                "t", ended.producer_id, ended.producer_epoch, commit=False
            )
            assert (empty.error, empty.producer_id, empty.producer_epoch) == (
                ErrorCode.none,
                ended.producer_id,
                ended.producer_epoch + 1,
            )
            pid = empty.producer_id
            markers.block = None

    run(go())


def test_the_next_end_right_after_a_commit_waits_for_the_markers_instead_of_failing() -> None:
    async def go() -> None:
        coord, _, _, _ = make()
        init = await coord.init_producer_id("t", 10_000)
        pid, epoch = init.producer_id, init.producer_epoch
        await coord.add_partitions("t", pid, epoch, [TP], client_version=2)
        ended = await coord.end_txn_bumping("t", pid, epoch, commit=True)
        # No settling: the markers are still being written when the next end arrives.
        assert coord.txns["t"].state is TxnState.PREPARE_COMMIT
        empty = await coord.end_txn_bumping("t", pid, ended.producer_epoch, commit=False)
        assert (empty.error, empty.producer_epoch) == (ErrorCode.none, epoch + 2)

    run(go())


def test_the_next_transactions_first_add_at_the_rolled_id_waits_for_the_end() -> None:
    """KAFKA-18660: after an end that rolled the producer id, the client's first write of
    the next transaction names the new id before the Complete record moved it there."""

    async def go() -> None:
        coord, _, markers, _ = make()
        init = await coord.init_producer_id("t", 10_000)
        pid = init.producer_id
        coord.txns["t"].producer_epoch = MAX_EPOCH - 1
        await coord.add_partitions("t", pid, MAX_EPOCH - 1, [TP], client_version=2)
        markers.block = asyncio.Event()
        ended = await coord.end_txn_bumping("t", pid, MAX_EPOCH - 1, commit=True)
        new = (ended.producer_id, ended.producer_epoch)
        assert new[0] != pid and new[1] == 0
        early = await coord.add_partitions("t", *new, [TP], client_version=2)
        assert early is ErrorCode.concurrent_transactions
        markers.block.set()
        await settle()
        assert await coord.add_partitions("t", *new, [TP], client_version=2) is ErrorCode.none
        # Another id is still nobody's.
        assert await coord.add_partitions("t", new[0] + 1, 0, [TP], client_version=2) is (
            ErrorCode.invalid_producer_id_mapping
        )

    run(go())
