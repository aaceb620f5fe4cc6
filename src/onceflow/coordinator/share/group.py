"""Share-group membership (KIP-932's ShareGroupHeartbeat), sans-IO.

A share group has no rebalance protocol: members never own partitions exclusively, so an
assignment changes at once, with no revocation. The group epoch grows at every change of
membership, subscriptions or the subscribed topics' partition counts; a member's epoch is
the group epoch of the assignment it was last given. Every member is assigned every
partition of the topics it subscribes to (records, not partitions, are what members
share), which is one of the assignments Kafka's share assignors may give.

Membership is kept in memory here and in `__consumer_offsets` (durable_membership.py):
after a coordinator move or restart members carry on at their epochs, while what matters
for delivery, the share-partition state, is durable in `__share_group_state`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum

from onceflow.coordinator.group.offsets import TopicPartition
from onceflow.errors import ErrorCode

LEAVE_EPOCH = -1
JOIN_EPOCH = 0


class ShareGroupState(Enum):
    """Kafka's ShareGroup.ShareGroupState names (ListGroups, DescribeGroups, the CLI)."""

    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(slots=True)
class ShareMember:
    member_id: str
    epoch: int
    subscribed: tuple[str, ...]
    rack_id: str | None
    client_id: str
    client_host: str
    deadline_ms: int
    assignment: frozenset[TopicPartition] = frozenset()


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)

    @property
    def state(self) -> ShareGroupState:
        return ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed}


@dataclass(frozen=True, slots=True)
class Heartbeat:
    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None
    subscribed: tuple[str, ...] | None
    client_id: str
    client_host: str


@dataclass(frozen=True, slots=True)
class HeartbeatAnswer:
    error: ErrorCode
    message: str | None = None
    member_epoch: int = -1
    assignment: frozenset[TopicPartition] | None = None  # None: unchanged, not sent
    left: bool = False


@dataclass(frozen=True, slots=True)
class MembershipLimits:
    session_timeout_ms: int
    max_size: int


def heartbeat(
    group: ShareGroup,
    hb: Heartbeat,
    now_ms: int,
    limits: MembershipLimits,
    partitions_of: Callable[[str], int | None],
) -> HeartbeatAnswer:
    """One heartbeat's effect on the group (it was validated: ids non-empty)."""
    deadline = now_ms + limits.session_timeout_ms
    member = group.members.get(hb.member_id)
    if hb.member_epoch == LEAVE_EPOCH:
        if member is None:
            return HeartbeatAnswer(ErrorCode.unknown_member_id, "unknown member")
        del group.members[hb.member_id]
        group.epoch += 1
        return HeartbeatAnswer(ErrorCode.none, member_epoch=LEAVE_EPOCH, left=True)
    if hb.member_epoch == JOIN_EPOCH:
        if not hb.subscribed:
            return HeartbeatAnswer(
                ErrorCode.invalid_request, "SubscribedTopicNames must be set in first request."
            )
        if member is None and len(group.members) >= limits.max_size:
            return HeartbeatAnswer(
                ErrorCode.group_max_size_reached,
                f"The share group has reached its maximum capacity of {limits.max_size} members.",
            )
        member = ShareMember(
            hb.member_id,
            0,
            tuple(sorted(hb.subscribed)),
            hb.rack_id,
            hb.client_id,
            hb.client_host,
            deadline,
        )
        group.members[hb.member_id] = member
        group.epoch += 1
    else:
        if member is None:
            return HeartbeatAnswer(
                ErrorCode.unknown_member_id, f"Member {hb.member_id} is not a member of the group"
            )
        if hb.member_epoch != member.epoch:
            return HeartbeatAnswer(
                ErrorCode.fenced_member_epoch,
                f"The share group member has a smaller member epoch ({hb.member_epoch}) than "
                f"the one known by the group coordinator ({member.epoch}).",
            )
        member.deadline_ms = deadline
        if hb.subscribed is not None and tuple(sorted(hb.subscribed)) != member.subscribed:
            member.subscribed = tuple(sorted(hb.subscribed))
            group.epoch += 1
        if hb.rack_id is not None:
            member.rack_id = hb.rack_id
    target = assignment_for(member.subscribed, partitions_of)
    if target != member.assignment:
        group.epoch += 1 if member.epoch == group.epoch else 0
        member.assignment = target
    if member.epoch != group.epoch:
        member.epoch = group.epoch
        return HeartbeatAnswer(ErrorCode.none, member_epoch=member.epoch, assignment=target)
    return HeartbeatAnswer(ErrorCode.none, member_epoch=member.epoch)


def assignment_for(
    subscribed: Iterable[str], partitions_of: Callable[[str], int | None]
) -> frozenset[TopicPartition]:
    out: set[TopicPartition] = set()
    for topic in subscribed:
        count = partitions_of(topic) or 0
        out.update(TopicPartition(topic, p) for p in range(count))
    return frozenset(out)


def expire(group: ShareGroup, now_ms: int) -> list[str]:
    """Remove the members whose session ran out; their ids."""
    gone = [m.member_id for m in group.members.values() if m.deadline_ms <= now_ms]
    for member_id in gone:
        del group.members[member_id]
    if gone:
        group.epoch += 1
    return gone
