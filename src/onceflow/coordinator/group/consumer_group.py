"""A consumer-protocol group (KIP-848): its members, epochs and target assignment.

It hangs off the group's GroupMetadata (`GroupMetadata.consumer`), which keeps the group's
committed offsets either way, so offsets, deletion, retention, loading and unloading treat
both protocols alike.

Three epochs order everything: the group epoch grows with every change that calls for a new
assignment (a member joins, leaves, changes its subscription; a subscribed topic is created,
deleted or grows); the assignment epoch is the group epoch the target assignment was
computed at; each member's epoch is the target epoch it has reconciled to (reconcile.py).
The coordinator knows which member owns each partition (assigned or still being revoked),
so it never gives a partition to two members at once.
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum

from onceflow.coordinator.group.assignors import ASSIGNORS, MemberSpec
from onceflow.coordinator.group.offsets import TopicPartition
from onceflow.coordinator.group.reconcile import MemberState, Partitions, Reconciliation

_NONE: frozenset[TopicPartition] = frozenset()
# topic name -> (topic id, partition count): what the target assignment was computed from.
TopicsMetadata = dict[str, tuple[uuid.UUID | None, int]]


class ConsumerGroupState(Enum):
    """The value is the name Kafka prints (ListGroups, ConsumerGroupDescribe)."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


