"""KafkaJS's admin client, producer and consumer (Node.js, from npm) against a broker:
createPartitions, alterConfigs/describeConfigs, deleteTopicRecords, deleteGroups and
fetchOffsets, each with bad input answered with Kafka's error as KafkaJS reports it (type and
code), and a producer/consumer round trip; results checked through confluent-kafka too."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import ConfigResource, ResourceType

from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import (
    admin_client,
    consume_until,
    consumer,
    create_topic,
    produce_and_confirm,
    producer,
    topic_name,
)
from tests.node.kafkajs import ok, protocol_error, require_kafkajs, run_steps, step

TIMEOUT_S = 20.0
TOPIC_RESOURCE = 2  # KafkaJS's ConfigResourceTypes.TOPIC
GZIP = 1  # KafkaJS's CompressionTypes.GZIP


@pytest.fixture(scope="module")
def node() -> Iterator[str]:
    yield require_kafkajs()


def run(node: str, broker: BrokerProcess, *steps: dict[str, Any]) -> list[dict[str, Any]]:
    return run_steps(node, broker.bootstrap, list(steps))


def partition_count(broker: BrokerProcess, topic: str) -> int:
    md = admin_client(broker.bootstrap).list_topics(topic, timeout=TIMEOUT_S)
    return len(md.topics[topic].partitions)


def test_create_partitions(node: str, shared_broker: BrokerProcess) -> None:
    topic = create_topic(shared_broker.bootstrap, partitions=2)
    grow, fewer, same, unknown = run(
        node,
        shared_broker,
        step("createPartitions", {"topicPartitions": [{"topic": topic, "count": 5}]}),
        step("createPartitions", {"topicPartitions": [{"topic": topic, "count": 3}]}),
        step("createPartitions", {"topicPartitions": [{"topic": topic, "count": 5}]}),
        step("createPartitions", {"topicPartitions": [{"topic": topic_name(), "count": 2}]}),
    )
    ok(grow)
    assert protocol_error(fewer) == ("INVALID_PARTITIONS", 37)
    assert protocol_error(same) == ("INVALID_PARTITIONS", 37)
    assert protocol_error(unknown) == ("UNKNOWN_TOPIC_OR_PARTITION", 3)
    assert partition_count(shared_broker, topic) == 5


def test_alter_and_describe_configs(node: str, shared_broker: BrokerProcess) -> None:
    topic = create_topic(shared_broker.bootstrap)

    def alter(name: str, entries: dict[str, str]) -> dict[str, Any]:
        resource = {
            "type": TOPIC_RESOURCE,
            "name": name,
            "configEntries": [{"name": k, "value": v} for k, v in entries.items()],
        }
        return step("alterConfigs", {"validateOnly": False, "resources": [resource]})

    describe = step(
        "describeConfigs",
        {
            "includeSynonyms": False,
            "resources": [{"type": TOPIC_RESOURCE, "name": topic, "configNames": ["retention.ms"]}],
        },
    )
    altered, described, invalid, unknown_key, unknown_topic = run(
        node,
        shared_broker,
        alter(topic, {"retention.ms": "3600000", "cleanup.policy": "compact"}),
        describe,
        alter(topic, {"retention.ms": "an hour"}),
        alter(topic, {"no.such.config": "1"}),
        alter(topic_name(), {"retention.ms": "1000"}),
    )
    [resource] = ok(altered)["resources"]
    assert (resource["resourceName"], resource["errorCode"]) == (topic, 0)
    [resource] = ok(described)["resources"]
    assert [
        (e["configName"], e["configValue"], e["isDefault"], e["configSource"])
        for e in resource["configEntries"]
    ] == [("retention.ms", "3600000", False, 1)]  # 1: DYNAMIC_TOPIC_CONFIG
    assert protocol_error(invalid) == ("INVALID_CONFIG", 40)
    assert protocol_error(unknown_key) == ("INVALID_CONFIG", 40)
    assert protocol_error(unknown_topic) == ("UNKNOWN_TOPIC_OR_PARTITION", 3)

    # The failed alterations changed nothing; another client sees the first one's values.
    admin = admin_client(shared_broker.bootstrap)
    [future] = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
    configs = future.result(TIMEOUT_S)
    assert (configs["retention.ms"].value, configs["cleanup.policy"].value) == (
        "3600000",
        "compact",
    )


def test_delete_topic_records(node: str, shared_broker: BrokerProcess) -> None:
    topic = create_topic(shared_broker.bootstrap, partitions=2)
    produce_and_confirm(
        producer(shared_broker.bootstrap),
        topic,
        [(0, None, b"r%d" % i, None) for i in range(5)] + [(1, None, b"s0", None)],
    )

    def delete(partition: int, offset: str) -> dict[str, Any]:
        partitions = [{"partition": partition, "offset": offset}]
        return step("deleteTopicRecords", {"topic": topic, "partitions": partitions})

    # KafkaJS finds the leaders in its metadata cache, which its admin does not fill by itself.
    metadata, deleted, beyond, to_end, offsets = run(
        node,
        shared_broker,
        step("fetchTopicMetadata", {"topics": [topic]}),
        delete(0, "3"),
        delete(0, "6"),  # the high watermark is 5
        delete(1, "-1"),  # -1: up to the high watermark
        step("fetchTopicOffsets", topic),
    )
    ok(metadata)
    ok(deleted)
    assert protocol_error(beyond) == ("OFFSET_OUT_OF_RANGE", 1)
    ok(to_end)
    assert sorted((o["partition"], o["low"], o["high"]) for o in ok(offsets)) == [
        (0, "3", "5"),
        (1, "1", "1"),
    ]

    # A consumer from the earliest offset starts at the new log start offset.
    c = consumer(shared_broker.bootstrap)
    try:
        c.assign([TopicPartition(topic, 0, -2)])  # OFFSET_BEGINNING
        got = consume_until(c, lambda ms: len(ms) >= 2)
    finally:
        c.close()
    assert [(m.offset(), m.value()) for m in got] == [(3, b"r3"), (4, b"r4")]


def test_fetch_offsets_and_delete_groups(node: str, shared_broker: BrokerProcess) -> None:
    topic, group = create_topic(shared_broker.bootstrap, partitions=2), topic_name("kjs-g")
    produce_and_confirm(
        producer(shared_broker.bootstrap),
        topic,
        [(i % 2, None, b"v%d" % i, None) for i in range(6)],
    )
    fetch = step("fetchOffsets", {"groupId": group, "topics": [topic]})
    consumed, committed, joined, non_empty, left, deleted, after, again = run(
        node,
        shared_broker,
        step("consume", {"groupId": group, "topic": topic, "count": 6}),
        fetch,
        step("joinGroup", {"groupId": group, "topic": topic}),
        step("deleteGroups", [group]),
        step("leaveGroup", {"groupId": group}),
        step("deleteGroups", [group]),
        fetch,
        step("deleteGroups", [group]),
    )
    assert sorted(m["value"] for m in ok(consumed)) == [f"v{i}" for i in range(6)]
    [entry] = ok(committed)
    assert sorted((p["partition"], p["offset"]) for p in entry["partitions"]) == [
        (0, "3"),
        (1, "3"),
    ]
    assert ok(joined) == {topic: [0, 1]}
    assert protocol_error(non_empty) == ("NON_EMPTY_GROUP", 68)
    ok(left)
    assert ok(deleted) == [{"groupId": group, "errorCode": 0}]
    [entry] = ok(after)
    assert sorted((p["partition"], p["offset"]) for p in entry["partitions"]) == [
        (0, "-1"),
        (1, "-1"),
    ]
    assert protocol_error(again) == ("GROUP_ID_NOT_FOUND", 69)
    listed = admin_client(shared_broker.bootstrap).list_consumer_groups().result(TIMEOUT_S)
    assert group not in {g.group_id for g in listed.valid}


@pytest.mark.parametrize("compression", [None, GZIP])
def test_producer_consumer_round_trip(
    node: str, shared_broker: BrokerProcess, compression: int | None
) -> None:
    topic, group = create_topic(shared_broker.bootstrap, partitions=3), topic_name("kjs-rt")
    messages = [
        {"key": f"k{i}", "value": f"v{i}", "partition": i % 3, "headers": {"n": str(i)}}
        for i in range(30)
    ]
    sent, consumed = run(
        node,
        shared_broker,
        step("send", {"topic": topic, "messages": messages, "compression": compression}),
        step("consume", {"groupId": group, "topic": topic, "count": 30}),
    )
    assert sorted((r["partition"], r["errorCode"]) for r in ok(sent)) == [(p, 0) for p in range(3)]
    expected = sorted((i % 3, str(i // 3), f"k{i}", f"v{i}") for i in range(30))
    assert (
        sorted((m["partition"], m["offset"], m["key"], m["value"]) for m in ok(consumed))
        == expected
    )

    # confluent-kafka reads KafkaJS's records, headers included.
    c = consumer(shared_broker.bootstrap)
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(3)])
        got = consume_until(c, lambda ms: len(ms) >= 30)
    finally:
        c.close()
    assert (
        sorted((m.partition(), str(m.offset()), m.key().decode(), m.value().decode()) for m in got)
        == expected
    )
    assert sorted((m.value(), m.headers()) for m in got) == sorted(
        (f"v{i}".encode(), [("n", str(i).encode())]) for i in range(30)
    )
