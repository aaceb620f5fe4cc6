"""Partition reassignment on a real cluster: AlterPartitionReassignments and
ListPartitionReassignments on the wire, moving a partition to a broker added to a running
cluster, and cancelling one that cannot finish."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from pathlib import Path

from kio.index import load_payload_module
from kio.static.constants import EntityType

from onceflow.client.cluster import Cluster as WireCluster
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import build, request_type
from tests.cluster.reassign_helpers import (
    T,
    alter,
    controller_of,
    ongoing,
    replicas_and_isr,
    topic_with_a_spare,
    wait_reassigned,
)
from tests.helpers.clients import (
    consume_until,
    consumer,
    create_topic,
    produce_and_confirm,
    producer,
)
from tests.helpers.cluster import Cluster, cluster_factory

__all__ = ["cluster_factory"]


def _grow(bootstrap: str, topic: str, count: int) -> int:
    """CreatePartitions (v3) to the first broker of `bootstrap`; the topic's error code."""
    module = load_payload_module(ApiKey.CREATE_PARTITIONS, 3, EntityType.request)
    request = build(
        request_type(ApiKey.CREATE_PARTITIONS, 3),
        topics=(build(module.CreatePartitionsTopic, name=topic, count=count, assignments=None),),
        timeout=datetime.timedelta(seconds=10),
        validate_only=False,
    )
    with WireCluster(bootstrap, T) as wire:
        response = wire.bootstrap.call_at(ApiKey.CREATE_PARTITIONS, 3, request)
    return int(response.results[0].error_code)


def _replica_dir(cluster: Cluster, broker: int, topic: str, partition: int) -> Path:
    return Path(cluster.broker(broker).data_dir) / f"{topic}-{partition}"


def test_a_partition_moves_to_an_added_broker(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(3)
    topic = create_topic(cluster.bootstrap, partitions=2, replication_factor=2)
    p = producer(cluster.bootstrap, acks="all", **{"enable.idempotence": True})
    sent = produce_and_confirm(p, topic, ((0, None, b"v%d" % i, None) for i in range(500)))
    assert not sent.errors
    old, _ = replicas_and_isr(cluster, topic, 0)
    cluster.add_broker()
    cluster.wait_formed()
    target = (4, old[1])
    assert alter(cluster, {(topic, 0): target}) == {(topic, 0): ErrorCode.none}
    wait_reassigned(cluster, {(topic, 0): target})
    assert cluster.leader_of(topic, 0).broker_id in target
    # Every record is on the new replica, and the removed one's copy is gone.
    assert (_replica_dir(cluster, 4, topic, 0)).is_dir()
    deadline = time.monotonic() + T
    while _replica_dir(cluster, old[0], topic, 0).exists():
        assert time.monotonic() < deadline, "the removed replica's directory is still there"
        time.sleep(0.2)
    more = produce_and_confirm(p, topic, ((0, None, b"w%d" % i, None) for i in range(100)))
    assert not more.errors
    c = consumer(cluster.bootstrap, "reassigned", **{"auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got = consume_until(c, lambda m: len(m) >= 600, timeout=T)
    c.close()
    values = [m.value() for m in got]
    assert values == [b"v%d" % i for i in range(500)] + [b"w%d" % i for i in range(100)]
    cluster.finish()


def test_wire_errors_and_listing(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(3)
    topic = create_topic(cluster.bootstrap, partitions=1, replication_factor=2)
    replicas, _ = replicas_and_isr(cluster, topic, 0)
    assert alter(cluster, {(topic, 0): None}) == {(topic, 0): ErrorCode.no_reassignment_in_progress}
    assert alter(cluster, {(topic, 5): (1, 2)}) == {
        (topic, 5): ErrorCode.unknown_topic_or_partition
    }
    assert alter(cluster, {("nope", 0): (1, 2)}) == {
        ("nope", 0): ErrorCode.unknown_topic_or_partition
    }
    for bad in ((), (1, 1), (1, 9), (-1, 2)):
        assert alter(cluster, {(topic, 0): bad}) == {
            (topic, 0): ErrorCode.invalid_replica_assignment
        }, bad
    assert ongoing(cluster) == {}
    # The same replicas in another order: nothing to move, the order changes at once.
    flipped = (replicas[1], replicas[0])
    assert alter(cluster, {(topic, 0): flipped}) == {(topic, 0): ErrorCode.none}
    wait_reassigned(cluster, {(topic, 0): flipped})
    cluster.finish()


def test_cancel_goes_back_to_the_original_replicas(
    cluster_factory: Callable[..., Cluster],
) -> None:
    cluster = cluster_factory(3)
    topic, original, spare, others = topic_with_a_spare(cluster)
    p = producer(cluster.bootstrap, acks="all")
    assert not produce_and_confirm(p, topic, ((0, None, b"x", None) for _ in range(50))).errors
    cluster.broker(spare).pause()  # registered, but cannot catch up
    try:
        target = (spare, original[0])
        assert alter(cluster, {(topic, 0): target}, others) == {(topic, 0): ErrorCode.none}
        pending = ongoing(cluster, others)
        assert pending == {
            (topic, 0): ((spare, original[0], original[1]), (spare,), (original[1],))
        }
        # No partition is added to a topic while one of its partitions moves (Kafka's rule).
        # Asked of a live broker directly: librdkafka might wait on the paused one.
        assert _grow(others, topic, 2) == ErrorCode.reassignment_in_progress
        assert alter(cluster, {(topic, 0): None}, others) == {(topic, 0): ErrorCode.none}
    finally:
        cluster.broker(spare).resume()
    wait_reassigned(cluster, {(topic, 0): tuple(original)})
    deadline = time.monotonic() + T
    while _replica_dir(cluster, spare, topic, 0).exists():
        assert time.monotonic() < deadline, "the cancelled replica's directory is still there"
        time.sleep(0.2)
    cluster.finish()


def test_a_new_controller_resumes_a_reassignment(
    cluster_factory: Callable[..., Cluster],
) -> None:
    """The controller, an old replica (and often the leader) of a partition being moved,
    is killed while the new replica cannot copy yet: the next controller carries the move
    to its end from ZooKeeper alone, and nothing acknowledged is lost."""
    cluster = cluster_factory(3, overrides={"min.insync.replicas": "1"})
    topic, original, spare, others = topic_with_a_spare(cluster)
    controller = controller_of(cluster)
    assert controller in original and spare != controller
    p = producer(cluster.bootstrap, acks="all", **{"enable.idempotence": True})
    sent = produce_and_confirm(p, topic, ((0, None, b"a%d" % i, None) for i in range(300)))
    assert not sent.errors
    stays = next(b for b in original if b != controller)
    target = (spare, stays)
    cluster.broker(spare).pause()
    try:
        assert alter(cluster, {(topic, 0): target}, others) == {(topic, 0): ErrorCode.none}
        cluster.broker(controller).kill()
    finally:
        cluster.broker(spare).resume()
    wait_reassigned(cluster, {(topic, 0): target}, timeout=T)
    assert controller_of(cluster) != controller
    cluster.broker(controller).start()
    deadline = time.monotonic() + T
    while _replica_dir(cluster, controller, topic, 0).exists():
        assert time.monotonic() < deadline, "the moved-away replica is still on the old broker"
        time.sleep(0.2)
    c = consumer(cluster.bootstrap, "resumed", **{"auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got = consume_until(c, lambda m: len(m) >= 300, timeout=T)
    c.close()
    assert [m.value() for m in got] == [b"a%d" % i for i in range(300)]
    cluster.finish()