@dataclass(frozen=True, slots=True)
class ClassicMetadata:
    """What a classic member (JoinGroup/SyncGroup) brings besides a subscription: its own
    session timeout and the embedded "consumer" protocols it listed, first preferred."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


@dataclass(slots=True)
class ConsumerMember:
    member_id: str
    client_id: str
    client_host: str
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = 0
    subscribed: tuple[str, ...] = ()
    regex: str | None = None  # SubscribedTopicRegex: topics matching it are subscribed too
    server_assignor: str | None = None
    recon: Reconciliation = field(default_factory=Reconciliation)
    session_deadline_ms: int = 0
    # Set while the member is asked to revoke: it is fenced if it has not done so by then.
    revocation_deadline_ms: int | None = None
    classic: ClassicMetadata | None = None  # None: a KIP-848 member
    # A classic member must sync after its join, and rejoin after being told to, within
    # its rebalance timeout (Kafka's sync and join timeouts); else it is fenced.
    sync_deadline_ms: int | None = None
    join_deadline_ms: int | None = None


class ConsumerGroup:
    def __init__(self) -> None:
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.target: dict[str, Partitions] = {}
        self.topics: TopicsMetadata = {}
        self.assignor_name = ""
        # Which member owns each partition (assigned, or being revoked).
        self._owners: dict[TopicPartition, str] = {}
        # What changed since the last `take_changes`, to be written to the log: the
        # group-level fields, and the members whose record is to be rewritten (or deleted,
        # for those no longer members).
        self.group_changed = False
        self.changed_members: set[str] = set()
        # Made from an empty classic group whose classic record is still to be deleted.
        self.replaces_classic = False
        # A KIP-848 member left or was fenced: with only classic members left, the group
        # may turn classic again (consumer_conversion.py).
        self.consumer_member_left = False
        # The topics each member regex matched when last resolved, and when to look again.
        self.regex_topics: dict[str, frozenset[str]] = {}
        self.regex_refresh_ms = 0
        self._subscribed: frozenset[str] | None = None
        self._regexes: frozenset[str] | None = None

    def take_changes(self) -> tuple[bool, bool, set[str]]:
        """(replaces classic?, group changed?, changed members), cleared."""
        changes = (self.replaces_classic, self.group_changed, self.changed_members)
        self.replaces_classic, self.group_changed, self.changed_members = False, False, set()
        return changes

    def keep_changes(self, changes: tuple[bool, bool, set[str]]) -> None:
        """Their records were not written: write them with the next change."""
        replaces_classic, group_changed, members = changes
        self.replaces_classic |= replaces_classic
        self.group_changed |= group_changed
        self.changed_members |= members

    def bump_epoch(self) -> None:
        self.group_epoch += 1
        self.group_changed = True

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for member in self.members.values():
            if (
                member.recon.epoch != self.assignment_epoch
                or member.recon.state is not MemberState.STABLE
            ):
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def subscriptions_changed(self) -> None:
        """A member came, went, or changed its topics or regex, or a regex matches other
        topics: the group's subscribed topics and regexes are computed again when asked."""
        self._subscribed = None
        self._regexes = None

    def subscribed_topics(self) -> frozenset[str]:
        """Every topic some member subscribes to (kept between heartbeats: steady-state
        heartbeats do no per-member work)."""
        if self._subscribed is None:
            self._subscribed = frozenset(
                t for m in self.members.values() for t in self.member_topics(m)
            )
        return self._subscribed

    def member_topics(self, member: ConsumerMember) -> frozenset[str]:
        """What a member subscribes to: its topic names and what its regex matches."""
        matched = self.regex_topics.get(member.regex, frozenset()) if member.regex else frozenset()
        return frozenset(member.subscribed) | matched

    def regexes(self) -> frozenset[str]:
        if self._regexes is None:
            self._regexes = frozenset(m.regex for m in self.members.values() if m.regex)
        return self._regexes

    def owner(self, tp: TopicPartition) -> str | None:
        return self._owners.get(tp)

    def set_reconciliation(self, member: ConsumerMember, recon: Reconciliation) -> None:
        """Give the member its new reconciliation, moving partition ownership with it."""
        for tp in member.recon.owned - recon.owned:
            if self._owners.get(tp) == member.member_id:
                del self._owners[tp]
        for tp in recon.owned:
            self._owners[tp] = member.member_id
        if recon != member.recon:
            self.changed_members.add(member.member_id)
        member.recon = recon

    def add(self, member: ConsumerMember) -> None:
        self.subscriptions_changed()
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        self.changed_members.add(member.member_id)

    def replace(self, old: ConsumerMember, new: ConsumerMember) -> None:
        """A static member's new incarnation takes its place: its assignment, target and
        partitions, without a new group epoch (Kafka's replaceMember)."""
        del self.members[old.member_id]
        self.subscriptions_changed()
        self.changed_members.add(old.member_id)
        target = self.target.pop(old.member_id, frozenset())
        self.restore(new, target)
        self.changed_members.add(new.member_id)

    def remove(self, member_id: str) -> ConsumerMember | None:
        """Drop a member (it left or was fenced): its partitions are free for the others at
        their next heartbeat, and the next heartbeat computes a new target."""
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self.subscriptions_changed()
        if (
            member.instance_id is not None
            and self.static_members.get(member.instance_id) == member_id
        ):
            del self.static_members[member.instance_id]
        self.set_reconciliation(member, Reconciliation())
        self.target.pop(member_id, None)
        self.consumer_member_left |= member.classic is None
        self.changed_members.add(member_id)
        self.bump_epoch()
        return member

    def restore(self, member: ConsumerMember, target: Partitions) -> None:
        """Put back a member read from the log, with its target and its partitions."""
        self.subscriptions_changed()
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        self.target[member.member_id] = target
        for tp in member.recon.owned:
            self._owners[tp] = member.member_id

    def compute_target(self, default_assignor: str) -> None:
        """A new target assignment for every member, at the current group epoch."""
        self.assignor_name = self._preferred_assignor(default_assignor)
        specs = {
            m.member_id: MemberSpec(self.member_topics(m), self.target.get(m.member_id, _NONE))
            for m in self.members.values()
        }
        counts = {name: count for name, (_, count) in self.topics.items()}
        target = dict(ASSIGNORS[self.assignor_name](specs, counts))
        self.changed_members |= {m for m in target if target[m] != self.target.get(m)}
        self.target = target
        self.assignment_epoch = self.group_epoch
        self.group_changed = True

    def _preferred_assignor(self, default: str) -> str:
        """As Kafka: the assignor most members ask for, else the broker's first."""
        votes = Counter(m.server_assignor for m in self.members.values() if m.server_assignor)
        if not votes:
            return default
        most = max(votes.values())
        return min(name for name, n in votes.items() if n == most)
