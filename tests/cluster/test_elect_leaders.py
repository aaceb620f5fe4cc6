"""ElectLeaders on a 3-broker cluster through confluent-kafka's AdminClient.

Preferred: with the controller's own rebalance off, a partition whose preferred replica was
killed and restarted stays led by another broker until asked; the election gives it back
(and a second one is not needed). While the preferred replica is down, the election answers
PREFERRED_LEADER_NOT_AVAILABLE. Unclean: a partition whose only in-sync replica died stays
leaderless (unclean.leader.election.enable=false) until an unclean election gives it to the
live replica outside its ISR.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError

from onceflow.cli.leader_election import elect_leaders
from onceflow.cli.main import main
from onceflow.client.cluster import Cluster as WireCluster
from tests.cluster.test_replication import wait_isr
from tests.cluster.test_unclean_election import leader_dies_with_its_follower_behind
from tests.helpers.clients import admin_client, create_topic
from tests.helpers.cluster import Cluster, cluster_factory

__all__ = ["cluster_factory"]

T = 30.0
PREFERRED, UNCLEAN = 0, 1


def elect(cluster: Cluster, kind: int, topic: str) -> int:
    """The partition's error code (NONE: elected), through Onceflow's client (confluent-kafka
    2.16's elect_leaders fails in its C binding)."""
    with WireCluster(cluster.bootstrap, T) as wire:
        results = elect_leaders(wire, kind, [(topic, 0)], int(T * 1000))
    return results[(topic, 0)][0]


def wait_leaderless(cluster: Cluster, topic: str, timeout: float = 30.0) -> None:
    """Until every running broker's Metadata shows partition 0 of `topic` without a leader.
    Each broker learns it from ZooKeeper on its own, and ElectLeaders is decided on the
    controller's view, which may be the last to change."""
    deadline = time.monotonic() + timeout
    while True:
        leaders = []
        for b in cluster.running():
            with WireCluster(b.bootstrap, timeout_s=5.0) as wire:
                leaders.append(wire.metadata([topic]).leaders.get(topic, {}).get(0, -1))
        if all(leader == -1 for leader in leaders):
            return
        assert time.monotonic() < deadline, f"{topic}-0 still has a leader: {leaders}"
        time.sleep(0.1)


def replicas(cluster: Cluster, topic: str) -> list[int]:
    md = admin_client(cluster.bootstrap).list_topics(topic, timeout=T)
    return list(md.topics[topic].partitions[0].replicas)


def test_a_preferred_election_gives_leadership_back(
    cluster_factory: Callable[..., Cluster], capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = cluster_factory(3, overrides={"auto.leader.rebalance.enable": "false"})
    topic = create_topic(cluster.bootstrap, replication_factor=3)
    preferred = cluster.broker(replicas(cluster, topic)[0])
    assert cluster.leader_of(topic, 0) is preferred
    preferred.kill()
    cluster.wait_unregistered([preferred.broker_id])
    assert cluster.leader_of(topic, 0) is not preferred
    assert elect(cluster, PREFERRED, topic) == KafkaError.PREFERRED_LEADER_NOT_AVAILABLE
    preferred.start()
    wait_isr(cluster, topic, 0, [1, 2, 3])
    assert cluster.leader_of(topic, 0) is not preferred  # nothing gives it back by itself
    assert elect(cluster, PREFERRED, topic) == KafkaError.NO_ERROR
    assert cluster.leader_of(topic, 0) is preferred
    assert elect(cluster, PREFERRED, topic) == KafkaError.ELECTION_NOT_NEEDED
    # The command, as kafka-leader-election.sh: every partition, none needing an election.
    argv = ["leader-election", "--bootstrap-server", cluster.bootstrap]
    assert main([*argv, "--election-type", "preferred", "--all-topic-partitions"]) == 0
    assert capsys.readouterr().out == ""
    assert main([*argv, "--election-type", "PREFERRED", "--topic", topic, "--partition", "0"]) == 0
    assert capsys.readouterr().out == f"Valid replica already elected for partitions {topic}-0\n"


def test_an_unclean_election_elects_a_replica_outside_the_isr(
    cluster_factory: Callable[..., Cluster],
) -> None:
    cluster, topic, leader, follower = leader_dies_with_its_follower_behind(
        cluster_factory, unclean=False
    )
    cluster.wait_unregistered([leader.broker_id])
    wait_leaderless(cluster, topic)  # the controller has seen the death, not only ZooKeeper
    # The only ISR member is dead: a preferred election cannot help.
    assert elect(cluster, PREFERRED, topic) == KafkaError.PREFERRED_LEADER_NOT_AVAILABLE
    assert elect(cluster, UNCLEAN, topic) == KafkaError.NO_ERROR
    assert cluster.leader_of(topic, 0) is follower
    assert elect(cluster, UNCLEAN, topic) == KafkaError.ELECTION_NOT_NEEDED
    leader.start()
