"""kafka-python (3.x) against a real broker: produce, assignment, groups, offsets by time."""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import UnknownTopicOrPartitionError

from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import kafka_python_subscribe, topic_name

TIMEOUT_MS = 20_000
TIMEOUT_S = TIMEOUT_MS / 1000


def _producer(bs: str, **extra) -> KafkaProducer:  # type: ignore[no-untyped-def]
    return KafkaProducer(
        bootstrap_servers=bs,
        enable_idempotence=False,
        request_timeout_ms=TIMEOUT_MS,
        max_block_ms=TIMEOUT_MS,
        **extra,
    )


def _consumer(bs: str, **extra) -> KafkaConsumer:  # type: ignore[no-untyped-def]
    conf = {
        "bootstrap_servers": bs,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "request_timeout_ms": 30_000,
        "session_timeout_ms": 10_000,
        "heartbeat_interval_ms": 1000,
        "consumer_timeout_ms": 1000,
        **extra,
    }
    return KafkaConsumer(**conf)


@pytest.fixture
def admin(shared_broker: BrokerProcess) -> Iterator[KafkaAdminClient]:
    a = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap, request_timeout_ms=TIMEOUT_MS)
    try:
        yield a
    finally:
        a.close()


def _create(admin: KafkaAdminClient, partitions: int) -> str:
    name = topic_name("kp")
    admin.create_topics([NewTopic(name, partitions, 1)], timeout_ms=TIMEOUT_MS)
    return name


def _poll_until(c: KafkaConsumer, n: int, timeout: float = TIMEOUT_S) -> list:  # type: ignore[type-arg]
    got: list = []  # type: ignore[type-arg]
    deadline = time.monotonic() + timeout
    while len(got) < n:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {n} records; got {len(got)}")
        for records in c.poll(timeout_ms=200).values():
            got.extend(records)
    return got


def test_produce_and_consume_by_assignment(
    shared_broker: BrokerProcess, admin: KafkaAdminClient
) -> None:
    bs = shared_broker.bootstrap
    topic = _create(admin, 2)
    p = _producer(bs, acks="all", linger_ms=5)
    sent: dict[int, list[tuple[bytes, bytes, list[tuple[str, bytes]]]]] = defaultdict(list)
    futures = []
    for i in range(60):
        part = i % 2
        key, value = f"k{i}".encode(), f"v{i}".encode() * (1 + i % 5)
        headers = [("n", str(i).encode()), ("empty", b"")]
        futures.append((part, p.send(topic, value=value, key=key, headers=headers, partition=part)))
        sent[part].append((key, value, headers))
    offsets: dict[int, list[int]] = defaultdict(list)
    for part, f in futures:
        md = f.get(timeout=TIMEOUT_S)
        assert md.partition == part
        offsets[part].append(md.offset)
    p.close(timeout=TIMEOUT_S)
    assert offsets == {0: list(range(30)), 1: list(range(30))}

    c = _consumer(bs)
    try:
        c.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        c.seek_to_beginning()
        got = _poll_until(c, 60)
        assert c.beginning_offsets([TopicPartition(topic, 0)]) == {TopicPartition(topic, 0): 0}
        assert c.end_offsets([TopicPartition(topic, 1)]) == {TopicPartition(topic, 1): 30}
        # From an offset.
        c.seek(TopicPartition(topic, 1), 25)
        tail = _poll_until(c, 5)
    finally:
        c.close()
    by_part: dict[int, list] = defaultdict(list)  # type: ignore[type-arg]
    for r in got:
        by_part[r.partition].append(r)
    for part in (0, 1):
        recs = by_part[part]
        assert [r.offset for r in recs] == list(range(30))
        assert [(r.key, r.value, list(r.headers)) for r in recs] == sent[part]
    assert [(r.partition, r.offset) for r in tail] == [(1, o) for o in range(25, 30)]


