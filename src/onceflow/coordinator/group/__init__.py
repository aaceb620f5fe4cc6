"""The group coordinator: classic groups (JoinGroup/SyncGroup), consumer-protocol groups
(KIP-848's ConsumerGroupHeartbeat), and committed offsets.

No sockets and no broker imports: the broker's handlers call GroupCoordinator, which keeps
its durable state in `__consumer_offsets` through the OffsetsLog it is given.
"""

from onceflow.coordinator.group.config import GroupCoordinatorConfig
from onceflow.coordinator.group.coordinator import GroupCoordinator
from onceflow.coordinator.group.log import InMemoryOffsetsLog, OffsetsLog
from onceflow.coordinator.group.offsets import OFFSETS_TOPIC, TopicPartition, partition_for
from onceflow.coordinator.group.results import (
    FetchedOffset,
    GroupOverview,
    GroupSummary,
    JoinMember,
    JoinResult,
    LeaveMemberResult,
    LeaveResult,
    MemberSummary,
    OffsetCommitEntry,
    OffsetFetchResult,
    SyncResult,
)
from onceflow.coordinator.group.state import GroupState, IllegalStateTransition

__all__ = [
    "OFFSETS_TOPIC",
    "FetchedOffset",
    "GroupCoordinator",
    "GroupCoordinatorConfig",
    "GroupOverview",
    "GroupState",
    "GroupSummary",
    "IllegalStateTransition",
    "InMemoryOffsetsLog",
    "JoinMember",
    "JoinResult",
    "LeaveMemberResult",
    "LeaveResult",
    "MemberSummary",
    "OffsetCommitEntry",
    "OffsetFetchResult",
    "OffsetsLog",
    "SyncResult",
    "TopicPartition",
    "partition_for",
]
