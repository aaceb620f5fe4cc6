"""confluent-kafka (librdkafka) against a real broker: admin, produce, consume by assignment."""

from __future__ import annotations

import time
from collections import defaultdict

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import ConfigResource, ConfigSource, NewTopic, ResourceType

from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import (
    OP_TIMEOUT_S,
    admin_client,
    assign_from,
    consume_until,
    consumer,
    create_topic,
    produce_and_confirm,
    producer,
    topic_name,
)

T = OP_TIMEOUT_S


def _wait_topic_gone(admin, name: str) -> None:
    deadline = time.monotonic() + T
    while time.monotonic() < deadline:
        if name not in admin.list_topics(timeout=T).topics:
            return
        time.sleep(0.1)
    raise AssertionError(f"topic {name} still listed after deletion")


def test_admin_create_list_delete_topics(shared_broker: BrokerProcess) -> None:
    admin = admin_client(shared_broker.bootstrap)
    a, b = topic_name("adm-a"), topic_name("adm-b")
    futures = admin.create_topics(
        [NewTopic(a, 3, replication_factor=1), NewTopic(b, 1, replication_factor=1)],
        request_timeout=T,
    )
    for f in futures.values():
        f.result(timeout=T)

    md = admin.list_topics(timeout=T)
    assert len(md.topics[a].partitions) == 3
    assert len(md.topics[b].partitions) == 1
    assert md.topics[a].error is None
    assert sorted(md.topics[a].partitions) == [0, 1, 2]
    for p in md.topics[a].partitions.values():
        assert p.leader == 0 and p.replicas == [0] and p.isrs == [0]
    assert list(md.brokers) == [0]
    assert md.brokers[0].port == shared_broker.port

    # Creating it again fails with TOPIC_ALREADY_EXISTS and changes nothing.
    again = admin.create_topics([NewTopic(a, 5, replication_factor=1)], request_timeout=T)
    with pytest.raises(KafkaException) as info:
        again[a].result(timeout=T)
    assert info.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    assert len(admin.list_topics(a, timeout=T).topics[a].partitions) == 3

    # One broker cannot hold three replicas.
    bad = topic_name("adm-rf")
    rf3 = admin.create_topics([NewTopic(bad, 1, replication_factor=3)], request_timeout=T)
    with pytest.raises(KafkaException) as info:
        rf3[bad].result(timeout=T)
    assert info.value.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR

    deleted = admin.delete_topics([a], operation_timeout=T, request_timeout=T)
    deleted[a].result(timeout=T)
    _wait_topic_gone(admin, a)
    listed = admin.list_topics(timeout=T).topics
    assert b in listed
    assert a not in listed

    # Deleting a topic that is not there is UNKNOWN_TOPIC_OR_PART.
    missing = admin.delete_topics([a], operation_timeout=T, request_timeout=T)
    with pytest.raises(KafkaException) as info:
        missing[a].result(timeout=T)
    assert info.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    # A deleted topic's name can be used again, starting from offset 0.
    create_topic(shared_broker.bootstrap, a, partitions=2)
    p = producer(shared_broker.bootstrap, acks="all")
    d = produce_and_confirm(p, a, [(1, b"k", b"v", None)])
    assert not d.errors and d.ok[0][:2] == (1, 0)


