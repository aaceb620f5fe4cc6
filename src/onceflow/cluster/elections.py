"""What the controller must change: pure functions from a MetadataCache to state changes.

Kafka's leader election rules, ZooKeeper era:
- a new partition is led by the first of its replicas that is alive, all alive replicas in
  its ISR (it waits while none is alive);
- a partition whose leader is dead (or shutting down) is led by the first replica, in
  assignment order, that is alive and in the ISR; with none, it goes offline (no leader,
  the ISR kept so that its last members may lead when they return) unless
  unclean.leader.election.enable lets any live replica lead;
- dead and shutting-down followers leave the ISR (never the last member), so acks=all
  writes do not wait replica.lag.time.max.ms for a replica known to be gone;
- every change of leader or ISR bumps the leader epoch;
- preferred-leader rebalancing hands leadership back to the first replica once it is in
  sync, for brokers whose share of such partitions passed the imbalance threshold.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from enum import IntEnum

from onceflow.cluster.metadata import MetadataCache
from onceflow.cluster.znodes import NO_LEADER, PartitionState
from onceflow.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class StateChange:
    topic: str
    partition: int
    state: PartitionState
    expected_version: int  # -1: the partition has no state yet (create it)
    reason: str


def plan_elections(cache: MetadataCache, controller_epoch: int, unclean: bool) -> list[StateChange]:
    alive = set(cache.brokers)
    usable = alive - cache.shutting_down
    changes: list[StateChange] = []
    for topic, partition, replicas in sorted(cache.partitions()):
        current = cache.states.get((topic, partition))
        if current is None:
            leaders = [r for r in replicas if r in usable]
            if leaders:
                isr = tuple(r for r in replicas if r in alive)
                state = PartitionState(leaders[0], 0, isr, controller_epoch)
                changes.append(StateChange(topic, partition, state, -1, "new partition"))
            continue
        old = current.state
        in_sync = tuple(r for r in old.isr if r in usable)
        if old.leader in usable:
            if in_sync != old.isr:
                state = PartitionState(old.leader, old.leader_epoch + 1, in_sync, controller_epoch)
                changes.append(
                    StateChange(topic, partition, state, current.version, "replica left the ISR")
                )
            continue
        candidates = [r for r in replicas if r in in_sync]
        if candidates:
            leader, isr, reason = candidates[0], in_sync, "leader gone"
        elif unclean and any(r in usable for r in replicas):
            leader = next(r for r in replicas if r in usable)
            isr, reason = (leader,), "unclean election"
        elif old.leader in alive:
            continue  # shutting down with no one to take over: it keeps leading meanwhile
        elif old.leader == NO_LEADER:
            continue  # offline already; waits for an ISR member to return
        else:
            leader, isr, reason = NO_LEADER, old.isr, "no ISR member alive: offline"
        state = PartitionState(leader, old.leader_epoch + 1, isr, controller_epoch)
        changes.append(StateChange(topic, partition, state, current.version, reason))
    return changes


def plan_preferred_leaders(
    cache: MetadataCache, controller_epoch: int, imbalance_percent: int
) -> list[StateChange]:
    usable = set(cache.brokers) - cache.shutting_down
    preferred_of: Counter[int] = Counter()
    movable: dict[int, list[StateChange]] = {}
    for topic, partition, replicas in sorted(cache.partitions()):
        current = cache.states.get((topic, partition))
        if not replicas or current is None:
            continue
        preferred = replicas[0]
        preferred_of[preferred] += 1
        old = current.state
        if old.leader != preferred and preferred in usable and preferred in old.isr:
            state = PartitionState(preferred, old.leader_epoch + 1, old.isr, controller_epoch)
            movable.setdefault(preferred, []).append(
                StateChange(topic, partition, state, current.version, "preferred leader")
            )
    changes: list[StateChange] = []
    for broker, moves in sorted(movable.items()):
        if len(moves) * 100 > imbalance_percent * preferred_of[broker]:
            changes.extend(moves)
    return changes


class ElectionType(IntEnum):
    """ElectLeaders' election types (Kafka's codes)."""

    PREFERRED = 0
    UNCLEAN = 1


@dataclass(frozen=True, slots=True)
class RequestedElection:
    """One partition's answer to ElectLeaders: NONE with the change to write (its new
    leader), or Kafka's error for it."""

    error: ErrorCode
    message: str | None = None
    change: StateChange | None = None


def plan_requested_election(
    cache: MetadataCache,
    controller_epoch: int,
    election_type: ElectionType,
    topic: str,
    partition: int,
) -> RequestedElection:
    """What an ElectLeaders request does to one partition, as Kafka's ZooKeeper-era
    controller decides it.

    | type      | the partition now                         | answer                          |
    |-----------|-------------------------------------------|---------------------------------|
    | any       | unknown                                   | UNKNOWN_TOPIC_OR_PARTITION      |
    | PREFERRED | led by its first replica                  | ELECTION_NOT_NEEDED             |
    | PREFERRED | first replica alive and in the ISR        | it leads (ISR kept)             |
    | PREFERRED | otherwise                                 | PREFERRED_LEADER_NOT_AVAILABLE  |
    | UNCLEAN   | led by a live broker                      | ELECTION_NOT_NEEDED             |
    | UNCLEAN   | a live ISR member                         | the first of them leads         |
    | UNCLEAN   | a live replica outside the ISR            | the first of them leads, alone  |
    | UNCLEAN   | no live replica                           | ELIGIBLE_LEADERS_NOT_AVAILABLE  |
    """
    replicas = cache.replicas_of(topic, partition)
    if not replicas:
        return RequestedElection(
            ErrorCode.unknown_topic_or_partition, "The partition does not exist."
        )
    usable = set(cache.brokers) - cache.shutting_down
    current = cache.states.get((topic, partition))
    name = f"{topic}-{partition}"
    if election_type is ElectionType.PREFERRED:
        preferred = replicas[0]
        if current is not None and current.state.leader == preferred:
            return RequestedElection(ErrorCode.election_not_needed)
        if current is None or preferred not in usable or preferred not in current.state.isr:
            return RequestedElection(
                ErrorCode.preferred_leader_not_available,
                f"Failed to elect leader for partition {name} under strategy "
                "PreferredReplicaPartitionLeaderElectionStrategy",
            )
        leader, isr, reason = preferred, current.state.isr, "preferred election requested"
    else:
        if current is not None and current.state.leader in usable:
            return RequestedElection(ErrorCode.election_not_needed)
        in_sync = [] if current is None else [r for r in replicas if r in current.state.isr]
        clean = [r for r in in_sync if r in usable]
        live = [r for r in replicas if r in usable]
        if current is None or not live:
            return RequestedElection(
                ErrorCode.eligible_leaders_not_available,
                f"Failed to elect leader for partition {name} under strategy "
                "UncleanLeaderElectionStrategy",
            )
        if clean:
            leader, isr = clean[0], tuple(r for r in current.state.isr if r in usable)
            reason = "leader gone (election requested)"
        else:
            leader, isr, reason = live[0], (live[0],), "unclean election requested"
    old = current.state
    state = PartitionState(leader, old.leader_epoch + 1, isr, controller_epoch)
    return RequestedElection(
        ErrorCode.none, change=StateChange(topic, partition, state, current.version, reason)
    )
