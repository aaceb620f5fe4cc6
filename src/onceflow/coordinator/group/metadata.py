"""Group and member metadata: membership, protocol choice and the state machine's data.

Nothing here does I/O or reads a clock; callers pass times in. A member's outstanding
JoinGroup or SyncGroup request is an asyncio future on the member, resolved when the
rebalance reaches the point that answers it (Kafka parks a callback; we park a future).
"""

from __future__ import annotations

import asyncio
import struct
from collections import Counter
from dataclasses import dataclass

from onceflow.coordinator.group.consumer_group import ConsumerGroup
from onceflow.coordinator.group.offset_store import GroupOffsets
from onceflow.coordinator.group.offsets import GroupRecord, MemberRecord
from onceflow.coordinator.group.results import (
    NO_PROTOCOL,
    GroupSummary,
    JoinMember,
    JoinResult,
    MemberSummary,
    SyncResult,
)
from onceflow.coordinator.group.state import GroupState, check_transition
from onceflow.errors import ErrorCode
from onceflow.invariants import invariant

CONSUMER_PROTOCOL_TYPE = "consumer"
Protocols = tuple[tuple[str, bytes], ...]  # (name, metadata) in the member's preference order


@dataclass(eq=False, slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    assignment: bytes = b""
    join_future: asyncio.Future[JoinResult] | None = None
    sync_future: asyncio.Future[SyncResult] | None = None
    # A member that has never completed a join: it cannot heartbeat yet, so it expires
    # after NEW_MEMBER_JOIN_TIMEOUT_MS instead of its session timeout.
    is_new: bool = False
    heartbeat_deadline_ms: int = 0

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.join_future is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.sync_future is not None

    def protocol_names(self) -> set[str]:
        return {name for name, _ in self.protocols}

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        raise KeyError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: Protocols) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among those every member supports."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def complete_join(self, result: JoinResult) -> bool:
        """Answer the parked JoinGroup, if any. True when there was one."""
        future, self.join_future = self.join_future, None
        if future is None:
            return False
        if not future.done():  # a handler cancelled mid-wait leaves a cancelled future
            future.set_result(result)
        return True

    def complete_sync(self, result: SyncResult) -> bool:
        future, self.sync_future = self.sync_future, None
        if future is None:
            return False
        if not future.done():
            future.set_result(result)
        return True


@dataclass(slots=True)
class InitialDelay:
    """The `group.initial.rebalance.delay.ms` phase of a new group's first rebalance."""

    delay_ms: int  # length of the current wait
    remaining_ms: int  # how much longer the group may keep waiting for stragglers


