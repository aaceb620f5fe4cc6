"""DeleteRecords through real clients' admin APIs (confluent-kafka's AdminClient.delete_records,
kafka-python's and aiokafka's delete_records): the new log start offset, Kafka's error codes
for bad input, consumers below it reset by auto.offset.reset, the segments below it deleted,
and the start kept through a restart and through kill -9."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from aiokafka.errors import InvalidTopicError as AioInvalidTopic
from aiokafka.errors import OffsetOutOfRangeError as AioOffsetOutOfRange
from aiokafka.structs import TopicPartition as ATopicPartition
from confluent_kafka import OFFSET_END, KafkaError, KafkaException, TopicPartition
from kafka import KafkaAdminClient
from kafka import TopicPartition as KTopicPartition
from kafka.errors import OffsetOutOfRangeError, UnknownTopicOrPartitionError

from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import (
    OP_TIMEOUT_S,
    admin_client,
    consume_until,
    consumer,
    create_topic,
    drain,
    produce_and_confirm,
    producer,
)

T = OP_TIMEOUT_S
TIMEOUT_MS = int(T * 1000)


def _fill(bs: str, topic: str, partition: int, count: int, start: int = 0) -> None:
    recs = [(partition, None, b"v%d " % (start + i) + b"x" * 60, None) for i in range(count)]
    assert not produce_and_confirm(producer(bs), topic, recs).errors


def _earliest(bs: str, topic: str, partition: int) -> int:
    c = consumer(bs)
    try:
        low, _ = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=T)
        return int(low)
    finally:
        c.close()


def _delete(bs: str, *tps: TopicPartition) -> dict[TopicPartition, int | KafkaError]:
    """confluent-kafka's delete_records: each partition's low watermark, or its error."""
    admin = admin_client(bs)
    futures = admin.delete_records(list(tps), request_timeout=T, operation_timeout=T)
    out: dict[TopicPartition, int | KafkaError] = {}
    for tp, fut in futures.items():
        try:
            out[tp] = fut.result(T).low_watermark
        except KafkaException as exc:
            out[tp] = exc.args[0]
    return out


def _code(result: int | KafkaError) -> int:
    assert isinstance(result, KafkaError), result
    return int(result.code())


@pytest.mark.broker_overrides({"log.retention.check.interval.ms": "200"})
def test_confluent_delete_records(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    topic = create_topic(bs, partitions=2, config={"segment.bytes": "1024"})
    for chunk in range(12):  # a batch of 5 at a time: several segments of 1 KiB
        _fill(bs, topic, 0, 5, start=chunk * 5)
    _fill(bs, topic, 1, 5)
    segments_before = _segments(broker, topic, 0)
    assert len(segments_before) > 3
    results = _delete(bs, TopicPartition(topic, 0, 40), TopicPartition(topic, 1, OFFSET_END))
    assert results == {TopicPartition(topic, 0, 40): 40, TopicPartition(topic, 1, -1): 5}
    assert _earliest(bs, topic, 0) == 40 and _earliest(bs, topic, 1) == 5

    # Bad input: beyond the high watermark, and an unknown partition of a known topic.
    bad = _delete(bs, TopicPartition(topic, 0, 61))
    assert _code(bad[TopicPartition(topic, 0, 61)]) == KafkaError.OFFSET_OUT_OF_RANGE
    # librdkafka asks Metadata for the leaders first, which knows no such topic (nor
    # creates it), and fails the partition without sending DeleteRecords.
    unknown = _delete(bs, TopicPartition("no-such-topic", 0, 1))
    assert _code(unknown[TopicPartition("no-such-topic", 0, 1)]) == KafkaError._NOENT
    assert _earliest(bs, topic, 0) == 40

    # A consumer below the new start: auto.offset.reset decides where it goes.
    earliest = consumer(bs, **{"auto.offset.reset": "earliest"})
    earliest.assign([TopicPartition(topic, 0, 10)])
    try:
        got = consume_until(earliest, lambda msgs: len(msgs) >= 20)
        assert [m.offset() for m in got] == list(range(40, 60))
    finally:
        earliest.close()
    latest = consumer(bs, **{"auto.offset.reset": "latest"})
    latest.assign([TopicPartition(topic, 0, 10)])
    try:
        assert drain(latest, 2.0) == []
        _fill(bs, topic, 0, 3, start=60)
        got = consume_until(latest, lambda msgs: len(msgs) >= 3)
        assert [m.offset() for m in got] == [60, 61, 62]
    finally:
        latest.close()

    # Retention deletes the segments wholly below the start.
    _wait_for(lambda: min(_segments(broker, topic, 0)) > 0, "segments below 40 deleted")
    assert min(_segments(broker, topic, 0)) <= 40

    broker.restart()
    assert _earliest(bs, topic, 0) == 40 and _earliest(bs, topic, 1) == 5
    assert _delete(bs, TopicPartition(topic, 0, 50)) == {TopicPartition(topic, 0, 50): 50}
    broker.restart(kill=True)
    assert _earliest(bs, topic, 0) == 50 and _earliest(bs, topic, 1) == 5
    reader = consumer(bs)
    reader.assign([TopicPartition(topic, 0, 50)])
    try:
        got = consume_until(reader, lambda msgs: len(msgs) >= 13)
        assert got[0].offset() == 50 and got[0].value().startswith(b"v50 ")
    finally:
        reader.close()


def _segments(broker: BrokerProcess, topic: str, partition: int) -> list[int]:
    directory = Path(broker.data_dir) / f"{topic}-{partition}"
    return sorted(int(name[:-4]) for name in os.listdir(directory) if name.endswith(".log"))


def _wait_for(condition: object, what: str, timeout: float = T) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_kafka_python_delete_records(shared_broker: BrokerProcess) -> None:
    bs = shared_broker.bootstrap
    topic = create_topic(bs)
    _fill(bs, topic, 0, 8)
    admin = KafkaAdminClient(bootstrap_servers=bs, request_timeout_ms=TIMEOUT_MS)
    try:
        result = admin.delete_records({KTopicPartition(topic, 0): 3})
        assert result[KTopicPartition(topic, 0)]["low_watermark"] == 3
        with pytest.raises(OffsetOutOfRangeError):
            admin.delete_records({KTopicPartition(topic, 0): 9})
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.delete_records({KTopicPartition(topic, 4): 1}, partition_leader_id=0)
    finally:
        admin.close()
    assert _earliest(bs, topic, 0) == 3


def test_aiokafka_delete_records(shared_broker: BrokerProcess) -> None:
    bs = shared_broker.bootstrap
    topic = create_topic(bs)
    _fill(bs, topic, 0, 8)

    async def scenario() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bs, request_timeout_ms=TIMEOUT_MS)
        await admin.start()
        try:
            tp = ATopicPartition(topic, 0)
            assert await admin.delete_records({tp: RecordsToDelete(before_offset=6)}) == {tp: 6}
            with pytest.raises(AioOffsetOutOfRange):
                await admin.delete_records({tp: RecordsToDelete(before_offset=100)})
            # (an unknown partition fails in the client, which finds no leader for it)
            with pytest.raises(AioInvalidTopic):
                internal = ATopicPartition("__consumer_offsets", 0)
                await admin.delete_records({internal: RecordsToDelete(0)})
        finally:
            await admin.close()

    asyncio.run(scenario())
    assert _earliest(bs, topic, 0) == 6
