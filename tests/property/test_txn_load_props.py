"""Whatever a damaged `__transaction_state` record holds, its partition still loads.

Each example damages one record the coordinator wrote (cut short, or a byte changed),
appends it as the newest value of its transactional id, and loads the log on a new
coordinator: the load finishes, every other id keeps its state, and every id, the damaged
one included, can be initialised again.
"""

from __future__ import annotations

import asyncio
import dataclasses

from hypothesis import given, settings
from tests.helpers.damage import damaged_value
from tests.unit.test_txn_coordinator import MemoryLog, make, settle

from onceflow.coordinator.transaction.log import decode_key, decode_value, encode_value
from onceflow.coordinator.transaction.state import TxnState
from onceflow.errors import ErrorCode

IDS = ("ongoing", "committed", "prepared", "empty")


async def _write(log: MemoryLog) -> dict[str, TxnState]:
    """Each id of IDS in its state; the prepared one's markers never written (a crash)."""
    coord, _, markers, _ = make(log)
    for txn_id in IDS:
        init = await coord.init_producer_id(txn_id, 10_000)
        pid, epoch = init.producer_id, init.producer_epoch
        if txn_id == "empty":
            continue
        await coord.add_partitions(txn_id, pid, epoch, [("a", 0), ("b", 1)])
        if txn_id == "committed":
            assert await coord.end_txn(txn_id, pid, epoch, commit=True) is ErrorCode.none
            await settle()
        elif txn_id == "prepared":
            markers.block = asyncio.Event()
            await coord.end_txn(txn_id, pid, epoch, commit=True)
    states = {txn_id: coord.txns[txn_id].state for txn_id in IDS}
    await coord.close()
    return states


def _records() -> list[tuple[int, bytes, bytes]]:
    log = MemoryLog()
    asyncio.run(_write(log))
    return [
        (partition, key, value)
        for partition, records in log.records.items()
        for key, value in records
        if key is not None and value is not None
    ]


SAMPLE = _records()


@settings(max_examples=max(settings().max_examples, 300), deadline=None)
@given(damaged_value([v for _, _, v in SAMPLE]))
def test_a_damaged_record_never_keeps_its_partition_from_loading(
    damaged: tuple[int, bytes],
) -> None:
    index, value = damaged
    partition, key, _ = SAMPLE[index]
    damaged_id = decode_key(key)

    async def go() -> None:
        log = MemoryLog()
        before = await _write(log)
        log.records[partition].append((key, value))
        coord, _, _, _ = make(log)
        await coord.load()
        await settle()
        for txn_id in IDS:
            if txn_id != damaged_id:
                after = coord.txns[txn_id].state
                # A prepared commit found in the log is finished by the load.
                assert after is before[txn_id] or (
                    before[txn_id] is TxnState.PREPARE_COMMIT and after is TxnState.COMPLETE_COMMIT
                )
        for txn_id in IDS:
            for _ in range(3):  # an open transaction is aborted first
                init = await coord.init_producer_id(txn_id, 10_000)
                if init.error is not ErrorCode.concurrent_transactions:
                    break
                await settle()
            assert init.error is ErrorCode.none, (txn_id, init)
        await coord.close()

    asyncio.run(go())


def test_a_state_kafka_never_logs_is_skipped_at_load() -> None:
    """Dead and PrepareEpochFence live in memory only and nothing leads out of them: such a
    record is corrupt, and the id keeps the state its record before it gave."""

    async def go() -> None:
        log = MemoryLog()
        await _write(log)
        partition, key, value = next(r for r in SAMPLE if decode_key(r[1]) == "empty")
        transit = decode_value("empty", value)
        for state in (TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE):
            log.records[partition].append(
                (key, encode_value(dataclasses.replace(transit, state=state)))
            )
        coord, _, _, _ = make(log)
        await coord.load()
        assert coord.txns["empty"].state is TxnState.EMPTY
        init = await coord.init_producer_id("empty", 10_000)
        assert (init.error, init.producer_epoch) == (ErrorCode.none, transit.producer_epoch + 1)
        await coord.close()

    asyncio.run(go())
