"""A cluster's admin surface and its bad input: DescribeCluster, CreateTopics with a
replication factor or an explicit assignment, INVALID_REPLICATION_FACTOR, a replica fetch
from a client, leader-epoch fencing, a duplicate broker.id and an unreachable ZooKeeper."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import NewPartitions, NewTopic
from kio.schema.errors import ErrorCode

from tests.helpers.broker import TEST_DEFAULT_OVERRIDES, broker_command, free_port
from tests.helpers.clients import admin_client, create_topic, producer, topic_name
from tests.helpers.cluster import Cluster, cluster_fixture
from tests.helpers.wire import RawConnection, fetch_request

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
    request = fetch_request(topic, replica_id=replica, leader_epoch=epoch)
    return int(conn.call(request).responses[0].partitions[0].error_code)


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


def _alter_via(bootstrap: str, kind: int, name: str, key: str, value: str | None, op: int) -> int:
    """IncrementalAlterConfigs sent to one broker; its error code for the resource."""
    from kio.schema.incremental_alter_configs.v1 import request as inc
    from kio.static.primitive import i8

    config = inc.AlterableConfig(name=key, config_operation=i8(op), value=value)
    resource = inc.AlterConfigsResource(
        resource_type=i8(kind), resource_name=name, configs=(config,)
    )
    with RawConnection(bootstrap) as conn:
        response = conn.call(
            inc.IncrementalAlterConfigsRequest(resources=(resource,), validate_only=False)
        )
    return int(response.responses[0].error_code)


def _config_on(bootstrap: str, kind: int, name: str, key: str) -> tuple[str | None, int]:
    """(value, source) of one config as the broker at `bootstrap` describes it."""
    from kio.schema.describe_configs.v3 import request as desc
    from kio.static.primitive import i8

    resource = desc.DescribeConfigsResource(
        resource_type=i8(kind), resource_name=name, configuration_keys=(key,)
    )
    with RawConnection(bootstrap) as conn:
        response = conn.call(desc.DescribeConfigsRequest(resources=(resource,)))
    [entry] = response.results[0].configs
    return entry.value, int(entry.config_source)


def test_configs_altered_through_one_broker_apply_on_every_broker(three: Cluster) -> None:
    topic = create_topic(three.bootstrap, partitions=3, replication_factor=3)
    plain = create_topic(three.bootstrap, partitions=3, replication_factor=3)
    one, two, three_ = (three.broker(i) for i in (1, 2, 3))
    big = b"x" * 5000

    def big_records(name: str) -> list[str]:
        """A big record to each partition (their leaders are the three brokers): errors."""
        p = producer(three.bootstrap, acks="all", **{"linger.ms": 0})
        errors: list[str] = []

        def delivered(err: Any, _msg: object) -> None:
            errors.append(err.name() if err else "")

        for partition in range(3):
            p.produce(name, big, partition=partition, on_delivery=delivered)
            p.flush(T)
        return errors

    refused = ["MSG_SIZE_TOO_LARGE"] * 3
    assert _alter_via(one.bootstrap, 2, topic, "max.message.bytes", "2000", 0) == 0
    for broker in (one, two, three_):  # each answers from the overrides it applied
        deadline = time.monotonic() + T
        while _config_on(broker.bootstrap, 2, topic, "max.message.bytes") != ("2000", 1):
            assert time.monotonic() < deadline, broker
            time.sleep(0.1)
    assert big_records(topic) == refused
    assert big_records(plain) == [""] * 3

    # The cluster-wide broker default, set through broker 2, reaches brokers 1 and 3.
    assert _alter_via(two.bootstrap, 4, "", "message.max.bytes", "3000", 0) == 0
    try:
        for broker in (one, three_):
            deadline = time.monotonic() + T
            while _config_on(broker.bootstrap, 4, str(broker.broker_id), "message.max.bytes") != (
                "3000",
                3,  # DYNAMIC_DEFAULT_BROKER_CONFIG
            ):
                assert time.monotonic() < deadline, broker
                time.sleep(0.1)
        assert big_records(plain) == refused
    finally:
        assert _alter_via(two.bootstrap, 4, "", "message.max.bytes", None, 1) == 0
    assert _alter_via(three_.bootstrap, 2, "no-such-topic", "retention.ms", "1", 0) == 3
