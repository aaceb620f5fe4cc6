"""The core APIs at their newest versions through real clients: kafka-python 3 speaks the
newest of each (Metadata v13 by topic id, FindCoordinator v6 batched, ListOffsets v10,
DescribeCluster v2, ApiVersions v4 with its features), confluent-kafka reads topic ids, and
a topic keeps its id across a restart."""

from __future__ import annotations

import base64
import time
import uuid

from confluent_kafka import TopicCollection
from kafka import KafkaAdminClient, KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from kafka.protocol.api_key import ApiKey as KpApiKey

from onceflow.protocol.api_versions import SUPPORTED_VERSIONS, ApiKey
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import OP_TIMEOUT_S, admin_client, create_topic, producer

T = OP_TIMEOUT_S


def kp_admin(broker: BrokerProcess) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=int(T * 1000))


def test_kafka_python_negotiates_the_newest_versions(shared_broker: BrokerProcess) -> None:
    admin = kp_admin(shared_broker)
    try:
        negotiated = admin.api_versions()
        for key in (ApiKey.API_VERSIONS, ApiKey.METADATA, ApiKey.LIST_OFFSETS):
            assert negotiated[KpApiKey(key)][1] == SUPPORTED_VERSIONS[key][1]
        # Only what Onceflow implements: KIP-848's group.version 1, no TV2.
        assert admin.describe_features() == {
            "group.version": {"supported": (0, 1), "finalized": (1, 1), "finalized_epoch": 1},
            "transaction.version": {"supported": (0, 2)},
        }
        cluster = admin.describe_cluster()  # DescribeCluster v2, fenced brokers asked for
        assert [b["broker_id"] for b in cluster["brokers"]] == [0]
        assert cluster["controller_id"] == 0
    finally:
        admin.close()


def test_topic_ids_through_both_clients_and_a_restart(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, partitions=2)
    admin = kp_admin(broker)
    try:
        (described,) = admin.describe_topics([topic])
        topic_id = uuid.UUID(described["topic_id"])  # kafka-python gives its text
        assert topic_id.int != 0
        (by_id,) = admin.describe_topics([topic_id])  # Metadata v12+ by id
        assert (by_id["name"], len(by_id["partitions"])) == (topic, 2)
        (unknown,) = admin.describe_topics([uuid.uuid4()])
        assert unknown["error_code"] == 100  # UNKNOWN_TOPIC_ID
    finally:
        admin.close()
    # librdkafka shows the id in base64 without padding.
    confluent = admin_client(broker.bootstrap)
    futures = confluent.describe_topics(TopicCollection([topic]))
    as_librdkafka = base64.b64encode(topic_id.bytes).rstrip(b"=").decode()
    assert str(futures[topic].result(T).topic_id) == as_librdkafka
    broker.restart()
    admin = kp_admin(broker)
    try:
        (again,) = admin.describe_topics([topic])
        assert uuid.UUID(again["topic_id"]) == topic_id
    finally:
        admin.close()


def test_kafka_python_finds_coordinators_in_one_batch(shared_broker: BrokerProcess) -> None:
    admin = kp_admin(shared_broker)
    try:
        groups = [f"batch-{i}-{uuid.uuid4().hex[:6]}" for i in range(3)]
        described = admin.describe_groups(groups)  # one FindCoordinator v4+ for all three
        assert sorted(described) == sorted(groups)
        assert {d["group_state"] for d in described.values()} == {"Dead"}
    finally:
        admin.close()


def test_kafka_python_offsets_by_time(shared_broker: BrokerProcess) -> None:
    bs = shared_broker.bootstrap
    topic = create_topic(bs, partitions=1)
    now = int(time.time() * 1000)
    p = producer(bs, acks="all")
    for i in range(5):
        p.produce(topic, value=f"r{i}".encode(), partition=0, timestamp=now - 10_000 + i * 1000)
    assert p.flush(T) == 0
    consumer = KafkaConsumer(bootstrap_servers=bs, request_timeout_ms=int(T * 1000) + 1000)
    try:
        tp = KpTopicPartition(topic, 0)
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: 5}
        found = consumer.offsets_for_times({tp: now - 7_500})[tp]
        assert found is not None and (found.offset, found.timestamp) == (3, now - 7_000)
        assert consumer.offsets_for_times({tp: now + 60_000}) == {tp: None}
    finally:
        consumer.close()
