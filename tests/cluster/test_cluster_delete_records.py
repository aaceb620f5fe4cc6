"""DeleteRecords on a replicated partition: the answer waits until every live replica has
moved its log start offset (the low watermark), times out while a follower cannot, and the
followers' moved starts survive the leader's death (a new leader never offers the deleted
records again). DescribeTopicPartitions shows the cluster's replicas, ISR and leaders."""

from __future__ import annotations

import os

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from kafka import KafkaAdminClient

from tests.helpers.clients import (
    admin_client,
    consumer,
    create_topic,
    produce_and_confirm,
    producer,
)
from tests.helpers.cluster import Cluster, ClusterBroker, cluster_fixture

# A paused follower stays registered (alive) for the session timeout: long enough that the
# delete it holds up times out first, however slowly a loaded machine sends it.
three = cluster_fixture(
    3,
    scope="module",
    overrides={"min.insync.replicas": "2", "zookeeper.session.timeout.ms": "12000"},
)
T = 20.0
# Followers' fetches parked for up to 20 s (replica.fetch.wait.max.ms, within the lag time).
parked = cluster_fixture(
    3,
    scope="module",
    overrides={"min.insync.replicas": "2", "replica.fetch.wait.max.ms": "20000"},
)


def _delete(cluster: Cluster, tp: TopicPartition, timeout: float = T) -> int | KafkaError:
    admin = admin_client(cluster.bootstrap)
    future = admin.delete_records([tp], request_timeout=T, operation_timeout=timeout)[tp]
    try:
        return int(future.result(T).low_watermark)
    except KafkaException as exc:
        error: KafkaError = exc.args[0]
        return error


def _earliest(bs: str, topic: str, partition: int) -> int:
    c = consumer(bs)
    try:
        low, _ = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=T)
        return int(low)
    finally:
        c.close()


def _checkpointed_start(broker: ClusterBroker, topic: str) -> int | None:
    """The log start offset a broker's log-start-offset-checkpoint holds for topic-0."""
    path = os.path.join(broker.data_dir, "log-start-offset-checkpoint")
    with open(path) as f:
        for line in f.read().splitlines()[2:]:
            name, partition, offset = line.rsplit(" ", 2)
            if (name, partition) == (topic, "0"):
                return int(offset)
    return None


def _twenty_records(cluster: Cluster) -> tuple[str, ClusterBroker, list[ClusterBroker]]:
    """A new topic of one partition on every broker, with 20 records: its name, leader
    and followers."""
    topic = create_topic(cluster.bootstrap, replication_factor=3)
    records = [(0, None, b"r%d" % i, None) for i in range(20)]
    assert not produce_and_confirm(producer(cluster.bootstrap, acks="all"), topic, records).errors
    leader = cluster.leader_of(topic, 0)
    return topic, leader, [b for b in cluster.brokers if b is not leader]


def test_delete_records_waits_for_the_replicas(three: Cluster) -> None:
    bs = three.bootstrap
    topic, leader, followers = _twenty_records(three)

    assert _delete(three, TopicPartition(topic, 0, 8)) == 8
    # The answer came once every follower had moved too: each checkpointed it.
    assert [_checkpointed_start(b, topic) for b in followers] == [8, 8]

    paused = followers[0]
    paused.pause()
    try:
        timed_out = _delete(three, TopicPartition(topic, 0, 12), timeout=2.0)
        assert isinstance(timed_out, KafkaError)
        assert timed_out.code() == KafkaError.REQUEST_TIMED_OUT
        assert _earliest(bs, topic, 0) == 12  # the leader moved at once
    finally:
        paused.resume()
    assert _delete(three, TopicPartition(topic, 0, 12)) == 12
    assert _checkpointed_start(paused, topic) == 12

    leader.kill()
    try:
        new_leader = three.leader_of(topic, 0)
        assert new_leader is not leader
        assert _earliest(bs, topic, 0) == 12
        reader = consumer(bs, **{"auto.offset.reset": "earliest"})
        reader.assign([TopicPartition(topic, 0, 0)])
        try:
            first = None
            for _ in range(100):
                msg = reader.poll(0.2)
                if msg is not None and msg.error() is None:
                    first = msg.offset()
                    break
            assert first == 12
        finally:
            reader.close()
    finally:
        leader.start()


def test_delete_records_wakes_the_followers_parked_fetches(parked: Cluster) -> None:
    """The leader's log start moves without an append, so no append wakes the followers'
    fetches: DeleteRecords wakes them itself (Writes.log_start_moved), and they come back
    at once to be told the new start. With their fetches parked for up to 20 s, each
    delete completes within a 5 s operation timeout, and every replica moved."""
    topic, _, followers = _twenty_records(parked)
    for offset in (5, 9, 14):
        assert _delete(parked, TopicPartition(topic, 0, offset), timeout=5.0) == offset
        assert [_checkpointed_start(b, topic) for b in followers] == [offset, offset]


def test_describe_topic_partitions_on_a_cluster(three: Cluster) -> None:
    bs = three.bootstrap
    topic = create_topic(bs, partitions=3, replication_factor=3)
    admin = KafkaAdminClient(bootstrap_servers=bs, request_timeout_ms=int(T * 1000))
    try:
        result = admin.describe_topic_partitions([topic])
    finally:
        admin.close()
    (described,) = result["topics"]
    assert described["error_code"] == 0 and result["next_cursor"] is None
    assert described["topic_id"] is not None and described["topic_id"].int != 0
    for p in described["partitions"]:
        assert sorted(p["replica_nodes"]) == [1, 2, 3]
        assert p["leader_id"] == three.leader_of(topic, p["partition_index"]).broker_id
        assert p["leader_epoch"] >= 0 and sorted(p["isr_nodes"]) == [1, 2, 3]
