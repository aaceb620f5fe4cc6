"""Partition reassignment (KIP-455) as Kafka's ZooKeeper-era controller carries it out: pure
functions from an assignment or a MetadataCache to what must be written.

A reassignment lives in the topic's assignment znode (znodes.TopicAssignment): the full
replica set RS = (target ++ original).distinct, the replicas being added (RS - original)
and removed (RS - target). Any broker starts or cancels one by compare-and-set on that
znode (`alter`); the controller then drives it (`plan_reassignments`):

| the partition now                                 | the controller writes                     |
|---------------------------------------------------|-------------------------------------------|
| being reassigned, not yet seen by this controller | the leader epoch bumped (Kafka's phase A) |
| being reassigned, a target replica not in the ISR | nothing: the new replicas are catching up |
| being reassigned, every target replica in the ISR | in one transaction: a leader in the       |
|                                                   | target (the current one if it is there),  |
|                                                   | the ISR cut to the target, the epoch      |
|                                                   | bumped; RS = target, nothing adding or    |
|                                                   | removing (phase B)                        |
| not reassigned, leader or ISR outside its replicas| leader and ISR back within the replicas,  |
| (a cancelled reassignment)                        | the epoch bumped                          |

The new replicas start and catch up by themselves: every broker's ReplicaManager hosts the
partitions whose RS names it, and the leader lets them into the ISR once caught up. The
removed replicas' brokers delete their copies when RS no longer names them. Everything the
controller needs is in ZooKeeper, so a new controller resumes where the old one stopped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from onceflow.cluster.elections import StateChange
from onceflow.cluster.metadata import MetadataCache, TopicMetadata
from onceflow.cluster.znodes import NO_LEADER, PartitionState, TopicAssignment
from onceflow.errors import ErrorCode

#: A partition's answer to AlterPartitionReassignments: NONE or Kafka's error, a message.
AlterResult = tuple[ErrorCode, str | None]
#: A partition being reassigned, as ListPartitionReassignments shows it: replicas (RS),
#: adding and removing.
Ongoing = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]


def origin_of(replicas: tuple[int, ...], adding: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(r for r in replicas if r not in adding)


def target_of(replicas: tuple[int, ...], removing: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(r for r in replicas if r not in removing)


def reassign_to(
    origin: tuple[int, ...], target: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """Kafka's ReplicaAssignment.reassignTo: the full set, adding and removing."""
    full = tuple(dict.fromkeys(target + origin))
    return (
        full,
        tuple(r for r in full if r not in origin),
        tuple(r for r in full if r not in target),
    )


def check_target(
    target: tuple[int, ...], adding: Iterable[int], alive: Iterable[int]
) -> AlterResult | None:
    """Kafka's validateReplicas: INVALID_REPLICA_ASSIGNMENT with its words, or None."""
    if not target:
        return (
            ErrorCode.invalid_replica_assignment,
            "Empty replica list specified in partition reassignment.",
        )
    if len(set(target)) != len(target):
        return (
            ErrorCode.invalid_replica_assignment,
            f"Duplicate replica ids in partition reassignment replica list: {list(target)}",
        )
    if any(r < 0 for r in target):
        return (
            ErrorCode.invalid_replica_assignment,
            f"Invalid broker id in replica list: {list(target)}",
        )
    live = set(alive)
    added = list(adding)
    if not set(added) <= live:
        return (
            ErrorCode.invalid_replica_assignment,
            f"Replica assignment has brokers that are not alive. Replica list: {added}, "
            f"live broker list: {sorted(live)}",
        )
    return None


def alter(
    current: TopicAssignment,
    requested: Mapping[int, tuple[int, ...] | None],
    alive: Iterable[int],
    allow_rf_change: bool = True,
) -> tuple[TopicAssignment, dict[int, AlterResult]]:
    """AlterPartitionReassignments on one topic's assignment: each partition's answer and
    the assignment to write. A target starts (or replaces) a reassignment; None cancels
    one, back to the original replicas (NO_REASSIGNMENT_IN_PROGRESS if there is none)."""
    live = list(alive)
    partitions = dict(current.partitions)
    adding, removing = dict(current.adding), dict(current.removing)
    results: dict[int, AlterResult] = {}
    for partition, target in sorted(requested.items()):
        replicas = partitions.get(partition)
        if replicas is None:
            results[partition] = (
                ErrorCode.unknown_topic_or_partition,
                "The partition does not exist.",
            )
            continue
        origin = origin_of(replicas, adding.get(partition, ()))
        ongoing = bool(adding.get(partition) or removing.get(partition))
        if target is None and not ongoing:
            results[partition] = (ErrorCode.no_reassignment_in_progress, None)
            continue
        wanted = origin if target is None else tuple(target)
        full, added, removed = reassign_to(origin, wanted)
        refusal = check_target(wanted, added, live)
        if refusal is None and not allow_rf_change and len(wanted) != len(origin):
            refusal = (
                ErrorCode.invalid_replication_factor,
                f"The replication factor is changed from {len(origin)} to {len(wanted)} but "
                "allowReplicationFactorChange is false",
            )
        if refusal is not None:
            results[partition] = refusal
            continue
        partitions[partition] = full
        adding[partition], removing[partition] = added, removed
        results[partition] = (ErrorCode.none, None)
    updated = dataclasses.replace(
        current,
        partitions=partitions,
        adding={p: r for p, r in adding.items() if r},
        removing={p: r for p, r in removing.items() if r},
    )
    return updated, results


