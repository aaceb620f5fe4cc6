"""Replica assignment and the controller's election rules, as pure functions."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from onceflow.cluster.assignment import assign_replicas
from onceflow.cluster.elections import (
    ElectionType,
    plan_elections,
    plan_preferred_leaders,
    plan_requested_election,
)
from onceflow.cluster.metadata import MetadataCache, TopicMetadata, VersionedState
from onceflow.cluster.znodes import NO_LEADER, BrokerRegistration, PartitionState
from onceflow.errors import ErrorCode, KafkaError


def test_round_robin_spreads_leaders_and_followers_evenly() -> None:
    assignment = assign_replicas(6, 3, [3, 1, 2], start=0)
    assert assignment == {
        0: [1, 2, 3],
        1: [2, 3, 1],
        2: [3, 1, 2],
        3: [1, 3, 2],
        4: [2, 1, 3],
        5: [3, 2, 1],
    }
    big = assign_replicas(60, 3, [1, 2, 3, 4, 5], rng=random.Random(7))
    leaders = Counter(r[0] for r in big.values())
    assert set(leaders.values()) == {12}
    assert all(len(set(r)) == 3 for r in big.values())


def test_new_partitions_continue_the_round_robin() -> None:
    more = assign_replicas(2, 2, [1, 2, 3], first_partition=4, start=0)
    assert sorted(more) == [4, 5]


@pytest.mark.parametrize(("rf", "brokers"), [(4, [1, 2, 3]), (0, [1])])
def test_bad_replication_factor(rf: int, brokers: list[int]) -> None:
    with pytest.raises(KafkaError) as caught:
        assign_replicas(1, rf, brokers)
    assert caught.value.code is ErrorCode.invalid_replication_factor


def cache(alive: set[int], states: dict[int, PartitionState | None], replicas=(1, 2, 3)):
    c = MetadataCache()
    c.brokers = {b: BrokerRegistration(b, "h", 9000 + b, 0) for b in alive}
    c.topics["t"] = TopicMetadata("t", "id", {p: tuple(replicas) for p in states}, {})
    for p, s in states.items():
        if s is not None:
            c.states[("t", p)] = VersionedState(s, 4)
    return c


def test_a_new_partition_is_led_by_its_first_live_replica() -> None:
    [change] = plan_elections(cache({2, 3}, {0: None}), 7, unclean=False)
    assert change.state == PartitionState(2, 0, (2, 3), 7)
    assert change.expected_version == -1
    assert plan_elections(cache(set(), {0: None}), 7, unclean=False) == []


def test_a_dead_leader_is_replaced_from_the_isr_in_assignment_order() -> None:
    c = cache({2, 3}, {0: PartitionState(1, 5, (1, 3, 2), 1)})
    [change] = plan_elections(c, 2, unclean=False)
    assert change.state == PartitionState(2, 6, (3, 2), 2)
    assert change.expected_version == 4


def test_a_replica_outside_the_isr_never_leads_unless_unclean() -> None:
    c = cache({2, 3}, {0: PartitionState(1, 5, (1,), 1)})
    [offline] = plan_elections(c, 2, unclean=False)
    assert offline.state == PartitionState(NO_LEADER, 6, (1,), 2)
    c.states[("t", 0)] = VersionedState(offline.state, 5)
    assert plan_elections(c, 2, unclean=False) == []  # stays offline, no churn
    [unclean] = plan_elections(c, 2, unclean=True)
    assert unclean.state == PartitionState(2, 7, (2,), 2)


def test_an_offline_partition_comes_back_with_its_last_isr_member() -> None:
    c = cache({1, 2, 3}, {0: PartitionState(NO_LEADER, 6, (1,), 2)})
    [change] = plan_elections(c, 3, unclean=False)
    assert change.state == PartitionState(1, 7, (1,), 3)


def test_dead_and_shutting_down_followers_leave_the_isr() -> None:
    c = cache({1, 2, 3}, {0: PartitionState(1, 0, (1, 2, 3), 1)})
    assert plan_elections(c, 1, unclean=False) == []
    c.shutting_down = {3}
    [change] = plan_elections(c, 1, unclean=False)
    assert change.state == PartitionState(1, 1, (1, 2), 1)


def test_controlled_shutdown_moves_leadership_but_never_offline() -> None:
    c = cache({1, 2, 3}, {0: PartitionState(1, 0, (1, 2), 1), 1: PartitionState(1, 0, (1,), 1)})
    c.shutting_down = {1}
    [change] = plan_elections(c, 1, unclean=False)
    assert (change.partition, change.state.leader, change.state.isr) == (0, 2, (2,))


def test_preferred_leaders_return_past_the_imbalance_threshold() -> None:
    states = {p: PartitionState(2, 3, (1, 2, 3), 1) for p in range(4)}
    c = cache({1, 2, 3}, states)
    moves = plan_preferred_leaders(c, 1, imbalance_percent=10)
    assert {m.partition for m in moves} == {0, 1, 2, 3}
    assert all(m.state.leader == 1 and m.state.leader_epoch == 4 for m in moves)
    assert plan_preferred_leaders(c, 1, imbalance_percent=100) == []
    c.states[("t", 0)] = VersionedState(PartitionState(2, 3, (2, 3), 1), 4)
    moves = plan_preferred_leaders(c, 1, imbalance_percent=10)
    assert 0 not in {m.partition for m in moves}  # out of sync: not yet


# (election type, alive, state (leader, isr) or None, replicas (1, 2, 3)) ->
# (error, new leader, new ISR)
PREFERRED, UNCLEAN = ElectionType.PREFERRED, ElectionType.UNCLEAN
NONE, NOT_NEEDED = ErrorCode.none, ErrorCode.election_not_needed
REQUESTED = [
    (PREFERRED, {1, 2, 3}, (1, (1, 2, 3)), NOT_NEEDED, None, None),
    (PREFERRED, {1, 2, 3}, (2, (1, 2, 3)), NONE, 1, (1, 2, 3)),
    (PREFERRED, {1, 2, 3}, (2, (2, 3)), ErrorCode.preferred_leader_not_available, None, None),
    (PREFERRED, {2, 3}, (2, (1, 2, 3)), ErrorCode.preferred_leader_not_available, None, None),
    (PREFERRED, {1, 2, 3}, None, ErrorCode.preferred_leader_not_available, None, None),
    (UNCLEAN, {1, 2, 3}, (2, (2,)), NOT_NEEDED, None, None),
    (UNCLEAN, {2, 3}, (1, (1, 3)), NONE, 3, (3,)),  # a clean leader first
    (UNCLEAN, {2, 3}, (NO_LEADER, (1,)), NONE, 2, (2,)),  # outside the ISR, alone
    (UNCLEAN, set(), (NO_LEADER, (1,)), ErrorCode.eligible_leaders_not_available, None, None),
]


@pytest.mark.parametrize(("kind", "alive", "state", "error", "leader", "isr"), REQUESTED)
def test_requested_elections(
    kind: ElectionType,
    alive: set[int],
    state: tuple[int, tuple[int, ...]] | None,
    error: ErrorCode,
    leader: int | None,
    isr: tuple[int, ...] | None,
) -> None:
    current = None if state is None else PartitionState(state[0], 5, state[1], 1)
    planned = plan_requested_election(cache(alive, {0: current}), 9, kind, "t", 0)
    assert planned.error is error
    if leader is None:
        assert planned.change is None
    else:
        assert planned.change is not None
        assert planned.change.state == PartitionState(leader, 6, isr or (), 9)
        assert planned.change.expected_version == 4


def test_a_requested_election_of_an_unknown_partition() -> None:
    planned = plan_requested_election(cache({1}, {0: None}), 9, PREFERRED, "t", 7)
    assert planned.error is ErrorCode.unknown_topic_or_partition
    planned = plan_requested_election(cache({1}, {0: None}), 9, UNCLEAN, "nope", 0)
    assert planned.error is ErrorCode.unknown_topic_or_partition
