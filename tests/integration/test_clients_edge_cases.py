"""Less travelled paths through real clients: compression, restarts, limits, bad topic
requests, timestamps, time-based retention and lookups across segments."""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition

from onceflow.records.builder import build_batch
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
    topic_name,
)
from tests.helpers.wire import RawConnection, produce_request

T = OP_TIMEOUT_S
# Small batches, so small segments roll often.
ONE_RECORD_PER_BATCH = {
    "linger.ms": 0,
    "batch.num.messages": 1,
    "max.in.flight.requests.per.connection": 1,
}


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_round_trip(shared_broker: BrokerProcess, codec: str) -> None:
    bs = shared_broker.bootstrap
    topic = create_topic(bs, partitions=2)
    sent = [
        (i % 2, f"k{i}".encode(), (f"value {i} " * (1 + i % 40)).encode(), [("i", str(i).encode())])
        for i in range(400)
    ]
    p = producer(bs, acks="all", **{"compression.type": codec, "linger.ms": 20})
    d = produce_and_confirm(p, topic, sent)
    assert not d.errors
    c = consumer(bs)
    try:
        c.assign([TopicPartition(topic, q, 0) for q in range(2)])
        got = consume_until(c, lambda g: len(g) >= 400)
        # Start in the middle of a compressed batch: the client skips the earlier records.
        c.assign([TopicPartition(topic, 1, 77)])
        mid = consume_until(c, lambda g: len(g) >= 200 - 77)
    finally:
        c.close()
    for q in range(2):
        msgs = [m for m in got if m.partition() == q]
        assert [m.offset() for m in msgs] == list(range(200))
        assert [(m.key(), m.value(), m.headers()) for m in msgs] == [
            (k, v, h) for part, k, v, h in sent if part == q
        ]
    assert mid[0].offset() == 77 and mid[0].key() == b"k155"

    # kafka-python reads the same data (it decompresses gzip itself; the other codecs need
    # optional libraries, so only gzip is read back here).
    if codec == "gzip":
        kc = KafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False, consumer_timeout_ms=1000)
        try:
            ktp = KpTopicPartition(topic, 0)
            kc.assign([ktp])
            kc.seek_to_beginning(ktp)
            records: list = []  # type: ignore[type-arg]
            deadline = time.monotonic() + T
            while len(records) < 200 and time.monotonic() < deadline:
                for rs in kc.poll(timeout_ms=200).values():
                    records.extend(rs)
            assert [r.value for r in records] == [v for part, _, v, _ in sent if part == 0]
        finally:
            kc.close()


