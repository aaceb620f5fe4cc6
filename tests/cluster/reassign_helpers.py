"""Helpers of the reassignment tests: the wire calls and waits on a cluster."""

from __future__ import annotations

import time

from confluent_kafka.admin import NewTopic

from onceflow.cli.reassign_wire import alter_reassignments, list_reassignments
from onceflow.client.cluster import Cluster as WireCluster
from onceflow.protocol.api_versions import ApiKey
from tests.helpers.clients import admin_client, topic_name
from tests.helpers.cluster import Cluster

T = 60.0
Tp = tuple[str, int]


def alter(
    cluster: Cluster, targets: dict[Tp, tuple[int, ...] | None], bootstrap: str | None = None
) -> dict[Tp, int]:
    """AlterPartitionReassignments at the controller; each partition's error code."""
    with WireCluster(bootstrap or cluster.bootstrap, T) as wire:
        return {tp: code for tp, (code, _) in alter_reassignments(wire, targets).items()}


def ongoing(
    cluster: Cluster, bootstrap: str | None = None
) -> dict[Tp, tuple[tuple[int, ...], ...]]:
    with WireCluster(bootstrap or cluster.bootstrap, T) as wire:
        return {tp: state for tp, state in list_reassignments(wire).items()}


def controller_of(cluster: Cluster) -> int:
    with WireCluster(cluster.bootstrap, T) as wire:
        described = wire.bootstrap.call(
            ApiKey.DESCRIBE_CLUSTER, include_cluster_authorized_operations=False
        )
    return int(described.controller_id)


def topic_with_a_spare(cluster: Cluster) -> tuple[str, list[int], int, str]:
    """A topic of one partition on two brokers, the third (the spare) not the controller,
    so that pausing it leaves the cluster able to answer; and a bootstrap without it."""
    controller = controller_of(cluster)
    spare = next(b for b in cluster.ids if b != controller)
    original = [b for b in cluster.ids if b != spare][:2]
    name = topic_name()
    admin = admin_client(cluster.bootstrap)
    pinned = NewTopic(name, num_partitions=1, replica_assignment=[original])
    admin.create_topics([pinned])[name].result(timeout=T)
    deadline = time.monotonic() + T
    while name not in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"{name} was not created"
        time.sleep(0.1)
    others = ",".join(b.bootstrap for b in cluster.brokers if b.broker_id != spare)
    return name, original, spare, others


def replicas_and_isr(cluster: Cluster, topic: str, partition: int) -> tuple[list[int], list[int]]:
    md = admin_client(cluster.bootstrap).list_topics(topic, timeout=10)
    p = md.topics[topic].partitions[partition]
    return list(p.replicas), sorted(p.isrs)


def wait_reassigned(
    cluster: Cluster, targets: dict[Tp, tuple[int, ...]], timeout: float = T
) -> None:
    """Until no reassignment is in progress and each partition's replicas and ISR are its
    target (the ISR as a set)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            pending = ongoing(cluster)
            seen = {tp: replicas_and_isr(cluster, *tp) for tp in targets}
        except Exception as exc:  # a broker killed meanwhile: ask again
            pending, seen = {("?", -1): ((), (), ())}, {}
            last = repr(exc)
        else:
            last = f"in progress {pending}, now {seen}"
        done = not pending and all(seen[tp] == (list(t), sorted(t)) for tp, t in targets.items())
        if done:
            return
        assert time.monotonic() < deadline, f"reassignment not done: {last}"
        time.sleep(0.3)
