"""The reconciliation state machine of consumer-protocol members, as a table of steps."""

from __future__ import annotations

import pytest

from onceflow.coordinator.group.offsets import TopicPartition as TP
from onceflow.coordinator.group.reconcile import (
    NEXT_STATE,
    MemberState,
    Reconciliation,
    reconcile,
)

S, UNREVOKED, UNRELEASED = (
    MemberState.STABLE,
    MemberState.UNREVOKED_PARTITIONS,
    MemberState.UNRELEASED_PARTITIONS,
)


def ps(*numbers: int) -> frozenset[TP]:
    return frozenset(TP("t", n) for n in numbers)


# (name, current, target epoch, target, reported owned (None: not sent), owned by others,
#  expected state, epoch, previous epoch, assigned, revoking)
CASES = [
    (
        "stable at the target stays",
        Reconciliation(S, 3, 2, ps(0, 1)),
        3,
        ps(0, 1),
        ps(0, 1),
        (),
        S,
        3,
        2,
        ps(0, 1),
        ps(),
    ),
    (
        "new target, only additions: straight to it",
        Reconciliation(S, 3, 2, ps(0)),
        4,
        ps(0, 1),
        ps(0),
        (),
        S,
        4,
        3,
        ps(0, 1),
        ps(),
    ),
    (
        "new target, a partition to give up: revoke first at the same epoch",
        Reconciliation(S, 3, 2, ps(0, 1)),
        4,
        ps(0),
        ps(0, 1),
        (),
        UNREVOKED,
        3,
        3,
        ps(0),
        ps(1),
    ),
    (
        "revoke and gain: the gain waits for the revocation",
        Reconciliation(S, 3, 2, ps(0, 1)),
        4,
        ps(0, 2),
        ps(0, 1),
        (),
        UNREVOKED,
        3,
        3,
        ps(0),
        ps(1),
    ),
    (
        "still owns a revoked partition: no progress",
        Reconciliation(UNREVOKED, 3, 3, ps(0), ps(1)),
        4,
        ps(0, 2),
        ps(0, 1),
        (),
        UNREVOKED,
        3,
        3,
        ps(0),
        ps(1),
    ),
    (
        "heartbeat without owned partitions: cannot tell, no progress",
        Reconciliation(UNREVOKED, 3, 3, ps(0), ps(1)),
        4,
        ps(0, 2),
        None,
        (),
        UNREVOKED,
        3,
        3,
        ps(0),
        ps(1),
    ),
    (
        "revoked: moves to the target epoch and gets the new partition",
        Reconciliation(UNREVOKED, 3, 3, ps(0), ps(1)),
        4,
        ps(0, 2),
        ps(0),
        (),
        S,
        4,
        3,
        ps(0, 2),
        ps(),
    ),
    (
        "a target partition another member still owns: unreleased, at the target epoch",
        Reconciliation(S, 3, 2, ps(0)),
        4,
        ps(0, 1),
        ps(0),
        (1,),
        UNRELEASED,
        4,
        3,
        ps(0),
        ps(),
    ),
    (
        "unreleased partition freed: assigned, stable",
        Reconciliation(UNRELEASED, 4, 3, ps(0)),
        4,
        ps(0, 1),
        ps(0),
        (),
        S,
        4,
        4,
        ps(0, 1),
        ps(),
    ),
    (
        "unreleased and still held by the other: waits",
        Reconciliation(UNRELEASED, 4, 3, ps(0)),
        4,
        ps(0, 1),
        ps(0),
        (1,),
        UNRELEASED,
        4,
        4,
        ps(0),
        ps(),
    ),
    (
        "a new member gets what is free at once, the rest later",
        Reconciliation(S, 0, -1),
        5,
        ps(0, 1, 2),
        ps(),
        (2,),
        UNRELEASED,
        5,
        0,
        ps(0, 1),
        ps(),
    ),
    (
        "a reported partition not asked back is no obstacle: revocations only count",
        Reconciliation(S, 3, 2, ps(0, 1)),
        4,
        ps(0),
        ps(0),
        (),
        S,
        4,
        3,
        ps(0),
        ps(),
    ),
]


@pytest.mark.parametrize(
    (
        "current",
        "target_epoch",
        "target",
        "reported",
        "others",
        "state",
        "epoch",
        "previous",
        "assigned",
        "revoking",
    ),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_reconciliation_step(
    current: Reconciliation,
    target_epoch: int,
    target: frozenset[TP],
    reported: frozenset[TP] | None,
    others: tuple[int, ...],
    state: MemberState,
    epoch: int,
    previous: int,
    assigned: frozenset[TP],
    revoking: frozenset[TP],
) -> None:
    after = reconcile(current, target_epoch, target, reported, lambda tp: tp.partition in others)
    assert (after.state, after.epoch, after.previous_epoch) == (state, epoch, previous)
    assert (after.assigned, after.revoking) == (assigned, revoking)


def test_the_table_revokes_before_anything_else() -> None:
    assert {NEXT_STATE[(True, u)] for u in (False, True)} == {UNREVOKED}
    assert NEXT_STATE[(False, True)] is UNRELEASED
    assert NEXT_STATE[(False, False)] is S


def test_a_partition_is_never_both_assigned_and_revoking() -> None:
    current = Reconciliation(S, 1, 0, ps(0, 1, 2))
    after = reconcile(current, 2, ps(2, 3), ps(0, 1, 2), lambda tp: False)
    assert not after.assigned & after.revoking
    assert after.owned == ps(0, 1, 2)  # nothing new until 0 and 1 are given up
