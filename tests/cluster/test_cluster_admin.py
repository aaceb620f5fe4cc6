"""A cluster's admin surface and its bad input: DescribeCluster, CreateTopics with a
replication factor or an explicit assignment, INVALID_REPLICATION_FACTOR, a replica fetch
from a client, leader-epoch fencing, a duplicate broker.id and an unreachable ZooKeeper."""

from __future__ import annotations

import datetime
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import NewPartitions, NewTopic
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i64

from tests.helpers.broker import TEST_DEFAULT_OVERRIDES, broker_command, free_port
from tests.helpers.clients import admin_client, create_topic, producer, topic_name
from tests.helpers.cluster import Cluster, cluster_fixture
from tests.helpers.wire import RawConnection, request_class

three = cluster_fixture(3, scope="module", overrides={"min.insync.replicas": "2"})
T = 20.0


def test_describe_cluster_lists_every_broker_and_the_controller(three: Cluster) -> None:
    admin = admin_client(three.bootstrap)
    described = admin.describe_cluster(request_timeout=T).result(T)
    assert sorted(n.id for n in described.nodes) == [1, 2, 3]
    assert described.controller is not None and described.controller.id in (1, 2, 3)
    assert described.cluster_id


def test_create_topics_with_a_factor_and_with_an_explicit_assignment(three: Cluster) -> None:
    admin = admin_client(three.bootstrap)
    spread = create_topic(three.bootstrap, partitions=6, replication_factor=3)
    md = admin.list_topics(spread, timeout=T).topics[spread]
    leaders = sorted(p.leader for p in md.partitions.values())
    assert leaders == [1, 1, 2, 2, 3, 3], "round robin spreads the leaders evenly"
    assert all(sorted(p.replicas) == [1, 2, 3] for p in md.partitions.values())

    pinned = topic_name()
    futures = admin.create_topics(
        [NewTopic(pinned, num_partitions=2, replica_assignment=[[2, 3], [3, 1]])], request_timeout=T
    )
    futures[pinned].result(T)
    deadline = time.monotonic() + T
    while True:
        parts = admin.list_topics(pinned, timeout=T).topics[pinned].partitions
        if len(parts) == 2 and all(p.leader >= 0 for p in parts.values()):
            break
        assert time.monotonic() < deadline, parts
        time.sleep(0.1)
    assert (parts[0].replicas, parts[0].leader) == ([2, 3], 2)
    assert (parts[1].replicas, parts[1].leader) == ([3, 1], 3)


@pytest.mark.parametrize(
    ("topic", "code"),
    [
        (NewTopic("too-many-replicas", 1, 4), "INVALID_REPLICATION_FACTOR"),
        (
            NewTopic("unknown-broker", num_partitions=1, replica_assignment=[[1, 9]]),
            "INVALID_REPLICA_ASSIGNMENT",
        ),
    ],
)
def test_bad_replication_is_refused_with_kafkas_error(
    three: Cluster, topic: NewTopic, code: str
) -> None:
    admin = admin_client(three.bootstrap)
    futures = admin.create_topics([topic], request_timeout=T)
    with pytest.raises(KafkaException) as caught:
        futures[topic.topic].result(T)
    assert caught.value.args[0].name() == code
    md = admin.list_topics(timeout=T)
    assert topic.topic not in md.topics


