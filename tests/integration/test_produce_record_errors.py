"""KIP-467: a batch refused for some of its records names them (Produce v8+).

On the wire: the partition answers INVALID_RECORD (INVALID_TIMESTAMP for timestamps) with
`record_errors` holding exactly the bad records' indexes and an `error_message`; nothing of
the batch is written. Through librdkafka, which reads `record_errors`: the named records fail
with INVALID_RECORD and the rest of the batch with its local _INVALID_DIFFERENT_RECORD, so a
producer that sends those again writes every valid record.
"""

from __future__ import annotations

import time

from confluent_kafka import KafkaError, Message

from onceflow.records.builder import build_batch
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import assign_from, consume_until, consumer, create_topic, producer
from tests.helpers.wire import RawConnection, fetch_request, produce_request
from tests.integration.test_produce_versions_wire import produce_request as versioned_request

KEYLESS = frozenset({0, 3, 4, 9, 12, 15, 20, 21, 26, 29})  # ten of thirty


def mixed_records() -> list[tuple[bytes | None, bytes, list[tuple[str, bytes]]]]:
    return [(None if i in KEYLESS else b"k%d" % i, b"v%d" % i, []) for i in range(30)]


def high_watermark(conn: RawConnection, topic: str) -> int:
    fetched = conn.call(fetch_request(topic, version=12))
    (partition,) = fetched.responses[0].partitions
    return int(partition.high_watermark)


def test_keyless_records_to_a_compacted_topic_are_named_and_nothing_is_written(
    shared_broker: BrokerProcess,
) -> None:
    topic = create_topic(shared_broker.bootstrap, config={"cleanup.policy": "compact"})
    batch = build_batch(mixed_records(), timestamp_ms=int(time.time() * 1000))
    with RawConnection(shared_broker.bootstrap) as conn:
        answer = conn.call(produce_request(topic, {0: batch}))
        (partition,) = answer.responses[0].partition_responses
        assert partition.error_code == KafkaError.INVALID_RECORD
        assert [e.batch_index for e in partition.record_errors] == sorted(KEYLESS)
        assert all(
            e.batch_index_error_message
            == f"Compacted topic cannot accept message without key in topic partition {topic}-0."
            for e in partition.record_errors
        )
        assert partition.error_message.startswith(
            "One or more records have been rejected due to 10 record errors in total"
        )
        assert high_watermark(conn, topic) == 0
        # Before v8 the answer has no record errors: the same code alone.
        old = conn.call(versioned_request(7, topic, {0: batch}))
        assert old.responses[0].partition_responses[0].error_code == KafkaError.INVALID_RECORD


def test_timestamps_out_of_range_are_named_with_invalid_timestamp(
    shared_broker: BrokerProcess,
) -> None:
    topic = create_topic(
        shared_broker.bootstrap,
        config={"message.timestamp.before.max.ms": "3600000"},
    )
    now = int(time.time() * 1000)
    stale = now - 7_200_000
    # The batch's header shows its first timestamp out of range, so its records are read.
    timestamps = [stale, now, now, stale, now]
    batch = build_batch([(b"k", b"v", [])] * 5, timestamp_ms=timestamps[0], timestamps=timestamps)
    with RawConnection(shared_broker.bootstrap) as conn:
        answer = conn.call(produce_request(topic, {0: batch}))
        (partition,) = answer.responses[0].partition_responses
        assert partition.error_code == KafkaError.INVALID_TIMESTAMP
        assert [e.batch_index for e in partition.record_errors] == [0, 3]
        assert partition.error_message == (
            "One or more records have been rejected due to invalid timestamp"
        )
        assert high_watermark(conn, topic) == 0


def test_librdkafka_fails_exactly_the_keyless_records(shared_broker: BrokerProcess) -> None:
    topic = create_topic(shared_broker.bootstrap, config={"cleanup.policy": "compact"})
    # A long linger puts the thirty records in one batch.
    p = producer(shared_broker.bootstrap, **{"linger.ms": 500})
    outcome: dict[int, KafkaError | None] = {}

    def send(indexes: list[int]) -> None:
        for i in indexes:
            key, value, _ = mixed_records()[i]

            def report(err: KafkaError | None, _msg: Message, i: int = i) -> None:
                outcome[i] = err

            p.produce(topic, key=key, value=value, partition=0, on_delivery=report)
        assert p.flush(20) == 0

    send(list(range(30)))
    failed = {i for i, err in outcome.items() if err is not None}
    invalid = {i for i, err in outcome.items() if err and err.code() == KafkaError.INVALID_RECORD}
    assert invalid == KEYLESS
    innocent = failed - KEYLESS
    assert all(
        outcome[i] is not None and outcome[i].code() == KafkaError._INVALID_DIFFERENT_RECORD  # type: ignore[union-attr]
        for i in innocent
    )
    send(sorted(innocent))  # the producer sends the others again
    assert all(outcome[i] is None for i in innocent)
    c = consumer(shared_broker.bootstrap)
    assign_from(c, topic, [0])
    got = consume_until(c, lambda ms: len(ms) >= 20)
    c.close()
    assert sorted(m.value() for m in got) == sorted(
        b"v%d" % i for i in range(30) if i not in KEYLESS
    )
