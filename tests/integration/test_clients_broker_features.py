"""Broker behaviour seen through real clients: long polling, retention, topic auto-creation."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from kafka.errors import OffsetOutOfRangeError
from kio.schema.metadata.v8.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import TopicName

from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import (
    OP_TIMEOUT_S,
    Delivered,
    admin_client,
    consume_until,
    consumer,
    create_topic,
    produce_and_confirm,
    producer,
    topic_name,
)
from tests.helpers.wire import RawConnection

T = OP_TIMEOUT_S


# ---- long polling -------------------------------------------------------------------------

# The fetch waits up to this long for data. A broker that completes waiting fetches on append
# delivers a record in milliseconds; one that does not needs the whole wait. The bound checked
# below is half of it: loose enough for a slow machine, tight enough to tell the two apart.
LONG_WAIT_MS = 12_000


def _wake_once(c, p, topic: str, n: int) -> float:  # type: ignore[no-untyped-def]
    """Produce record n 0.5 s from now; return seconds from its ack to its arrival."""
    acked: list[float] = []
    d = Delivered()

    def on_delivery(err, msg):  # type: ignore[no-untyped-def]
        acked.append(time.monotonic())
        d.callback(err, msg)

    def produce_later() -> None:
        time.sleep(0.5)
        p.produce(topic, value=f"wake-{n}".encode(), partition=0, on_delivery=on_delivery)
        p.flush(T)

    thread = threading.Thread(target=produce_later)
    thread.start()
    got = consume_until(c, lambda g: len(g) >= 1, timeout=T, what="the woken record")
    received = time.monotonic()
    thread.join(T)
    assert not d.errors and acked
    assert got[0].value() == f"wake-{n}".encode() and got[0].offset() == n
    return received - acked[0]


def test_waiting_fetch_returns_when_a_record_arrives(shared_broker: BrokerProcess) -> None:
    bs = shared_broker.bootstrap
    topic = create_topic(bs, partitions=1)
    c = consumer(bs, **{"fetch.wait.max.ms": LONG_WAIT_MS, "fetch.min.bytes": 1})
    p = producer(bs, acks="all", **{"linger.ms": 0})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        # Let the consumer reach the point where its fetch is parked on the empty partition.
        assert c.poll(1.5) is None
        for n in range(3):
            waited = _wake_once(c, p, topic, n)
            assert waited < LONG_WAIT_MS / 2000, (
                f"record took {waited:.1f} s to arrive after its ack: the waiting fetch was not "
                f"completed by the append (fetch.wait.max.ms={LONG_WAIT_MS})"
            )
            # The consumer's next fetch parks again before the next round.
            time.sleep(0.5)
    finally:
        c.close()


# ---- retention ----------------------------------------------------------------------------

SEGMENT_BYTES = 2048
RETENTION_BYTES = 6144


def _log_files(data_dir: str, topic: str, partition: int) -> list[Path]:
    d = Path(data_dir) / f"{topic}-{partition}"
    return sorted(d.glob("*.log"))


def _on_disk(data_dir: str, topic: str) -> int:
    total = 0
    for f in _log_files(data_dir, topic, 0):
        with contextlib.suppress(FileNotFoundError):  # retention may delete it meanwhile
            total += f.stat().st_size
    return total


@pytest.mark.broker_overrides({"log.retention.check.interval.ms": "200"})
def test_retention_by_size_advances_log_start(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    topic = create_topic(
        bs,
        partitions=1,
        config={"segment.bytes": str(SEGMENT_BYTES), "retention.bytes": str(RETENTION_BYTES)},
    )
    n = 300
    values = [f"{i:05d}".encode() + b"x" * 95 for i in range(n)]
    # One record per batch (linger 0, one in flight), so segments roll every ~12 records.
    p = producer(
        bs,
        acks="1",
        **{"linger.ms": 0, "batch.num.messages": 1, "max.in.flight.requests.per.connection": 1},
    )
    d = produce_and_confirm(p, topic, [(0, None, v, None) for v in values])
    assert not d.errors
    assert sorted(off for _, off, *_ in d.ok) == list(range(n))

    c = consumer(bs)
    try:
        tp = TopicPartition(topic, 0)
        deadline = time.monotonic() + T
        low, high = c.get_watermark_offsets(tp, timeout=T, cached=False)
        # Retention runs every 200 ms and may first run while the producer is still
        # writing: wait for a pass after the last record, when the log is within bounds.
        while time.monotonic() < deadline and (
            low == 0 or _on_disk(broker.data_dir, topic) > RETENTION_BYTES + SEGMENT_BYTES
        ):
            time.sleep(0.2)
            low, high = c.get_watermark_offsets(tp, timeout=T, cached=False)
        assert high == n
        assert low > 0, "retention never advanced the log start offset"
        # Most of the log is gone; what is left is about retention.bytes.
        assert n - low < n // 2, f"log start {low} of {n}: too little deleted"
        files = _log_files(broker.data_dir, topic, 0)
        assert len(files) >= 2
        on_disk = sum(f.stat().st_size for f in files)
        assert on_disk <= RETENTION_BYTES + SEGMENT_BYTES, (on_disk, [f.name for f in files])
        assert int(files[0].name.split(".")[0]) <= low
    finally:
        c.close()

    # auto.offset.reset=earliest: a fetch from 0 resets to the log start and reads on.
    c = consumer(bs, **{"auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got = consume_until(c, lambda g: len(g) >= n - low, what="the retained records")
        first = got[0].offset()
        assert first >= low
        assert [m.offset() for m in got] == list(range(first, first + len(got)))
        assert [m.value() for m in got] == values[first : first + len(got)]
    finally:
        c.close()

    # auto.offset.reset=error: the consumer reports the out-of-range fetch instead.
    c = consumer(bs, **{"auto.offset.reset": "error"})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + T
        err = None
        while err is None and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is not None:
                err = m.error()
            elif m is not None:
                raise AssertionError(f"read offset {m.offset()} below the log start {low}")
        assert err is not None, "no out-of-range error reported"
        assert err.code() == KafkaError._AUTO_OFFSET_RESET, err
    finally:
        c.close()

    # kafka-python surfaces the broker's exact error: OFFSET_OUT_OF_RANGE.
    kc = KafkaConsumer(
        bootstrap_servers=bs,
        auto_offset_reset="none",
        enable_auto_commit=False,
        request_timeout_ms=30_000,
    )
    try:
        ktp = KpTopicPartition(topic, 0)
        kc.assign([ktp])
        kc.seek(ktp, 0)
        with pytest.raises(OffsetOutOfRangeError):
            deadline = time.monotonic() + T
            while time.monotonic() < deadline:
                kc.poll(timeout_ms=200)
    finally:
        kc.close()


# ---- topic auto-creation ------------------------------------------------------------------


def test_auto_create_on_produce_uses_num_partitions(broker_factory) -> None:  # type: ignore[no-untyped-def]
    b = broker_factory({"num.partitions": "3", "auto.create.topics.enable": "true"})
    topic = topic_name("auto")
    d = produce_and_confirm(producer(b.bootstrap, acks="all"), topic, [(None, b"k", b"v", None)])
    assert not d.errors, d.errors
    admin = admin_client(b.bootstrap)
    md = admin.list_topics(topic, timeout=T)
    assert md.topics[topic].error is None
    assert sorted(md.topics[topic].partitions) == [0, 1, 2]
    assert (Path(b.data_dir) / f"{topic}-2").is_dir()

    # Metadata v4+ with allow_auto_topic_creation=false must not create the topic.
    other = topic_name("noauto")
    with RawConnection(b.bootstrap) as conn:
        resp = conn.call(
            MetadataRequest(
                topics=(MetadataRequestTopic(name=TopicName(other)),),
                allow_auto_topic_creation=False,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )
        )
        assert [(t.name, t.error_code.value) for t in resp.topics] == [(other, 3)]
        # ...and with it true, it does.
        resp = conn.call(
            MetadataRequest(
                topics=(MetadataRequestTopic(name=TopicName(other)),),
                allow_auto_topic_creation=True,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )
        )
        assert resp.topics[0].error_code.value == 0
        assert len(resp.topics[0].partitions) == 3


def test_no_auto_create_gives_unknown_topic(broker_factory) -> None:  # type: ignore[no-untyped-def]
    b = broker_factory({"auto.create.topics.enable": "false"})
    topic = topic_name("absent")
    p = producer(
        b.bootstrap,
        acks="all",
        **{"message.timeout.ms": 3000, "topic.metadata.propagation.max.ms": 500},
    )
    d = produce_and_confirm(p, topic, [(None, b"k", b"v", None)], timeout=T)
    assert not d.ok
    assert [e.code() for e in d.errors] in (
        [KafkaError.UNKNOWN_TOPIC_OR_PART],
        [KafkaError._UNKNOWN_TOPIC],
        [KafkaError._MSG_TIMED_OUT],
    ), d.errors
    md = admin_client(b.bootstrap).list_topics(topic, timeout=T)
    assert md.topics[topic].error is not None
    assert md.topics[topic].error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert topic not in admin_client(b.bootstrap).list_topics(timeout=T).topics
    assert not any(name.startswith(topic) for name in os.listdir(b.data_dir))

    # Explicit creation still works.
    create_topic(b.bootstrap, topic, partitions=2)
    d = produce_and_confirm(producer(b.bootstrap, acks="all"), topic, [(1, b"k", b"v", None)])
    assert not d.errors and d.ok[0][:2] == (1, 0)


def test_create_partitions_on_a_single_broker_survives_a_restart(broker: BrokerProcess) -> None:
    from confluent_kafka.admin import NewPartitions

    admin = admin_client(broker.bootstrap)
    topic = create_topic(broker.bootstrap, partitions=1)
    admin.create_partitions([NewPartitions(topic, 3)], request_timeout=T)[topic].result(T)
    p = producer(broker.bootstrap, acks="all")
    d = produce_and_confirm(p, topic, [(i, None, b"v%d" % i, None) for i in range(3)])
    assert not d.errors and sorted(part for part, *_ in d.ok) == [0, 1, 2]
    broker.restart()
    md = admin_client(broker.bootstrap).list_topics(topic, timeout=T)
    assert len(md.topics[topic].partitions) == 3
    c = consumer(broker.bootstrap)
    c.assign([TopicPartition(topic, i, 0) for i in range(3)])
    got = consume_until(c, lambda ms: len(ms) >= 3)
    assert sorted(m.value() for m in got) == [b"v0", b"v1", b"v2"]
    c.close()
