"""The admin APIs through real clients' admin interfaces: kafka-python 3 (which speaks Kafka
4.1's newest versions: CreateTopics v7, DeleteTopics v6 by topic id, DescribeConfigs v4,
ListTransactions v2) and aiokafka (CreateTopics v3, DeleteTopics v3, DescribeConfigs v2);
confluent-kafka's AdminClient is in test_clients_confluent.py and test_clients_edge_cases.py.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin import NewTopic as AioNewTopic
from aiokafka.admin.config_resource import ConfigResource as AioConfigResource
from aiokafka.admin.config_resource import ConfigResourceType as AioConfigResourceType
from confluent_kafka import Producer
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.errors import (
    InvalidConfigurationError,
    KafkaError,
    TopicAlreadyExistsError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)

from onceflow.errors import ErrorCode
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import topic_name

TIMEOUT_MS = 20_000


@pytest.fixture
def admin(shared_broker: BrokerProcess) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(
        bootstrap_servers=shared_broker.bootstrap, request_timeout_ms=TIMEOUT_MS
    )
    try:
        yield client
    finally:
        client.close()


def existing_topics(admin: KafkaAdminClient) -> set[str]:
    return set(admin.list_topics())


# ---- kafka-python: the newest versions ------------------------------------------------------


def test_kafka_python_create_topics_answers_configs_partitions_and_id(
    admin: KafkaAdminClient,
) -> None:
    name = topic_name("kp-create")
    result = admin.create_topics(
        {name: {"num_partitions": 3, "configs": {"retention.ms": "4321"}}}, timeout_ms=TIMEOUT_MS
    )
    (topic,) = result["topics"]
    assert (topic["name"], topic["error_code"]) == (name, 0)
    assert (topic["num_partitions"], topic["replication_factor"]) == (3, 1)
    assert topic["configs"]["retention.ms"]["value"] == "4321"
    assert topic["configs"]["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert topic["configs"]["cleanup.policy"]["config_source"] == "DEFAULT_CONFIG"
    (described,) = admin.describe_topics([name])
    assert uuid.UUID(str(described["topic_id"])) == uuid.UUID(topic["topic_id"])

    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics({name: {}}, timeout_ms=TIMEOUT_MS)
    with pytest.raises(InvalidConfigurationError):
        admin.create_topics(
            {topic_name("kp-badconfig"): {"configs": {"retention.ms": "soon"}}},
            timeout_ms=TIMEOUT_MS,
        )


def test_kafka_python_validate_only_answers_without_creating(admin: KafkaAdminClient) -> None:
    name = topic_name("kp-validate")
    result = admin.create_topics({name: {"num_partitions": 2}}, validate_only=True)
    (topic,) = result["topics"]
    assert (topic["error_code"], topic["num_partitions"], topic["replication_factor"]) == (0, 2, 1)
    assert topic["configs"]
    assert name not in existing_topics(admin)


def test_kafka_python_delete_topics_by_id_and_by_name(admin: KafkaAdminClient) -> None:
    by_id, by_name = topic_name("kp-del-id"), topic_name("kp-del-name")
    created = admin.create_topics({by_id: {}, by_name: {}}, timeout_ms=TIMEOUT_MS)["topics"]
    ids = {t["name"]: uuid.UUID(t["topic_id"]) for t in created}

    result = admin.delete_topics([ids[by_id], by_name], timeout_ms=TIMEOUT_MS)
    answers = {(t["name"], uuid.UUID(t["topic_id"]), t["error_code"]) for t in result["topics"]}
    assert answers == {(by_id, ids[by_id], 0), (by_name, ids[by_name], 0)}
    assert not {by_id, by_name} & existing_topics(admin)

    with pytest.raises(UnknownTopicIdError):
        admin.delete_topics([ids[by_id]], timeout_ms=TIMEOUT_MS)  # gone with its topic
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.delete_topics([by_name], timeout_ms=TIMEOUT_MS)


def test_kafka_python_describe_configs(admin: KafkaAdminClient) -> None:
    name = topic_name("kp-describe")
    admin.create_topics({name: {"configs": {"retention.ms": "5555"}}}, timeout_ms=TIMEOUT_MS)
    described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
    entry = described["topic"][name]["retention.ms"]
    assert (entry["value"], entry["config_source"], entry["config_type"]) == (
        "5555",
        "DYNAMIC_TOPIC_CONFIG",
        "LONG",
    )
    # kafka-python drops a resource's error (UNKNOWN_TOPIC_OR_PARTITION): no entries.
    missing = topic_name("kp-none")
    assert admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, missing)]) == {
        "topic": {missing: {}}
    }


@pytest.fixture
def open_transactions(shared_broker: BrokerProcess) -> Iterator[list[str]]:
    """Two transactional producers, each with a transaction open; their ids."""
    topic = topic_name("kp-txn")
    prefix = topic_name("kp-list")
    ids = [f"{prefix}-a", f"{prefix}-b"]
    producers = []
    for txn_id in ids:
        producer = Producer(
            {"bootstrap.servers": shared_broker.bootstrap, "transactional.id": txn_id}
        )
        producer.init_transactions(10)
        producer.begin_transaction()
        producer.produce(topic, b"open")
        assert producer.flush(10) == 0
        producers.append(producer)
    yield ids
    for producer in producers:
        producer.abort_transaction(10)


def test_kafka_python_list_transactions_with_duration_and_pattern(
    admin: KafkaAdminClient, open_transactions: list[str]
) -> None:
    first, second = open_transactions
    prefix = first.rsplit("-", 1)[0]

    def listed(**filters: Any) -> list[str]:
        per_broker = admin.list_transactions(state_filters=["Ongoing"], **filters)
        ids = [t.transactional_id for listings in per_broker.values() for t in listings]
        return sorted(i for i in ids if i.startswith(prefix))

    assert listed() == [first, second]
    assert listed(transactional_id_pattern=f"{prefix}-.*") == [first, second]
    assert listed(transactional_id_pattern=f"{prefix}-b") == [second]
    assert listed(transactional_id_pattern=prefix) == []  # the whole id must match
    assert listed(duration_filter_ms=0) == [first, second]
    assert listed(duration_filter_ms=3_600_000) == []
    with pytest.raises(KafkaError) as refused:
        admin.list_transactions(transactional_id_pattern="(unclosed")
    assert getattr(refused.value, "errno", None) == ErrorCode.invalid_regular_expression


# ---- aiokafka: the versions it speaks --------------------------------------------------------


def test_aiokafka_admin_create_describe_delete(shared_broker: BrokerProcess) -> None:
    name = topic_name("aio-admin")

    async def scenario() -> None:
        client = AIOKafkaAdminClient(bootstrap_servers=shared_broker.bootstrap)
        await client.start()
        try:
            created = await client.create_topics(
                [AioNewTopic(name, 2, 1, topic_configs={"retention.ms": "7777"})]
            )
            assert [(t[0], t[1]) for t in created.topic_errors] == [(name, 0)]
            again = await client.create_topics([AioNewTopic(name, 2, 1)])
            assert [t[1] for t in again.topic_errors] == [ErrorCode.topic_already_exists]
            bad = await client.create_topics(
                [AioNewTopic(topic_name("aio-bad"), 1, 1, topic_configs={"retention.ms": "x"})]
            )
            assert [t[1] for t in bad.topic_errors] == [ErrorCode.invalid_config]

            (described,) = await client.describe_configs(
                [AioConfigResource(AioConfigResourceType.TOPIC, name, {"retention.ms": None})]
            )
            ((error, _message, _type, resource, entries),) = described.resources
            assert (error, resource) == (0, name)
            assert [(e[0], e[1]) for e in entries] == [("retention.ms", "7777")]

            deleted = await client.delete_topics([name, topic_name("aio-missing")])
            assert [code for _name, code in deleted.topic_error_codes] == [
                ErrorCode.none,
                ErrorCode.unknown_topic_or_partition,
            ]
        finally:
            await client.close()

    asyncio.run(asyncio.wait_for(scenario(), 60))