def _fetch_as_replica(conn: RawConnection, topic: str, replica: int, epoch: int) -> int:
    cls = request_class(1, 11)
    module = sys.modules[cls.__module__]
    request = cls(
        replica_id=i32(replica),
        max_wait=datetime.timedelta(milliseconds=10),
        min_bytes=i32(1),
        max_bytes=i32(1 << 20),
        isolation_level=0,
        session_id=i32(0),
        session_epoch=i32(-1),
        topics=(
            module.FetchTopic(
                topic=topic,
                partitions=(
                    module.FetchPartition(
                        partition=i32(0),
                        current_leader_epoch=i32(epoch),
                        fetch_offset=i64(0),
                        log_start_offset=i64(-1),
                        partition_max_bytes=i32(1 << 20),
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )
    response = conn.call(request)
    return int(response.responses[0].partitions[0].error_code)


def test_a_client_fetching_as_a_replica_or_with_a_stale_epoch_is_refused(
    three: Cluster,
) -> None:
    topic = create_topic(three.bootstrap, partitions=1, replication_factor=2)
    p = producer(three.bootstrap, acks="all")
    p.produce(topic, value=b"x")
    assert p.flush(T) == 0
    leader = three.leader_of(topic, 0)
    with RawConnection(leader.bootstrap) as conn:
        # replica_id 99 is no broker, and the leader itself is no follower of itself.
        assert _fetch_as_replica(conn, topic, 99, -1) == ErrorCode.replica_not_available
        assert _fetch_as_replica(conn, topic, leader.broker_id, -1) == (
            ErrorCode.replica_not_available
        )
        # A consumer's fetch (-1) with an epoch from the future, then from the past.
        assert _fetch_as_replica(conn, topic, -1, 1000) == ErrorCode.unknown_leader_epoch
    leader.kill()
    try:
        new_leader = three.leader_of(topic, 0)  # epoch 1 now: a fetch at epoch 0 is fenced
        with RawConnection(new_leader.bootstrap) as conn:
            # The metadata that named it may be ahead of its own watch: until then it
            # answers NOT_LEADER_OR_FOLLOWER.
            deadline = time.monotonic() + T
            while (code := _fetch_as_replica(conn, topic, -1, 0)) == (
                ErrorCode.not_leader_or_follower
            ) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert code == ErrorCode.fenced_leader_epoch
            assert _fetch_as_replica(conn, topic, -1, -1) == ErrorCode.none
    finally:  # the module's later tests need all three brokers
        three.start_all()
        three.wait_formed()


def _serve(tmp: Path, overrides: dict[str, str]) -> subprocess.CompletedProcess[str]:
    cmd = broker_command(
        str(tmp / "data"), f"127.0.0.1:{free_port()}", {**TEST_DEFAULT_OVERRIDES, **overrides}
    )
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def test_a_duplicate_broker_id_is_refused_with_one_line(three: Cluster, tmp_path: Path) -> None:
    done = _serve(
        tmp_path, {"node.id": "2", "zookeeper.connect": three.overrides["zookeeper.connect"]}
    )
    assert done.returncode == 1
    assert "broker.id 2 is already registered" in done.stderr
    assert "Traceback" not in done.stderr
    assert three.metadata_brokers() == {1, 2, 3}, "the running broker 2 is untouched"


def test_an_unreachable_zookeeper_is_a_one_line_error(tmp_path: Path) -> None:
    done = _serve(
        tmp_path,
        {
            "node.id": "1",
            "zookeeper.connect": f"127.0.0.1:{free_port()}",
            "zookeeper.connection.timeout.ms": "1500",
        },
    )
    assert done.returncode == 1
    assert "cannot connect to ZooKeeper" in done.stderr
    assert "Traceback" not in done.stderr


def test_create_partitions_grows_a_topic_across_the_cluster(three: Cluster) -> None:
    admin = admin_client(three.bootstrap)
    topic = create_topic(three.bootstrap, partitions=2, replication_factor=2)
    admin.create_partitions([NewPartitions(topic, 5)], request_timeout=T)[topic].result(T)
    deadline = time.monotonic() + T
    while True:
        parts = admin.list_topics(topic, timeout=T).topics[topic].partitions
        if len(parts) == 5 and all(p.leader >= 0 for p in parts.values()):
            break
        assert time.monotonic() < deadline, parts
        time.sleep(0.1)
    assert all(len(p.replicas) == 2 for p in parts.values()), "the topic's factor is kept"
    p = producer(three.bootstrap, acks="all")
    for partition in range(5):
        p.produce(topic, value=b"x", partition=partition)
    assert p.flush(T) == 0
    for bad, code in (
        (NewPartitions(topic, 3), "INVALID_PARTITIONS"),
        (NewPartitions(topic, 6, [[1, 9]]), "INVALID_REPLICA_ASSIGNMENT"),
        (NewPartitions("no-such-topic", 2), "UNKNOWN_TOPIC_OR_PART"),
    ):
        with pytest.raises(KafkaException) as caught:
            admin.create_partitions([bad], request_timeout=T)[bad.topic].result(T)
        assert caught.value.args[0].name() == code, caught.value
    assert len(admin.list_topics(topic, timeout=T).topics[topic].partitions) == 5


def test_describe_configs_of_every_broker_and_of_a_topic(three: Cluster) -> None:
    from confluent_kafka.admin import ConfigResource, ResourceType

    admin = admin_client(three.bootstrap)
    for broker_id in three.ids:  # each broker answers for itself
        resource = ConfigResource(ResourceType.BROKER, str(broker_id))
        entries = admin.describe_configs([resource], request_timeout=T)[resource].result(T)
        assert entries["zookeeper.connect"].value == three.overrides["zookeeper.connect"]
        assert entries["min.insync.replicas"].value == "2", resource
    topic = create_topic(
        three.bootstrap, partitions=1, replication_factor=3, config={"retention.ms": "12345"}
    )
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([resource], request_timeout=T)[resource].result(T)
    assert entries["retention.ms"].value == "12345"
    assert entries["min.insync.replicas"].value == "2"