class GroupMetadata:
    def __init__(self, group_id: str, now_ms: int, state: GroupState = GroupState.EMPTY) -> None:
        self.group_id = group_id
        self.state = state
        self.state_timestamp_ms: int | None = now_ms
        self.protocol_type: str | None = None
        self.protocol: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, MemberMetadata] = {}  # insertion order picks a new leader
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        self.pending_members: dict[str, int] = {}  # MEMBER_ID_REQUIRED ids -> deadline
        self.pending_sync: set[str] = set()
        self.offsets = GroupOffsets()
        self.subscribed_topics: frozenset[str] | None = None
        # Set for a consumer-protocol group (KIP-848): its members live there, and the
        # classic state above stays Empty.
        self.consumer: ConsumerGroup | None = None
        # Rebalance timers, on the monotonic clock.
        self.join_deadline_ms: int | None = None
        self.initial_delay: InitialDelay | None = None
        self.new_member_added = False
        self.sync_deadline_ms: int | None = None

    def __repr__(self) -> str:
        return (
            f"GroupMetadata({self.group_id!r}, {self.state}, generation={self.generation_id}, "
            f"members={list(self.members)})"
        )

    # -- state

    def is_(self, *states: GroupState) -> bool:
        return self.state in states

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        check_transition(self.group_id, self.state, target)
        self.state = target
        self.state_timestamp_ms = now_ms

    # -- membership

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def get(self, member_id: str) -> MemberMetadata:
        return self.members[member_id]

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def validate_member(self, member_id: str, instance_id: str | None) -> ErrorCode | None:
        """None if the request comes from a current member, else the error it gets.

        A static member must present the member id its instance id maps to now; an older
        incarnation of the same instance is fenced.
        """
        if instance_id is not None:
            current = self.static_members.get(instance_id)
            if current is None:
                return ErrorCode.unknown_member_id
            return None if current == member_id else ErrorCode.fenced_instance_id
        return None if member_id in self.members else ErrorCode.unknown_member_id

    def add(self, member: MemberMetadata) -> None:
        invariant(member.member_id not in self.members, f"member {member.member_id} exists")
        if member.group_instance_id is not None:
            invariant(
                member.group_instance_id not in self.static_members,
                f"instance {member.group_instance_id} is already mapped",
            )
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self.pending_members.pop(member.member_id, None)

    def remove(self, member_id: str) -> MemberMetadata | None:
        member = self.members.pop(member_id, None)
        if member is not None and member.group_instance_id is not None:
            self.static_members.pop(member.group_instance_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_members.pop(member_id, None)
        self.pending_sync.discard(member_id)
        return member

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> MemberMetadata:
        """Give a static member a new member id; the old id's parked requests are fenced."""
        member = self.members.pop(old_id)
        member.complete_join(JoinResult.failed(old_id, ErrorCode.fenced_instance_id))
        member.complete_sync(SyncResult(ErrorCode.fenced_instance_id))
        member.member_id = new_id
        self.members[new_id] = member
        if self.leader_id == old_id:
            self.leader_id = new_id
        self.static_members[instance_id] = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        return member

    def not_yet_rejoined(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def all_members_joined(self) -> bool:
        return not self.pending_members and all(m.is_awaiting_join for m in self.members.values())

    def num_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.is_awaiting_join)

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep a leader that rejoined, else promote any member that did. False if none did."""
        if self.leader_id is None:
            return False
        if self.members[self.leader_id].is_awaiting_join:
            return True
        for member in self.members.values():
            if member.is_awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    # -- protocols

    def _candidate_protocols(self) -> set[str]:
        counts: Counter[str] = Counter()
        for member in self.members.values():
            counts.update(member.protocol_names())
        return {name for name, n in counts.items() if n == len(self.members)}

    def supports_protocols(self, protocol_type: str, names: set[str]) -> bool:
        """Can a member with these protocols join? A new group accepts any non-empty set."""
        if self.is_(GroupState.EMPTY) or not self.members:
            return bool(protocol_type) and bool(names)
        return self.protocol_type == protocol_type and bool(names & self._candidate_protocols())

    def select_protocol(self) -> str:
        """Every member votes for its favourite common protocol; the most votes win."""
        invariant(bool(self.members), f"cannot select a protocol for empty {self.group_id}")
        candidates = self._candidate_protocols()
        votes = Counter(m.vote(candidates) for m in self.members.values())
        return votes.most_common(1)[0][0]

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol = None
            self.transition_to(GroupState.EMPTY, now_ms)
        self.subscribed_topics = self.compute_subscribed_topics()
        self.pending_sync.clear()

    def current_member_metadata(self) -> tuple[JoinMember, ...]:
        """What the leader needs to compute an assignment."""
        invariant(self.protocol is not None, f"{self.group_id} has no protocol in {self.state}")
        assert self.protocol is not None
        return tuple(
            JoinMember(m.member_id, m.group_instance_id, m.metadata(self.protocol))
            for m in self.members.values()
        )

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        """Topics a consumer group's members subscribe to, or None when we cannot tell.

        Offsets of subscribed topics never expire while the group is active. Every version
        of the consumer protocol's subscription starts with int16 version and the topics.
        """
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return frozenset()
        if self.protocol is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            parsed = parse_subscription_topics(member.metadata(self.protocol))
            if parsed is None:
                return None
            topics.update(parsed)
        return frozenset(topics)

    # -- views

    def summary(self) -> GroupSummary:
        stable = self.is_(GroupState.STABLE) and self.protocol is not None
        protocol = self.protocol if stable and self.protocol is not None else NO_PROTOCOL
        members = tuple(
            MemberSummary(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                metadata=m.metadata(protocol) if stable else b"",
                assignment=m.assignment if stable else b"",
            )
            for m in self.members.values()
        )
        return GroupSummary(
            group_id=self.group_id,
            error=ErrorCode.none,
            state=self.state.value,
            protocol_type=self.protocol_type or "",
            protocol=protocol,
            members=members,
        )

    def to_record(self, assignments: dict[str, bytes]) -> GroupRecord:
        protocol = self.protocol
        return GroupRecord(
            protocol_type=self.protocol_type or "",
            generation=self.generation_id,
            protocol=protocol,
            leader=self.leader_id,
            current_state_timestamp_ms=-1
            if self.state_timestamp_ms is None
            else self.state_timestamp_ms,
            members=tuple(
                MemberRecord(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    session_timeout_ms=m.session_timeout_ms,
                    subscription=m.metadata(protocol) if protocol is not None else b"",
                    assignment=assignments.get(m.member_id, b""),
                )
                for m in self.members.values()
            ),
        )

    @classmethod
    def from_record(cls, group_id: str, record: GroupRecord, now_ms: int) -> GroupMetadata:
        """A group as loaded from its latest metadata record: Stable if it has members."""
        state = GroupState.STABLE if record.members else GroupState.EMPTY
        group = cls(group_id, now_ms, state)
        group.generation_id = record.generation
        group.protocol = record.protocol
        group.state_timestamp_ms = (
            None if record.current_state_timestamp_ms < 0 else record.current_state_timestamp_ms
        )
        for m in record.members:
            protocols: Protocols = ((record.protocol or "", m.subscription),)
            group.add(
                MemberMetadata(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    session_timeout_ms=m.session_timeout_ms,
                    protocol_type=record.protocol_type,
                    protocols=protocols,
                    assignment=m.assignment,
                )
            )
        group.protocol_type = record.protocol_type or None
        group.leader_id = record.leader if record.leader in group.members else group.leader_id
        group.subscribed_topics = group.compute_subscribed_topics()
        return group


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def parse_subscription_topics(data: bytes) -> list[str] | None:
    """The topic list at the front of a consumer protocol subscription; None if malformed."""
    try:
        pos = 2  # int16 version
        (count,) = _I32.unpack_from(data, pos)
        pos += 4
        if count < 0:
            return None
        topics = []
        for _ in range(count):
            (size,) = _I16.unpack_from(data, pos)
            pos += 2
            if size < 0 or pos + size > len(data):
                return None
            topics.append(data[pos : pos + size].decode("utf-8"))
            pos += size
        return topics
    except (struct.error, UnicodeDecodeError):
        return None