def test_offsets_for_times(shared_broker: BrokerProcess, admin: KafkaAdminClient) -> None:
    bs = shared_broker.bootstrap
    topic = _create(admin, 1)
    base = int(time.time() * 1000) - 100_000
    p = _producer(bs, acks=1, linger_ms=0)
    # Ten batches of one record each, 1 s apart in CreateTime.
    for i in range(10):
        p.send(topic, value=f"v{i}".encode(), partition=0, timestamp_ms=base + i * 1000).get(
            timeout=TIMEOUT_S
        )
    p.close(timeout=TIMEOUT_S)
    tp = TopicPartition(topic, 0)
    c = _consumer(bs)
    try:
        c.assign([tp])
        found = c.offsets_for_times({tp: base + 3000})[tp]
        assert (found.offset, found.timestamp) == (3, base + 3000)
        between = c.offsets_for_times({tp: base + 3500})[tp]
        assert (between.offset, between.timestamp) == (4, base + 4000)
        first = c.offsets_for_times({tp: 0})[tp]
        assert (first.offset, first.timestamp) == (0, base)
        assert c.offsets_for_times({tp: base + 10_000})[tp] is None  # after the last record
        # Seek to the found offset and read from there.
        c.seek(tp, between.offset)
        got = _poll_until(c, 6)
        assert [r.value for r in got] == [f"v{i}".encode() for i in range(4, 10)]
        assert [r.timestamp for r in got] == [base + i * 1000 for i in range(4, 10)]
    finally:
        c.close()


def test_group_consume_commit_and_resume(
    shared_broker: BrokerProcess, admin: KafkaAdminClient
) -> None:
    bs = shared_broker.bootstrap
    topic = _create(admin, 3)
    group = f"kpg-{uuid.uuid4().hex[:8]}"
    p = _producer(bs, acks="all")
    for i in range(30):
        p.send(topic, value=f"a{i}".encode(), partition=i % 3)
    p.flush(timeout=TIMEOUT_S)

    c = _consumer(bs, group_id=group)
    try:
        kafka_python_subscribe(c, [topic])
        got = _poll_until(c, 30, timeout=40)
        assert sorted((r.partition, r.offset) for r in got) == [
            (q, o) for q in range(3) for o in range(10)
        ]
        c.commit()
        assert {q: c.committed(TopicPartition(topic, q)) for q in range(3)} == {0: 10, 1: 10, 2: 10}
    finally:
        c.close()

    for i in range(3):
        p.send(topic, value=f"b{i}".encode(), partition=i)
    p.flush(timeout=TIMEOUT_S)
    p.close(timeout=TIMEOUT_S)

    c = _consumer(bs, group_id=group)
    try:
        kafka_python_subscribe(c, [topic])
        got = _poll_until(c, 3, timeout=40)
        time.sleep(0.5)
        got += [r for rs in c.poll(timeout_ms=500).values() for r in rs]
        assert sorted((r.partition, r.offset, r.value) for r in got) == [
            (q, 10, f"b{q}".encode()) for q in range(3)
        ]
    finally:
        c.close()


def test_unknown_topic_without_auto_create(broker_factory) -> None:  # type: ignore[no-untyped-def]
    b = broker_factory({"auto.create.topics.enable": "false"})
    c = _consumer(b.bootstrap)
    try:
        missing = topic_name("missing")
        # Metadata for an absent topic comes back without partitions (None or empty).
        assert not c.partitions_for_topic(missing)
    finally:
        c.close()
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=TIMEOUT_MS)
    try:
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.delete_topics([missing], timeout_ms=TIMEOUT_MS)
    finally:
        admin.close()


def test_describe_log_dirs_reports_sizes_and_free_space(
    admin: KafkaAdminClient, shared_broker: BrokerProcess
) -> None:
    """DescribeLogDirs (kafka-log-dirs.sh's API): the data dir, each partition's size, and
    (v4) the file system's total and usable bytes that the free-space threshold acts on."""
    name = _create(admin, 2)
    producer = _producer(shared_broker.bootstrap)
    for i in range(20):
        producer.send(name, value=b"x" * 100, partition=i % 2)
    producer.flush(timeout=TIMEOUT_S)
    producer.close()
    answers = admin.describe_log_dirs()
    dirs = [d for answer in answers for d in answer["log_dirs"]]
    assert len(dirs) == 1
    log_dir = dirs[0]
    assert log_dir["error_code"] == 0
    assert log_dir["log_dir"] == os.path.abspath(shared_broker.data_dir)
    sizes = {
        p["partition_index"]: p["partition_size"]
        for t in log_dir["topics"]
        if t["name"] == name
        for p in t["partitions"]
    }
    assert sorted(sizes) == [0, 1] and all(size > 1000 for size in sizes.values())
    usage = shutil.disk_usage(shared_broker.data_dir)
    assert log_dir["total_bytes"] == usage.total
    assert 0 < log_dir["usable_bytes"] <= log_dir["total_bytes"]
