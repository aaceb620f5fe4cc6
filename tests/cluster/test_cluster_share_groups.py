"""Share groups on a 3-broker cluster. The broker leading the share-partition's
`__share_group_state` partition (its share coordinator) is killed with kill -9 while a
share consumer works. The share-partition's leader reaches the state through Kafka's
persister requests (Read/WriteShareGroupState); after the kill the state partition's new
leader serves it, so no acknowledged record is delivered again and every record is
delivered. And the group's coordinator is killed: its membership, kept in
`__consumer_offsets`, moves with the partition's leadership."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from confluent_kafka import AcknowledgeType, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from onceflow.client.cluster import Cluster as WireCluster
from onceflow.coordinator.group.offsets import partition_for
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from tests.helpers.cluster import Cluster, cluster_fixture
from tests.helpers.share import SHORT_LOCKS, set_group_configs, share_consumer
from tests.helpers.wire import RawConnection
from tests.integration.test_share_membership_restart import NOT_READY
from tests.integration.test_share_wire import _heartbeat

STATE_PARTITIONS = 3
cluster = cluster_fixture(
    3,
    overrides={
        **SHORT_LOCKS,
        "min.insync.replicas": "2",
        "offsets.topic.num.partitions": "3",
        "transaction.state.log.num.partitions": "3",
        "share.coordinator.state.topic.num.partitions": str(STATE_PARTITIONS),
    },
)


def _topic_id(bootstrap: str, topic: str) -> str:
    with WireCluster(bootstrap) as wire:
        answer = wire.bootstrap.call(
            ApiKey.METADATA,
            topics=None,
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
    return next(str(t.topic_id) for t in answer.topics if t.name == topic)


def test_killing_the_share_coordinator_loses_no_acknowledgement(cluster: Cluster) -> None:
    topic, group, n = "work", "workers", 120
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
    cluster.leader_of(topic, 0)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(n):
        p.produce(topic, str(i).encode(), partition=0)
    assert p.flush(30) == 0
    # Group configs live with the group's state partition, wherever the admin call lands.
    set_group_configs(cluster.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    c = share_consumer(
        cluster.bootstrap, group, topic, **{"share.acknowledgement.mode": "explicit"}
    )
    acked_before: set[int] = set()
    while len(acked_before) < n // 2:
        for m in c.poll(0.5):
            if m.error() is None:
                c.acknowledge(m, AcknowledgeType.ACCEPT)
                acked_before.add(int(m.value()))
        c.commit_sync()
    state_partition = partition_for(
        f"{group}:{_topic_id(cluster.bootstrap, topic)}:0", STATE_PARTITIONS
    )
    coordinator = cluster.leader_of("__share_group_state", state_partition)
    coordinator.kill()
    delivered_again: list[int] = []
    acked_after: set[int] = set()
    deadline = time.monotonic() + 90
    while len(acked_before | acked_after) < n:
        assert time.monotonic() < deadline, f"{len(acked_before | acked_after)} of {n} acked"
        for m in c.poll(0.5):
            if m.error() is None:
                value = int(m.value())
                if value in acked_before:
                    delivered_again.append(value)
                c.acknowledge(m, AcknowledgeType.ACCEPT)
                acked_after.add(value)
        # While the coordinator moves a commit may fail: the records come back after their lock.
        with contextlib.suppress(KafkaException):
            c.commit_sync(10)
    c.close()
    coordinator.start()
    assert not delivered_again, f"acknowledged records delivered again: {delivered_again[:10]}"


def test_a_coordinator_move_keeps_the_share_group(cluster: Cluster) -> None:
    """The group coordinator's broker is killed: the new leader of the group's
    `__consumer_offsets` partition replays its membership, so its members carry on at
    their epochs instead of joining again."""
    topic, group = "queue", "movers"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
    offsets_partition = partition_for(group, 3)
    with contextlib.suppress(KafkaException):  # FindCoordinator creates __consumer_offsets
        admin.describe_consumer_groups([group])[group].result(30)

    def beat(member: str, epoch: int, topics: tuple[str, ...] | None) -> Any:
        deadline = time.monotonic() + 30
        while True:
            coordinator = cluster.leader_of("__consumer_offsets", offsets_partition)
            with RawConnection(coordinator.bootstrap) as conn:
                answer = _heartbeat(conn, group, member, epoch, topics)
            if answer.error_code not in NOT_READY or time.monotonic() > deadline:
                return answer
            time.sleep(0.2)

    beat("m1", 0, (topic,))
    epoch = beat("m2", 0, (topic,)).member_epoch
    assert beat("m1", epoch - 1, None).member_epoch == epoch
    before = cluster.leader_of("__consumer_offsets", offsets_partition)
    before.kill()
    try:
        after = cluster.leader_of("__consumer_offsets", offsets_partition)
        assert after.broker_id != before.broker_id
        back = beat("m1", epoch, None)
        assert (back.error_code, back.member_epoch) == (ErrorCode.none, epoch)
        assert beat("m2", epoch - 1, None).error_code == ErrorCode.fenced_member_epoch
        assert beat("m3", 0, (topic,)).member_epoch == epoch + 1
    finally:
        before.start()
