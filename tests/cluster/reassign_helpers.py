"""Helpers of the reassignment tests: the wire calls and waits on a cluster."""

from __future__ import annotations

import time

from onceflow.cli.reassign_wire import alter_reassignments, list_reassignments
from onceflow.client.cluster import Cluster as WireCluster
from tests.helpers.clients import admin_client
from tests.helpers.cluster import Cluster

T = 60.0
Tp = tuple[str, int]


def alter(cluster: Cluster, targets: dict[Tp, tuple[int, ...] | None]) -> dict[Tp, int]:
    """AlterPartitionReassignments at the controller; each partition's error code."""
    with WireCluster(cluster.bootstrap, T) as wire:
        return {tp: code for tp, (code, _) in alter_reassignments(wire, targets).items()}


def ongoing(cluster: Cluster) -> dict[Tp, tuple[tuple[int, ...], ...]]:
    with WireCluster(cluster.bootstrap, T) as wire:
        return {tp: state for tp, state in list_reassignments(wire).items()}


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
