"""Partition reassignment as pure functions: what AlterPartitionReassignments writes into a
topic's assignment, and what the controller writes at each step (Kafka's phases A and B)."""

from __future__ import annotations

from onceflow.cluster.metadata import MetadataCache, TopicMetadata, VersionedState
from onceflow.cluster.reassignment import alter, ongoing, plan_reassignments, reassign_to
from onceflow.cluster.znodes import BrokerRegistration, PartitionState, TopicAssignment
from onceflow.errors import ErrorCode


def test_reassign_to_is_kafkas_full_set_target_first() -> None:
    assert reassign_to((1, 2, 3), (2, 3, 4)) == ((2, 3, 4, 1), (4,), (1,))
    assert reassign_to((1, 2), (1, 2)) == ((1, 2), (), ())
    assert reassign_to((1, 2), (2, 1)) == ((2, 1), (), ())


def test_the_znode_round_trips_with_adding_and_removing() -> None:
    a = TopicAssignment("id", {0: (2, 3, 4, 1), 1: (1, 2)}, {0: (4,)}, {0: (1,)})
    assert TopicAssignment.decode("t", a.encode()) == a


def test_alter_starts_a_reassignment_and_answers_each_partition() -> None:
    current = TopicAssignment("id", {0: (1, 2, 3), 1: (2, 3, 1)})
    updated, results = alter(current, {0: (2, 3, 4), 1: None, 7: (1,)}, alive=[1, 2, 3, 4])
    assert updated.partitions == {0: (2, 3, 4, 1), 1: (2, 3, 1)}
    assert updated.adding == {0: (4,)} and updated.removing == {0: (1,)}
    assert results[0] == (ErrorCode.none, None)
    assert results[1][0] is ErrorCode.no_reassignment_in_progress
    assert results[7][0] is ErrorCode.unknown_topic_or_partition


def test_alter_refuses_bad_targets_with_kafkas_words() -> None:
    current = TopicAssignment("id", {0: (1, 2)})
    cases = {
        (): "Empty replica list specified in partition reassignment.",
        (1, 1): "Duplicate replica ids in partition reassignment replica list: [1, 1]",
        (1, -2): "Invalid broker id in replica list: [1, -2]",
    }
    for target, words in cases.items():
        updated, results = alter(current, {0: target}, alive=[1, 2, 3])
        assert results[0] == (ErrorCode.invalid_replica_assignment, words)
        assert updated == current
    _, results = alter(current, {0: (1, 9)}, alive=[1, 2, 3])
    assert results[0][0] is ErrorCode.invalid_replica_assignment
    assert "not alive" in (results[0][1] or "")
    _, results = alter(current, {0: (1, 2, 3)}, alive=[1, 2, 3], allow_rf_change=False)
    assert results[0][0] is ErrorCode.invalid_replication_factor


def test_cancel_goes_back_to_the_original_replicas() -> None:
    moving = TopicAssignment("id", {0: (2, 3, 4, 1)}, {0: (4,)}, {0: (1,)})
    updated, results = alter(moving, {0: None}, alive=[1, 2, 3, 4])
    assert results[0] == (ErrorCode.none, None)
    assert updated == TopicAssignment("id", {0: (2, 3, 1)})
    # A new target replaces the running one, measured from the original replicas.
    updated, _ = alter(moving, {0: (1, 2, 4)}, alive=[1, 2, 3, 4])
    assert updated.partitions == {0: (1, 2, 4, 3)}
    assert updated.adding == {0: (4,)} and updated.removing == {0: (3,)}


def _cache(
    replicas: tuple[int, ...],
    adding: tuple[int, ...],
    removing: tuple[int, ...],
    state: PartitionState,
    alive: tuple[int, ...] = (1, 2, 3, 4),
) -> MetadataCache:
    cache = MetadataCache()
    cache.brokers = {b: BrokerRegistration(b, "h", 9000 + b, 0) for b in alive}
    cache.topics["t"] = TopicMetadata(
        "t",
        "id",
        {0: replicas},
        {},
        adding={0: adding} if adding else {},
        removing={0: removing} if removing else {},
        assignment_version=5,
    )
    cache.states[("t", 0)] = VersionedState(state, 8)
    return cache


def test_phase_a_bumps_the_leader_epoch_once_per_controller() -> None:
    cache = _cache((2, 3, 4, 1), (4,), (1,), PartitionState(1, 3, (1, 2, 3), 1))
    plan = plan_reassignments(cache, 2, set())
    [bump] = plan.bumps
    assert bump.state == PartitionState(1, 4, (1, 2, 3), 2)
    assert plan.completions == []
    assert plan_reassignments(cache, 2, set(plan.started)).bumps == []
    assert ongoing(cache) == {("t", 0): ((2, 3, 4, 1), (4,), (1,))}


def test_phase_b_elects_in_the_target_and_drops_the_removed_replicas() -> None:
    cache = _cache((2, 3, 4, 1), (4,), (1,), PartitionState(1, 4, (1, 2, 3, 4), 2))
    plan = plan_reassignments(cache, 2, {("t", 0, (2, 3, 4, 1))})
    [done] = plan.completions
    assert done.states == ((0, PartitionState(2, 5, (2, 3, 4), 2), 8),)
    assert done.assignment == TopicAssignment("id", {0: (2, 3, 4)})
    assert done.assignment_version == 5


def test_phase_b_keeps_a_leader_that_stays_and_waits_for_a_live_candidate() -> None:
    cache = _cache((2, 3, 4, 1), (4,), (1,), PartitionState(3, 4, (1, 2, 3, 4), 2))
    [done] = plan_reassignments(cache, 2, set()).completions
    assert done.states[0][1] == PartitionState(3, 5, (2, 3, 4), 2)
    # The old leader is dead and the only target replica in the ISR is dead too: wait.
    dead = _cache((4, 1), (4,), (1,), PartitionState(1, 4, (1, 4), 2), alive=(2, 3))
    assert plan_reassignments(dead, 2, set()).completions == []


def test_a_cancelled_reassignment_leaves_no_leader_or_isr_outside_the_replicas() -> None:
    cache = _cache((1, 2, 3), (), (), PartitionState(4, 6, (4, 1, 2), 2))
    [change] = plan_reassignments(cache, 3, set()).bumps
    assert change.state == PartitionState(1, 7, (1, 2), 3)
    settled = _cache((1, 2, 3), (), (), PartitionState(1, 6, (1, 2, 3), 2))
    assert plan_reassignments(settled, 3, set()) == plan_reassignments(MetadataCache(), 3, set())
