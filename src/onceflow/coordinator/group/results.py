"""What the coordinator answers: plain values the request handlers turn into kio responses.

Keeping these free of kio lets one coordinator serve every API version, and lets unit tests
read results without building protocol messages.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from onceflow.coordinator.group.offsets import TopicPartition
from onceflow.errors import ErrorCode

NO_GENERATION = -1
NO_MEMBER_ID = ""  # what a member sends before it has an id, and what errors echo back
NO_PROTOCOL = ""
CLASSIC_GROUP = "classic"  # ListGroups v5 group types (KIP-848)
CONSUMER_GROUP = "consumer"
NO_LEADER = ""


@dataclass(frozen=True, slots=True)
class JoinMember:
    """One member as the leader sees it in the JoinGroup response."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str = NO_PROTOCOL
    leader_id: str = NO_LEADER
    members: tuple[JoinMember, ...] = ()
    skip_assignment: bool = False  # JoinGroup v9+ (KIP-814)

    @classmethod
    def failed(cls, member_id: str, error: ErrorCode) -> JoinResult:
        return cls(error=error, member_id=member_id)


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveMemberResult:
    member_id: str
    group_instance_id: str | None
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class LeaveResult:
    error: ErrorCode  # group-level: the group could not be reached at all
    members: tuple[LeaveMemberResult, ...] = ()

    @property
    def first_error(self) -> ErrorCode:
        """The one code LeaveGroup v0-v2 can carry: the group's, else the first member's."""
        if self.error is not ErrorCode.none:
            return self.error
        for member in self.members:
            if member.error is not ErrorCode.none:
                return member.error
        return ErrorCode.none


@dataclass(frozen=True, slots=True)
class MemberSummary:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupSummary:
    """DescribeGroups data. Metadata and assignments are only shown for a Stable group."""

    group_id: str
    error: ErrorCode
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberSummary, ...] = ()


@dataclass(frozen=True, slots=True)
class GroupOverview:
    """ListGroups data."""

    group_id: str
    protocol_type: str
    state: str
    group_type: str = CLASSIC_GROUP  # ListGroups v5: "classic" or "consumer" (KIP-848)


@dataclass(frozen=True, slots=True)
class FetchedOffset:
    """One partition of an OffsetFetch answer; offset -1 means nothing committed."""

    offset: int
    leader_epoch: int
    metadata: str
    error: ErrorCode = ErrorCode.none


@dataclass(frozen=True, slots=True)
class OffsetCommitEntry:
    """One partition of an OffsetCommit request."""

    offset: int
    leader_epoch: int = -1
    metadata: str | None = None


@dataclass(slots=True)
class OffsetFetchResult:
    error: ErrorCode
    partitions: dict[TopicPartition, FetchedOffset] = field(default_factory=dict)
