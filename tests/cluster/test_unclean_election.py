"""`unclean.leader.election.enable` on a real cluster: the leader of a RF=2 partition dies
while its only follower is out of the ISR, holding less than the leader acknowledged.

Off (the default), the partition stays without a leader rather than lose a record, and
the old leader's return brings every acknowledged record back. On, the follower takes
over at once and the records only the dead leader had are lost, as Kafka documents; the
old leader then truncates to the new leader's log, so the replicas agree again.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

from confluent_kafka import KafkaError

from onceflow.client.cluster import Cluster as WireCluster
from onceflow.client.errors import ClientError
from tests.cluster.test_replication import read_all, segment_bytes, wait_isr
from tests.helpers.clients import create_topic, producer
from tests.helpers.cluster import Cluster, ClusterBroker, cluster_factory

__all__ = ["cluster_factory"]

T = 30.0
OVERRIDES = {"min.insync.replicas": "1", "replica.lag.time.max.ms": "1000"}


def produce(cluster: Cluster, topic: str, value: bytes, acks: str = "all") -> None:
    p = producer(cluster.bootstrap, **{"acks": acks, "message.timeout.ms": 20_000})
    result: list[KafkaError | None] = []
    p.produce(topic, value=value, on_delivery=lambda e, m: result.append(e))
    assert p.flush(T) == 0 and result == [None], result


def leader_seen_by(broker: ClusterBroker, topic: str) -> int:
    with WireCluster(broker.bootstrap, timeout_s=5.0) as wire:
        return wire.metadata([topic]).leaders.get(topic, {}).get(0, -1)


def leader_dies_with_its_follower_behind(
    make: Callable[..., Cluster], unclean: bool
) -> tuple[Cluster, str, ClusterBroker, ClusterBroker]:
    """A RF=2 partition; its follower is paused, leaves the ISR, the leader alone
    acknowledges b"during", then dies (kill -9) and the follower resumes."""
    cluster = make(
        3, overrides={**OVERRIDES, "unclean.leader.election.enable": str(unclean).lower()}
    )
    topic = create_topic(cluster.bootstrap, partitions=1, replication_factor=2)
    leader = cluster.leader_of(topic, 0)
    produce(cluster, topic, b"before")
    wait_isr(cluster, topic, 0, _replicas(cluster, topic))
    follower = cluster.broker(next(r for r in _replicas(cluster, topic) if r != leader.broker_id))
    # Paused for less than its ZooKeeper session: it stays registered, so electable.
    follower.pause()
    try:
        # The follower's parked fetch is answered with this one (the answer waits in its
        # socket), so it has no fetch at the leader when b"during" comes.
        produce(cluster, topic, b"filler", acks="1")
        # acks=all waits until the leader drops the silent follower from the ISR
        # (replica.lag.time.max.ms), then min.insync.replicas=1 lets it through.
        produce(cluster, topic, b"during")
        leader.kill()
    finally:
        follower.resume()
    return cluster, topic, leader, follower


def wait_replicas_agree(cluster: Cluster, topic: str) -> None:
    """Until both replicas' segment files hold the same bytes."""
    deadline = time.monotonic() + T
    while len({segment_bytes(cluster, r, topic, 0) for r in _replicas(cluster, topic)}) > 1:
        assert time.monotonic() < deadline, "the replicas never agreed"
        time.sleep(0.2)


def _replicas(cluster: Cluster, topic: str) -> list[int]:
    from tests.helpers.clients import admin_client

    md = admin_client(cluster.bootstrap).list_topics(topic, timeout=10)
    return sorted(md.topics[topic].partitions[0].replicas)


def test_without_unclean_election_the_partition_waits_for_its_in_sync_replica(
    cluster_factory: Callable[..., Cluster],
) -> None:
    cluster, topic, leader, follower = leader_dies_with_its_follower_behind(
        cluster_factory, unclean=False
    )
    # Past the dead leader's session: the controller has seen it go and elects no one.
    cluster.wait_unregistered([leader.broker_id])
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        with contextlib.suppress(ClientError):  # never elected, whatever else it answers
            assert leader_seen_by(follower, topic) != follower.broker_id
        time.sleep(0.2)
    leader.start()
    wait_isr(cluster, topic, 0, _replicas(cluster, topic))
    values = [m.value() for m in read_all(cluster.bootstrap, topic, 1, 3)]
    assert values == [b"before", b"filler", b"during"], "an acknowledged record was lost"
    wait_replicas_agree(cluster, topic)


def test_with_unclean_election_the_follower_leads_and_the_unreplicated_tail_is_lost(
    cluster_factory: Callable[..., Cluster],
) -> None:
    cluster, topic, leader, follower = leader_dies_with_its_follower_behind(
        cluster_factory, unclean=True
    )
    assert cluster.leader_of(topic, 0) is follower  # out of the ISR, elected anyway
    produce(cluster, topic, b"after")
    leader.start()  # it truncates b"during" and copies b"after"
    wait_isr(cluster, topic, 0, _replicas(cluster, topic))
    values = [m.value() for m in read_all(cluster.bootstrap, topic, 1, 2)]
    # b"filler" survives if the follower's parked fetch took it (the usual case).
    assert [v for v in values if v != b"filler"] == [b"before", b"after"], values
    wait_replicas_agree(cluster, topic)
