"""One consumer-protocol member's way to its target assignment (Kafka's reconciliation).

A member never gets a partition another member still owns, and gives up partitions before
it moves to a newer epoch, so no partition is ever consumed by two members and nobody
stops consuming what it keeps (no stop-the-world rebalance). Each heartbeat, the member's
`Reconciliation` moves along this machine:

    STABLE                at the target epoch, owning all of the target it may own
    UNREVOKED_PARTITIONS  asked to revoke partitions; keeps its epoch until the heartbeat
                          no longer lists them (or its rebalance timeout fences it)
    UNRELEASED_PARTITIONS at the target epoch, waiting for partitions of its target that
                          other members have not revoked yet

`reconcile` is the step; `NEXT_STATE` the table that picks where a step lands.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum

from onceflow.coordinator.group.offsets import TopicPartition

Partitions = frozenset[TopicPartition]


class MemberState(Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


# (must it still revoke partitions it owns?, is any target partition still owned by
# another member?) -> the state it lands in. Revoking keeps the member at its epoch (it
# may not move on before giving up); otherwise it moves to the target epoch.
NEXT_STATE: dict[tuple[bool, bool], MemberState] = {
    (True, False): MemberState.UNREVOKED_PARTITIONS,
    (True, True): MemberState.UNREVOKED_PARTITIONS,
    (False, True): MemberState.UNRELEASED_PARTITIONS,
    (False, False): MemberState.STABLE,
}


@dataclass(frozen=True, slots=True)
class Reconciliation:
    state: MemberState = MemberState.STABLE
    epoch: int = 0
    previous_epoch: int = -1
    assigned: Partitions = frozenset()  # the member may consume these now
    revoking: Partitions = frozenset()  # asked to give these up; still its own meanwhile

    @property
    def owned(self) -> Partitions:
        """What the group counts as this member's: nobody else may be given these."""
        return self.assigned | self.revoking


def reconcile(
    current: Reconciliation,
    target_epoch: int,
    target: Partitions,
    reported: Partitions | None,
    owned_by_other: Callable[[TopicPartition], bool],
) -> Reconciliation:
    """The member's next step towards `target`, given what its heartbeat says it owns
    (`reported`; None when the heartbeat did not say, so revocations cannot be confirmed)."""
    if current.state is MemberState.STABLE:
        if current.epoch == target_epoch:
            return current
        return _next(current, current.epoch, target_epoch, target, reported, owned_by_other)
    if current.state is MemberState.UNREVOKED_PARTITIONS:
        if _still_owns(reported, current.revoking):
            return current
        return _next(current, current.epoch + 1, target_epoch, target, reported, owned_by_other)
    return _next(current, current.epoch, target_epoch, target, reported, owned_by_other)


def _still_owns(reported: Partitions | None, revoking: Partitions) -> bool:
    return reported is None or bool(reported & revoking)


def _next(
    current: Reconciliation,
    revoking_epoch: int,
    target_epoch: int,
    target: Partitions,
    reported: Partitions | None,
    owned_by_other: Callable[[TopicPartition], bool],
) -> Reconciliation:
    kept = current.assigned & target
    revoking = current.assigned - kept
    wanted = target - kept
    unreleased = frozenset(tp for tp in wanted if owned_by_other(tp))
    must_revoke = bool(revoking) and _still_owns(reported, revoking)
    state = NEXT_STATE[(must_revoke, bool(unreleased))]
    if state is MemberState.UNREVOKED_PARTITIONS:
        return _with_epoch(current, state, revoking_epoch, kept, revoking)
    return _with_epoch(current, state, target_epoch, kept | (wanted - unreleased), frozenset())


def _with_epoch(
    current: Reconciliation,
    state: MemberState,
    epoch: int,
    assigned: Partitions,
    revoking: Partitions,
) -> Reconciliation:
    return replace(
        current,
        state=state,
        epoch=epoch,
        previous_epoch=current.epoch,
        assigned=assigned,
        revoking=revoking,
    )
