"""The group state table: every pair of states is either allowed or raises naming both."""

from __future__ import annotations

import itertools

import pytest

from onceflow.coordinator.group.metadata import GroupMetadata
from onceflow.coordinator.group.state import (
    VALID_PREVIOUS_STATES,
    GroupState,
    IllegalStateTransition,
    can_transition,
    check_transition,
)

S = GroupState

EXPECTED_ALLOWED = {
    (S.EMPTY, S.PREPARING_REBALANCE),
    (S.STABLE, S.PREPARING_REBALANCE),
    (S.COMPLETING_REBALANCE, S.PREPARING_REBALANCE),
    (S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE),
    (S.PREPARING_REBALANCE, S.EMPTY),
    (S.COMPLETING_REBALANCE, S.EMPTY),  # online upgrade to a consumer group
    (S.STABLE, S.EMPTY),
    (S.COMPLETING_REBALANCE, S.STABLE),
    (S.EMPTY, S.STABLE),  # online downgrade from a consumer group
    *((state, S.DEAD) for state in S),
}


def test_every_state_has_an_entry() -> None:
    assert set(VALID_PREVIOUS_STATES) == set(S)


def test_state_names_are_kafkas() -> None:
    assert [s.value for s in S] == [
        "Empty",
        "PreparingRebalance",
        "CompletingRebalance",
        "Stable",
        "Dead",
    ]
    assert str(S.COMPLETING_REBALANCE) == "CompletingRebalance"


@pytest.mark.parametrize(("current", "target"), list(itertools.product(S, S)))
def test_walk_the_table(current: GroupState, target: GroupState) -> None:
    allowed = (current, target) in EXPECTED_ALLOWED
    assert can_transition(current, target) is allowed
    if allowed:
        check_transition("g", current, target)
        group = GroupMetadata("g", now_ms=0, state=current)
        group.transition_to(target, now_ms=42)
        assert group.state is target
        assert group.state_timestamp_ms == 42
    else:
        with pytest.raises(IllegalStateTransition) as info:
            check_transition("g", current, target)
        message = str(info.value)
        assert current.value in message
        assert target.value in message
        assert "'g'" in message
        group = GroupMetadata("g", now_ms=0, state=current)
        with pytest.raises(IllegalStateTransition):
            group.transition_to(target, now_ms=42)
        assert group.state is current
