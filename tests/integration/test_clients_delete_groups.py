"""DeleteGroups and OffsetDelete through real clients' admin APIs (confluent-kafka's
AdminClient.delete_consumer_groups, kafka-python's KafkaAdminClient.delete_groups and
delete_group_offsets): Kafka's error codes for bad input, and deletions that last through
a restart."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException
from confluent_kafka import TopicPartition as CTopicPartition
from kafka import KafkaAdminClient
from kafka import TopicPartition as KTopicPartition
from kafka.errors import GroupIdNotFoundError, NoError

from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import (
    OP_TIMEOUT_S,
    admin_client,
    consume_until,
    consumer,
    create_topic,
    produce_and_confirm,
    producer,
    wait_assignment,
)

T = OP_TIMEOUT_S
TIMEOUT_MS = int(T * 1000)


def _group() -> str:
    return f"del-{uuid.uuid4().hex[:8]}"


def _fill(bs: str, topic: str, partitions: int, count: int) -> None:
    recs = [(i % partitions, None, f"v{i}".encode(), None) for i in range(count)]
    assert not produce_and_confirm(producer(bs), topic, recs).errors


def _consume_and_commit(bs: str, topic: str, group: str, count: int) -> None:
    """A group member that reads `count` records, commits, and leaves the group Empty."""
    c = consumer(bs, group)
    c.subscribe([topic])
    consume_until(c, lambda got: len(got) >= count)
    c.commit(asynchronous=False)
    c.close()


def _committed(bs: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    admin = admin_client(bs)
    request = ConsumerGroupTopicPartitions(
        group, [CTopicPartition(topic, p) for p in range(partitions)]
    )
    result = admin.list_consumer_group_offsets([request], request_timeout=T)[group].result(T)
    return {tp.partition: tp.offset for tp in result.topic_partitions}


@pytest.fixture
def kadmin(shared_broker: BrokerProcess) -> Iterator[KafkaAdminClient]:
    a = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap, request_timeout_ms=TIMEOUT_MS)
    try:
        yield a
    finally:
        a.close()


def test_confluent_delete_consumer_groups(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    topic = create_topic(bs, partitions=2)
    _fill(bs, topic, 2, 10)
    done, busy, never = _group(), _group(), _group()
    _consume_and_commit(bs, topic, done, 10)
    assert sum(_committed(bs, done, topic, 2).values()) == 10
    active = consumer(bs, busy)
    active.subscribe([topic])
    wait_assignment(active, lambda a: len(a) == 2)
    try:
        admin = admin_client(bs)
        futures = admin.delete_consumer_groups([done, busy, never], request_timeout=T)
        assert futures[done].result(T) is None
        for group, code in (
            (busy, KafkaError.NON_EMPTY_GROUP),
            (never, KafkaError.GROUP_ID_NOT_FOUND),
        ):
            with pytest.raises(KafkaException) as failed:
                futures[group].result(T)
            assert failed.value.args[0].code() == code, group
    finally:
        active.close()
    assert _committed(bs, done, topic, 2) == {0: -1001, 1: -1001}
    broker.restart()
    assert _committed(bs, done, topic, 2) == {0: -1001, 1: -1001}
    # A new member of the deleted group starts over by auto.offset.reset.
    again = consumer(bs, done)
    again.subscribe([topic])
    try:
        assert len(consume_until(again, lambda got: len(got) >= 10)) == 10
    finally:
        again.close()
    # The emptied group can be deleted now.
    admin = admin_client(bs)
    futures = admin.delete_consumer_groups([busy], request_timeout=T)
    assert futures[busy].result(T) is None


def test_kafka_python_delete_groups_and_offsets(
    shared_broker: BrokerProcess, kadmin: KafkaAdminClient
) -> None:
    bs = shared_broker.bootstrap
    topic, other = create_topic(bs, partitions=2), create_topic(bs)
    _fill(bs, topic, 2, 6)
    _fill(bs, other, 1, 3)
    simple, busy = _group(), _group()
    _consume_and_commit(bs, topic, simple, 6)
    _consume_and_commit(bs, other, simple, 3)

    result = kadmin.delete_group_offsets(
        simple,
        [KTopicPartition(topic, 0), KTopicPartition("no-such-topic", 0), KTopicPartition(topic, 5)],
    )
    assert result[KTopicPartition(topic, 0)] is NoError
    assert result[KTopicPartition("no-such-topic", 0)].errno == 3  # UNKNOWN_TOPIC_OR_PARTITION
    assert result[KTopicPartition(topic, 5)].errno == 3
    left = _committed(bs, simple, topic, 2)
    assert left[0] == -1001 and left[1] > 0

    active = consumer(bs, busy)
    active.subscribe([topic])
    wait_assignment(active, lambda a: len(a) == 2)
    try:
        active.commit(
            offsets=[CTopicPartition(topic, 0, 1), CTopicPartition(other, 0, 1)],
            asynchronous=False,
        )
        result = kadmin.delete_group_offsets(
            busy, [KTopicPartition(topic, 0), KTopicPartition(other, 0)]
        )
        assert result[KTopicPartition(topic, 0)].errno == 86  # GROUP_SUBSCRIBED_TO_TOPIC
        assert result[KTopicPartition(other, 0)] is NoError
        deleted = kadmin.delete_groups([simple, busy, "never-" + _group()])
        assert deleted[simple] == "OK"
        assert deleted[busy] == "NonEmptyGroupError"
        assert [v for k, v in deleted.items() if k.startswith("never-")] == ["GroupIdNotFoundError"]
    finally:
        active.close()
    with pytest.raises(GroupIdNotFoundError):
        kadmin.delete_group_offsets(simple, [KTopicPartition(topic, 1)])
    assert _committed(bs, busy, other, 1) == {0: -1001}
    assert _committed(bs, busy, topic, 2)[0] == 1