def ongoing(
    cache: MetadataCache, wanted: Iterable[tuple[str, int]] | None = None
) -> dict[tuple[str, int], Ongoing]:
    """ListPartitionReassignments: the partitions being reassigned (of `wanted`, or all);
    a partition not being reassigned, or unknown, is left out, as Kafka does."""
    keys = (
        [(t, p) for t, meta in cache.topics.items() for p in meta.assignment]
        if wanted is None
        else list(wanted)
    )
    found: dict[tuple[str, int], Ongoing] = {}
    for topic, partition in keys:
        meta = cache.topics.get(topic)
        if meta is None:
            continue
        adding, removing = meta.adding.get(partition, ()), meta.removing.get(partition, ())
        if adding or removing:
            found[(topic, partition)] = (meta.assignment[partition], adding, removing)
    return found


@dataclass(frozen=True, slots=True)
class Completion:
    """Reassignments of one topic to complete in one transaction: the partitions' new
    states (partition, state, expected version) and the assignment written with them."""

    topic: str
    states: tuple[tuple[int, PartitionState, int], ...]
    assignment: TopicAssignment
    assignment_version: int


@dataclass(frozen=True, slots=True)
class ReassignmentPlan:
    bumps: list[StateChange]  # phase A and cancellations' clean-ups: state writes alone
    started: list[tuple[str, int, tuple[int, ...]]]  # what the bumps start (their keys)
    completions: list[Completion]


def plan_reassignments(
    cache: MetadataCache,
    controller_epoch: int,
    started: set[tuple[str, int, tuple[int, ...]]],
) -> ReassignmentPlan:
    """What the controller writes for reassignments now (see the table above). `started`
    holds the (topic, partition, replicas) whose phase A this controller wrote already."""
    usable = set(cache.brokers) - cache.shutting_down
    bumps: list[StateChange] = []
    begun: list[tuple[str, int, tuple[int, ...]]] = []
    completions: list[Completion] = []
    for topic, meta in sorted(cache.topics.items()):
        finished: list[tuple[int, PartitionState, int]] = []
        for partition, replicas in sorted(meta.assignment.items()):
            current = cache.states.get((topic, partition))
            if current is None:
                continue
            old = current.state
            adding, removing = meta.adding.get(partition, ()), meta.removing.get(partition, ())
            if adding or removing:
                target = target_of(replicas, removing)
                if set(target) <= set(old.isr):
                    state = _within(old, target, usable, controller_epoch)
                    if state is not None:
                        finished.append((partition, state, current.version))
                elif (topic, partition, replicas) not in started and old.leader != NO_LEADER:
                    state = dataclasses.replace(
                        old, leader_epoch=old.leader_epoch + 1, controller_epoch=controller_epoch
                    )
                    bumps.append(
                        StateChange(topic, partition, state, current.version, "reassigning")
                    )
                    begun.append((topic, partition, replicas))
            elif old.leader != NO_LEADER and (
                old.leader not in replicas or not set(old.isr) <= set(replicas)
            ):
                state = _within(old, replicas, usable, controller_epoch)
                if state is not None:
                    bumps.append(
                        StateChange(
                            topic, partition, state, current.version, "replicas left the set"
                        )
                    )
        if finished:
            completions.append(_completion(meta, finished))
    return ReassignmentPlan(bumps, begun, completions)


def _within(
    old: PartitionState, replicas: tuple[int, ...], usable: set[int], controller_epoch: int
) -> PartitionState | None:
    """The state led and kept in sync within `replicas`: the leader stays if it is one of
    them and usable, else the first of them in the ISR and usable leads (Kafka's
    reassignment election); None when none can."""
    isr = tuple(r for r in old.isr if r in replicas)
    if old.leader in replicas and old.leader in usable:
        leader = old.leader
    else:
        candidates = [r for r in replicas if r in isr and r in usable]
        if not candidates:
            return None
        leader = candidates[0]
    return PartitionState(leader, old.leader_epoch + 1, isr, controller_epoch)


def _completion(meta: TopicMetadata, finished: list[tuple[int, PartitionState, int]]) -> Completion:
    partitions = dict(meta.assignment)
    adding, removing = dict(meta.adding), dict(meta.removing)
    for partition, _, _ in finished:
        partitions[partition] = target_of(partitions[partition], removing.get(partition, ()))
        adding.pop(partition, None)
        removing.pop(partition, None)
    assignment = TopicAssignment(meta.topic_id, partitions, adding, removing)
    return Completion(meta.name, tuple(finished), assignment, meta.assignment_version)
