"""The classic consumer group's states and the one table of legal transitions.

A group moves Empty -> PreparingRebalance -> CompletingRebalance -> Stable and back to
PreparingRebalance whenever membership changes. Every transition goes through `check()`, so a
logic error surfaces at once as an exception naming both states instead of as a group that
quietly answers with the wrong error codes.
"""

from __future__ import annotations

from enum import Enum


class GroupState(Enum):
    """The value is the name Kafka prints (DescribeGroups, ListGroups, the CLI)."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


# target state -> the states a group may be in just before it.
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    # A member joins an empty group, or a stable/awaiting-sync group's membership changes.
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE}
    ),
    # The delayed join completed with at least one member: the leader now assigns.
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    # The leader's assignment was written to __consumer_offsets; or a consumer-protocol
    # group left with classic members only became classic again (online downgrade).
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}),
    # The delayed join completed with nobody left; or, from any live state, the members
    # moved into a consumer-protocol group (online upgrade, consumer_conversion.py).
    GroupState.EMPTY: frozenset(
        {GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE, GroupState.STABLE}
    ),
    # Removal (expiry, deletion, unload) can happen from anywhere, Dead included.
    GroupState.DEAD: frozenset(GroupState),
}


class IllegalStateTransition(Exception):
    """A transition the table forbids: always a bug in the coordinator, never a client error."""

    def __init__(self, group_id: str, current: GroupState, target: GroupState) -> None:
        allowed = ", ".join(sorted(s.value for s in VALID_PREVIOUS_STATES[target]))
        super().__init__(
            f"group {group_id!r} cannot move from {current.value} to {target.value}; "
            f"{target.value} may only follow {allowed}"
        )
        self.current = current
        self.target = target


def can_transition(current: GroupState, target: GroupState) -> bool:
    return current in VALID_PREVIOUS_STATES[target]


def check_transition(group_id: str, current: GroupState, target: GroupState) -> None:
    """Raise IllegalStateTransition unless the table allows current -> target."""
    if not can_transition(current, target):
        raise IllegalStateTransition(group_id, current, target)
