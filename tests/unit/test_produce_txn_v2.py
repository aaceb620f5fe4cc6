"""A Produce v12 (transaction version 2) adds every partition of its first writes with one
question to the coordinator, hence one transaction-log record, as Kafka batches them."""

from __future__ import annotations

from pathlib import Path

from tests.unit.test_handler_authorization import OPEN, SECONDS, Harness, nested, run

from onceflow.broker.broker import TXN_TOPIC
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
            for entry in h.broker.read_internal(TXN_TOPIC, coordinator.partition_for(TXN_ID))
            if entry.key is not None and entry.value is not None and decode_key(entry.key) == TXN_ID
        ]
        assert states == [TxnState.EMPTY, TxnState.ONGOING]
        assert coordinator.txns[TXN_ID].partitions == {(OPEN, 0), (OPEN, 1)}
        assert coordinator.txns[TXN_ID].client_version == 2

    run(tmp_path, body)