def test_consumer_keeps_reading_across_a_broker_restart(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    topic = create_topic(bs, partitions=2)
    first = [(i % 2, None, f"a{i}".encode(), None) for i in range(40)]
    assert not produce_and_confirm(producer(bs, acks="all"), topic, first).errors
    c = consumer(bs, **{"reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500})
    try:
        c.assign([TopicPartition(topic, q, 0) for q in range(2)])
        got = consume_until(c, lambda g: len(g) >= 40)
        broker.restart()
        second = [(i % 2, None, f"b{i}".encode(), None) for i in range(40)]
        d = produce_and_confirm(producer(bs, acks="all"), topic, second)
        assert not d.errors
        # Offsets continue after the restart.
        assert sorted(off for q, off, *_ in d.ok if q == 0) == list(range(20, 40))
        got += consume_until(c, lambda g: len(g) >= 40, timeout=40)
        got += drain(c, 0.5)
    finally:
        c.close()
    for q in range(2):
        msgs = [m for m in got if m.partition() == q]
        assert [m.offset() for m in msgs] == list(range(40))
        assert [m.value() for m in msgs] == [v for part, _, v, _ in first + second if part == q]


def test_batch_larger_than_max_partition_fetch_bytes_is_still_returned(
    shared_broker: BrokerProcess,
) -> None:
    bs = shared_broker.bootstrap
    topic = create_topic(bs, partitions=1)
    values = [bytes([65 + i]) * 60_000 for i in range(4)]
    d = produce_and_confirm(
        producer(bs, acks="all", **{"linger.ms": 0}), topic, [(0, None, v, None) for v in values]
    )
    assert not d.errors
    small = {"max.partition.fetch.bytes": 1000, "fetch.max.bytes": 2000, "message.max.bytes": 1000}
    c = consumer(bs, **small)
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got = consume_until(c, lambda g: len(g) >= 4)
    finally:
        c.close()
    assert [m.value() for m in got] == values


def test_record_larger_than_max_message_bytes_is_rejected(shared_broker: BrokerProcess) -> None:
    bs = shared_broker.bootstrap
    topic = create_topic(bs, partitions=1, config={"max.message.bytes": "2000"})
    p = producer(bs, acks="all", **{"linger.ms": 0, "message.max.bytes": 1_000_000})
    # Separately: a rejected batch fails every record in it.
    d = produce_and_confirm(p, topic, [(0, None, b"s" * 100, None)])
    big = produce_and_confirm(p, topic, [(0, None, b"L" * 10_000, None)])
    d.ok += big.ok
    d.errors += big.errors
    assert [m[3] for m in d.ok] == [b"s" * 100]
    assert [e.code() for e in d.errors] == [KafkaError.MSG_SIZE_TOO_LARGE]
    lo, hi = consumer(bs).get_watermark_offsets(TopicPartition(topic, 0), timeout=T, cached=False)
    assert (lo, hi) == (0, 1)


def test_a_request_larger_than_the_in_place_limit_round_trips(
    shared_broker: BrokerProcess,
) -> None:
    """A produce request over 2 MiB is gathered piece by piece by the frame decoder instead
    of received in place; its records must come back byte for byte."""
    bs = shared_broker.bootstrap
    topic = create_topic(bs, partitions=1, config={"max.message.bytes": str(8 << 20)})
    value = bytes(range(256)) * (12 << 10)  # 3 MiB, not compressible to less
    p = producer(bs, acks="all", **{"linger.ms": 0, "message.max.bytes": 8 << 20})
    d = produce_and_confirm(p, topic, [(0, None, value, None)])
    assert not d.errors and len(d.ok) == 1
    c = consumer(bs, **{"fetch.max.bytes": 16 << 20, "max.partition.fetch.bytes": 16 << 20})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got = consume_until(c, lambda g: len(g) >= 1)
    finally:
        c.close()
    assert [m.value() for m in got] == [value]


@pytest.mark.parametrize(
    ("name", "partitions", "config", "expected"),
    [
        ("bad/name", 1, {}, KafkaError.TOPIC_EXCEPTION),
        ("x" * 250, 1, {}, KafkaError.TOPIC_EXCEPTION),
        ("..", 1, {}, KafkaError.TOPIC_EXCEPTION),
        (None, 0, {}, KafkaError.INVALID_PARTITIONS),
        (None, 1, {"retention.ms": "soon"}, KafkaError.INVALID_CONFIG),
        (None, 1, {"no.such.topic.config": "1"}, KafkaError.INVALID_CONFIG),
        (None, 1, {"cleanup.policy": "shred"}, KafkaError.INVALID_CONFIG),
    ],
)
def test_create_topic_rejects_bad_requests(
    shared_broker: BrokerProcess,
    name: str | None,
    partitions: int,
    config: dict[str, str],
    expected: int,
) -> None:
    admin = admin_client(shared_broker.bootstrap)
    name = name or topic_name("bad")
    fs = admin.create_topics([NewTopic(name, partitions, 1, config=config)], request_timeout=T)
    with pytest.raises(KafkaException) as info:
        fs[name].result(timeout=T)
    assert info.value.args[0].code() == expected, info.value
    assert name not in admin.list_topics(timeout=T).topics


def test_validate_only_creates_nothing(shared_broker: BrokerProcess) -> None:
    admin = admin_client(shared_broker.bootstrap)
    name = topic_name("dry")
    fs = admin.create_topics([NewTopic(name, 2, 1)], validate_only=True, request_timeout=T)
    fs[name].result(timeout=T)
    assert name not in admin.list_topics(timeout=T).topics


def test_offsets_for_times_across_segments_and_after_a_crash(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    topic = create_topic(bs, partitions=1, config={"segment.bytes": "1500"})
    base = int(time.time() * 1000) - 3_600_000
    p = producer(bs, acks="all", **ONE_RECORD_PER_BATCH)
    for i in range(60):
        p.produce(topic, value=b"%03d" % i + b"." * 80, partition=0, timestamp=base + i * 10)
        p.poll(0)
    assert p.flush(T) == 0
    c = consumer(bs)

    def lookup(ts: int) -> int:
        [tp] = c.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=T)
        assert tp.error is None, tp.error
        return int(tp.offset)

    try:
        # base + 591 is after the last record: no offset (-1).
        expected = {base: 0, base + 5: 1, base + 250: 25, base + 590: 59, base + 591: -1}
        seen = {ts: lookup(ts) for ts in expected}
        assert seen == expected
    finally:
        c.close()
    assert len(list((Path(broker.data_dir) / f"{topic}-0").glob("*.log"))) > 3  # several segments

    broker.restart(kill=True)
    c = consumer(bs)
    try:
        assert {ts: lookup(ts) for ts in expected} == expected
    finally:
        c.close()


@pytest.mark.broker_overrides({"log.retention.check.interval.ms": "200"})
def test_retention_by_time_keeps_only_the_active_segment(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    topic = create_topic(
        bs, partitions=1, config={"segment.bytes": "1500", "retention.ms": "60000"}
    )
    old = int(time.time() * 1000) - 3_600_000  # an hour ago: past retention.ms at once
    p = producer(bs, acks="all", **ONE_RECORD_PER_BATCH)
    for i in range(50):
        p.produce(topic, value=b"%03d" % i + b"." * 80, partition=0, timestamp=old + i)
        p.poll(0)
    assert p.flush(T) == 0
    c = consumer(bs)
    try:
        tp = TopicPartition(topic, 0)
        deadline = time.monotonic() + T
        low, high = c.get_watermark_offsets(tp, timeout=T, cached=False)
        # A retention pass that ran while the records were still arriving deleted only the
        # segments rolled by then; a later pass takes the rest.
        while low < 40 and time.monotonic() < deadline:
            time.sleep(0.2)
            low, high = c.get_watermark_offsets(tp, timeout=T, cached=False)
        assert high == 50
        assert 40 <= low < 50, f"log start {low}: time retention should leave one segment"
        # New records are not deleted: their timestamps are recent.
        d = produce_and_confirm(producer(bs, acks="all"), topic, [(0, None, b"fresh", None)])
        assert not d.errors and d.ok[0][1] == 50
        time.sleep(1.0)
        low2, high2 = c.get_watermark_offsets(tp, timeout=T, cached=False)
        assert high2 == 51 and low2 <= 50
    finally:
        c.close()


def check_log_append_time_topic_overrides_producer_timestamps(shared_broker: BrokerProcess) -> None:
    bs = shared_broker.bootstrap
    topic = create_topic(bs, partitions=1, config={"message.timestamp.type": "LogAppendTime"})
    old = 1_000_000_000_000  # 2001
    p = producer(bs, acks="all")
    p.produce(topic, value=b"v", partition=0, timestamp=old)
    assert p.flush(T) == 0
    before = time.time() * 1000 - 60_000
    c = consumer(bs)
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        [m] = consume_until(c, lambda g: len(g) >= 1)
    finally:
        c.close()
    ts_type, ts = m.timestamp()
    assert ts_type == 2, "timestamp type should be LogAppendTime"  # TIMESTAMP_LOG_APPEND_TIME
    assert ts >= before


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_offsets_for_times_inside_one_batch(shared_broker: BrokerProcess, codec: str) -> None:
    """The answer is the exact record, not the start of the batch that holds it."""
    bs = shared_broker.bootstrap
    topic = create_topic(bs, partitions=1)
    base = int(time.time() * 1000) - 600_000
    p = producer(bs, acks="all", **{"linger.ms": 200, "compression.type": codec})
    for i in range(10):
        p.produce(topic, value=b"r%d" % i, partition=0, timestamp=base + i * 100)
    assert p.flush(T) == 0
    c = consumer(bs)
    try:
        [a] = c.offsets_for_times([TopicPartition(topic, 0, base + 450)], timeout=T)
        [b] = c.offsets_for_times([TopicPartition(topic, 0, base + 700)], timeout=T)
    finally:
        c.close()
    assert (a.offset, b.offset) == (5, 7)


def test_clients_cannot_write_to_the_offsets_topic(shared_broker: BrokerProcess) -> None:
    """Kafka answers INVALID_TOPIC_EXCEPTION: only the coordinator writes __consumer_offsets."""
    bs = shared_broker.bootstrap
    p = producer(bs, acks="all", **{"message.timeout.ms": 5000})
    d = produce_and_confirm(p, "__consumer_offsets", [(0, b"junk-key", b"junk-value", None)])
    assert not d.ok, f"a client appended to __consumer_offsets at {d.ok[0][:2]}"
    assert [e.code() for e in d.errors] == [KafkaError.TOPIC_EXCEPTION]


def test_junk_in_the_offsets_topic_is_refused_and_the_broker_still_restarts(
    broker: BrokerProcess,
) -> None:
    """Raw produce (no client-side checks) to every offsets partition, then a restart."""
    batch = build_batch([(b"\x00\x01junk", b"\xff" * 7, [])], timestamp_ms=int(time.time() * 1000))
    with RawConnection(broker.bootstrap) as conn:
        resp = conn.call(produce_request("__consumer_offsets", dict.fromkeys(range(50), batch)))
    codes = {int(p.error_code.value) for p in resp.responses[0].partition_responses}
    assert codes == {17}, codes  # INVALID_TOPIC_EXCEPTION
    broker.restart()
    assert broker.running


def test_log_append_time_topic_overrides_producer_timestamps(
    shared_broker: BrokerProcess,
) -> None:
    check_log_append_time_topic_overrides_producer_timestamps(shared_broker)


def test_timestamp_too_far_in_the_future_is_rejected(shared_broker: BrokerProcess) -> None:
    bs = shared_broker.bootstrap
    topic = create_topic(bs, partitions=1, config={"message.timestamp.after.max.ms": "60000"})
    future = int(time.time() * 1000) + 3_600_000
    errors: list[KafkaError | None] = []
    p = producer(bs, acks="all", **{"message.timeout.ms": 5000})
    p.produce(
        topic,
        value=b"from the future",
        partition=0,
        timestamp=future,
        on_delivery=lambda err, msg: errors.append(err),
    )
    assert p.flush(T) == 0
    assert [e.code() if e else None for e in errors] == [KafkaError.INVALID_TIMESTAMP]


def test_delete_topic_under_load_then_recreate(shared_broker: BrokerProcess) -> None:
    """Deleting a topic that is being produced to and long-polled must not hurt the broker."""
    bs = shared_broker.bootstrap
    topic = create_topic(bs, partitions=2)
    stop = threading.Event()
    p = producer(bs, acks="1", **{"message.timeout.ms": 3000})

    def produce_loop(p: Producer) -> None:
        i = 0
        while not stop.is_set():
            # With topic ids (Metadata v10+) librdkafka sees the topic recreated by its own
            # metadata request with one partition, and refuses partition 1 at once.
            with contextlib.suppress(BufferError, KafkaException):
                p.produce(topic, value=b"x" * (i % 500), partition=i % 2)
            p.poll(0.001)
            i += 1

    c = consumer(bs, **{"fetch.wait.max.ms": 5000})
    thread = threading.Thread(target=produce_loop, args=(p,), daemon=True)
    thread.start()
    try:
        c.assign([TopicPartition(topic, q, 0) for q in range(2)])
        consume_until(c, lambda g: len(g) >= 50)
        admin = admin_client(bs)
        admin.delete_topics([topic], operation_timeout=T, request_timeout=T)[topic].result(T)
        time.sleep(1.0)  # the producer and the consumer keep going at the deleted topic
    finally:
        stop.set()
        thread.join(T)
        c.close()
    p.flush(10)
    del p
    assert shared_broker.running, shared_broker.log_tail()
    # The producer may have auto-created the topic again (as with Kafka): delete it once
    # more, now that nobody uses it. Then the name can be reused, from offset 0.
    admin = admin_client(bs)
    if topic in admin.list_topics(timeout=T).topics:
        admin.delete_topics([topic], operation_timeout=T, request_timeout=T)[topic].result(T)
    create_topic(bs, topic, partitions=1, config={})
    d = produce_and_confirm(producer(bs, acks="all"), topic, [(0, None, b"reborn", None)])
    assert not d.errors and d.ok[0][:2] == (0, 0), (d.ok, d.errors)
    c = consumer(bs)
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        [m] = consume_until(c, lambda g: len(g) >= 1)
        assert m.value() == b"reborn"
    finally:
        c.close()