def test_describe_configs_topic_and_broker(shared_broker: BrokerProcess) -> None:
    admin = admin_client(shared_broker.bootstrap)
    name = create_topic(
        shared_broker.bootstrap,
        partitions=1,
        config={"retention.ms": "123456", "segment.bytes": "1048576"},
    )
    topic_res = ConfigResource(ResourceType.TOPIC, name)
    broker_res = ConfigResource(ResourceType.BROKER, "0")
    result = admin.describe_configs([topic_res, broker_res], request_timeout=T)
    topic_cfg = result[topic_res].result(timeout=T)
    broker_cfg = result[broker_res].result(timeout=T)

    assert topic_cfg["retention.ms"].value == "123456"
    assert topic_cfg["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert not topic_cfg["retention.ms"].is_default
    assert topic_cfg["segment.bytes"].value == "1048576"
    # Keys the topic did not override have their effective (broker default) values.
    assert topic_cfg["cleanup.policy"].value == "delete"
    assert topic_cfg["cleanup.policy"].is_default
    assert topic_cfg["max.message.bytes"].value.isdigit()
    assert len(topic_cfg) >= 10

    assert len(broker_cfg) >= 10
    assert broker_cfg["num.partitions"].value == "1"
    assert broker_cfg["auto.create.topics.enable"].value == "true"
    assert broker_cfg["log.dirs"].value == shared_broker.data_dir
    assert broker_cfg["log.dirs"].source == ConfigSource.STATIC_BROKER_CONFIG.value

    # An unknown topic is an error for that resource only.
    unknown = ConfigResource(ResourceType.TOPIC, topic_name("nope"))
    res = admin.describe_configs([unknown], request_timeout=T)
    with pytest.raises(KafkaException) as info:
        res[unknown].result(timeout=T)
    assert info.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def _records(
    n: int, partitions: int
) -> list[tuple[int | None, bytes, bytes, list[tuple[str, bytes]]]]:
    """n keyed records: key i % 7 (so each key recurs), explicit partition by key."""
    out = []
    for i in range(n):
        key = f"key-{i % 7}".encode()
        part = (i % 7) % partitions
        headers = [("seq", str(i).encode()), ("h2", b"\x00\xff" * (i % 3))]
        out.append((part, key, f"value-{i}-".encode() + bytes(range(i % 50)), headers))
    return out


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_produce_and_consume_by_assignment(shared_broker: BrokerProcess, acks: str) -> None:
    bs = shared_broker.bootstrap
    topic = create_topic(bs, partitions=3)
    sent = _records(200, 3)
    p = producer(bs, acks=acks, **{"linger.ms": 2, "batch.num.messages": 17})
    delivered = produce_and_confirm(p, topic, sent)
    assert not delivered.errors, delivered.errors[:3]

    per_partition_sent: dict[int, list[tuple[bytes, bytes, list[tuple[str, bytes]]]]] = defaultdict(
        list
    )
    for part, key, value, headers in sent:
        per_partition_sent[part].append((key, value, headers))

    if acks != "0":
        # Acknowledged offsets are consecutive from 0 in each partition, in send order.
        acked: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
        for part, off, _key, value, _ in delivered.ok:
            acked[part].append((off, value))
        for part, items in acked.items():
            items.sort()
            assert [o for o, _ in items] == list(range(len(per_partition_sent[part])))
            assert [v for _, v in items] == [v for _, v, _ in per_partition_sent[part]]

    c = consumer(bs)
    try:
        assign_from(c, topic, range(3))
        got = consume_until(c, lambda g: len(g) >= len(sent), what=f"{len(sent)} records")
        # Nothing more arrives.
        extra = c.poll(0.5)
        assert extra is None or extra.error() is not None, f"unexpected extra record {extra}"
    finally:
        c.close()

    by_part: dict[int, list] = defaultdict(list)
    for m in got:
        assert m.topic() == topic
        by_part[m.partition()].append(m)
    assert set(by_part) == set(per_partition_sent)
    for part, msgs in by_part.items():
        assert [m.offset() for m in msgs] == list(range(len(msgs)))
        assert [(m.key(), m.value(), m.headers()) for m in msgs] == per_partition_sent[part]
        for m in msgs:
            ts_type, ts = m.timestamp()
            assert ts_type == 1  # CreateTime, as produced
            assert abs(ts / 1000 - time.time()) < 600

    # Watermarks agree with what was consumed.
    c2 = consumer(bs)
    try:
        for part, msgs in by_part.items():
            low, high = c2.get_watermark_offsets(
                TopicPartition(topic, part), timeout=T, cached=False
            )
            assert (low, high) == (0, len(msgs))
    finally:
        c2.close()


def test_keys_land_in_one_partition_with_default_partitioner(shared_broker: BrokerProcess) -> None:
    bs = shared_broker.bootstrap
    topic = create_topic(bs, partitions=4)
    sent = [(None, f"user-{i % 11}".encode(), f"v{i}".encode(), None) for i in range(220)]
    delivered = produce_and_confirm(producer(bs, acks="all"), topic, sent)
    assert not delivered.errors
    key_parts: dict[bytes, set[int]] = defaultdict(set)
    for part, _, key, _, _ in delivered.ok:
        key_parts[key].add(part)
    assert all(len(ps) == 1 for ps in key_parts.values()), key_parts
    assert len({next(iter(ps)) for ps in key_parts.values()}) > 1  # spread over partitions

    c = consumer(bs)
    try:
        assign_from(c, topic, range(4))
        got = consume_until(c, lambda g: len(g) >= 220)
    finally:
        c.close()
    # Per key, values arrive in send order.
    seen: dict[bytes, list[bytes]] = defaultdict(list)
    for m in got:
        seen[m.key()].append(m.value())
    for key, values in seen.items():
        assert values == [v for _, k, v, _ in sent if k == key]


def test_consume_from_offset_and_null_key_value(shared_broker: BrokerProcess) -> None:
    bs = shared_broker.bootstrap
    topic = create_topic(bs, partitions=2)
    sent = [
        (
            1,
            None if i % 4 == 0 else f"k{i}".encode(),
            None if i % 5 == 0 else f"v{i}".encode(),
            None,
        )
        for i in range(40)
    ]
    delivered = produce_and_confirm(producer(bs, acks="1"), topic, sent)
    assert not delivered.errors
    c = consumer(bs)
    try:
        c.assign([TopicPartition(topic, 1, 25)])
        got = consume_until(c, lambda g: len(g) >= 15)
        assert [m.offset() for m in got] == list(range(25, 40))
        assert [(m.key(), m.value()) for m in got] == [(k, v) for _, k, v, _ in sent[25:]]
        # Seek back to an earlier offset on the same assignment.
        c.seek(TopicPartition(topic, 1, 3))
        again = consume_until(c, lambda g: len(g) >= 5)
        assert [m.offset() for m in again[:5]] == [3, 4, 5, 6, 7]
        assert again[0].key() == b"k3" and again[2].value() is None  # offset 5: null value
        assert again[1].key() is None  # offset 4: null key
    finally:
        c.close()


def test_large_records_and_many_batches_fetch_in_full(shared_broker: BrokerProcess) -> None:
    """Records big enough that the fetch response uses sendfile, over several fetches."""
    bs = shared_broker.bootstrap
    topic = create_topic(bs, partitions=1)
    big = [(0, f"k{i}".encode(), bytes([i % 256]) * (150_000 + i), None) for i in range(12)]
    delivered = produce_and_confirm(producer(bs, acks="all", **{"linger.ms": 0}), topic, big)
    assert not delivered.errors
    c = consumer(bs, **{"fetch.max.bytes": 1_000_000, "max.partition.fetch.bytes": 400_000})
    try:
        assign_from(c, topic, [0], OFFSET_BEGINNING)
        got = consume_until(c, lambda g: len(g) >= 12)
    finally:
        c.close()
    assert [m.offset() for m in got] == list(range(12))
    assert [m.value() for m in got] == [v for _, _, v, _ in big]
