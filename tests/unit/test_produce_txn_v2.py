"""A Produce v12 (transaction version 2) adds every partition of its first writes with one
question to the coordinator, hence one transaction-log record, as Kafka batches them."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from tests.unit.test_handler_authorization import OPEN, SECONDS, Harness, nested, run

from onceflow.broker.broker import TXN_TOPIC
from onceflow.broker.handlers import produce as produce_handler
from onceflow.coordinator.transaction.log import decode_key, decode_value
from onceflow.coordinator.transaction.state import TxnState
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.records.builder import build_batch

TXN_ID = "tv2-batched"


def produce_v12(pid: int, epoch: int, partitions: tuple[int, ...]) -> dict[str, object]:
    batch = build_batch(
        [(b"k", b"v", ())],
        timestamp_ms=0,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=0,
        transactional=True,
    )
    data = tuple(
        nested(ApiKey.PRODUCE, 12, "PartitionProduceData", index=p, records=batch)
        for p in partitions
    )
    topic = nested(ApiKey.PRODUCE, 12, "TopicProduceData", name=OPEN, partition_data=data)
    return {"transactional_id": TXN_ID, "acks": -1, "timeout": 30 * SECONDS, "topic_data": (topic,)}


def test_first_writes_of_one_request_are_added_with_one_log_record(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        h.use(None)
        coordinator = h.broker.txn_coordinator
        init = await coordinator.init_producer_id(TXN_ID, 60_000)
        response = await h.call(
            ApiKey.PRODUCE, 12, **produce_v12(init.producer_id, init.producer_epoch, (0, 1))
        )
        codes = {p.error_code for p in response.responses[0].partition_responses}
        assert codes == {ErrorCode.none}
        states = [
            decode_value(TXN_ID, entry.value).state
            for entry in h.broker.writes.read_internal(TXN_TOPIC, coordinator.partition_for(TXN_ID))
            if entry.key is not None and entry.value is not None and decode_key(entry.key) == TXN_ID
        ]
        assert states == [TxnState.EMPTY, TxnState.ONGOING]
        assert coordinator.txns[TXN_ID].partitions == {(OPEN, 0), (OPEN, 1)}
        assert coordinator.txns[TXN_ID].client_version == 2

    run(tmp_path, body)


class _LateMarkers:
    """The previous transaction's markers reach the partition a round trip late, as they do
    on a leader that is not the coordinator's broker."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def write_markers(self, *args: Any) -> Any:
        await asyncio.sleep(0.05)
        return await self.inner.write_markers(*args)


def test_the_next_transactions_first_write_waits_out_the_previous_markers(
    tmp_path: Path,
) -> None:
    """The coordinator adds the partition only once the previous transaction's markers are
    written: those markers landing while it was asked must not make the write retry."""

    async def body(h: Harness) -> None:
        h.use(None)
        coordinator = h.broker.txn_coordinator
        coordinator._markers = _LateMarkers(coordinator._markers)
        init = await coordinator.init_producer_id(TXN_ID, 60_000)
        pid, epoch = init.producer_id, init.producer_epoch
        first = await h.call(ApiKey.PRODUCE, 12, **produce_v12(pid, epoch, (0,)))
        assert first.responses[0].partition_responses[0].error_code == ErrorCode.none
        ended = await coordinator.end_txn_bumping(TXN_ID, pid, epoch, commit=True)
        assert ended.error is ErrorCode.none
        after = await h.call(ApiKey.PRODUCE, 12, **produce_v12(pid, ended.producer_epoch, (0,)))
        (answer,) = after.responses[0].partition_responses
        assert (answer.error_code, answer.error_message) == (ErrorCode.none, None)

    run(tmp_path, body)


def test_a_first_write_is_validated_once_though_the_coordinator_is_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CRC check (and, on compacted topics, the per-record key check) is the costly part
    of a Produce: a write that waits for its coordinator is not checked again after."""
    calls: list[int] = []
    real = produce_handler.validate_produced_batches

    def counting(records: bytes, max_bytes: int) -> Any:
        calls.append(len(records))
        return real(records, max_bytes)

    monkeypatch.setattr(produce_handler, "validate_produced_batches", counting)

    async def body(h: Harness) -> None:
        h.use(None)
        init = await h.broker.txn_coordinator.init_producer_id(TXN_ID, 60_000)
        response = await h.call(
            ApiKey.PRODUCE, 12, **produce_v12(init.producer_id, init.producer_epoch, (0,))
        )
        assert response.responses[0].partition_responses[0].error_code == ErrorCode.none
        assert h.broker.txn_coordinator.txns[TXN_ID].partitions == {(OPEN, 0)}

    run(tmp_path, body)
    assert len(calls) == 1


def test_a_topic_recreated_while_the_coordinator_is_asked_validates_the_write_again(
    tmp_path: Path,
) -> None:
    """The batch was validated against the log of the first lookup; a topic deleted and
    created again with other limits during the question has its own limits checked."""

    async def body(h: Harness) -> None:
        h.use(None)
        broker = h.broker
        init = await broker.txn_coordinator.init_producer_id(TXN_ID, 60_000)
        ask = broker.writes.ask_coordinator_all

        async def recreating(needs: Any) -> Any:
            await broker.delete_topic(OPEN)
            await broker.create_topic(OPEN, 2, {"max.message.bytes": "20"})
            return await ask(needs)

        broker.writes.ask_coordinator_all = recreating  # type: ignore[method-assign]
        response = await h.call(
            ApiKey.PRODUCE, 12, **produce_v12(init.producer_id, init.producer_epoch, (0,))
        )
        (answer,) = response.responses[0].partition_responses
        assert answer.error_code == ErrorCode.message_too_large
        assert h.end_offset(OPEN) == 0

    run(tmp_path, body)
