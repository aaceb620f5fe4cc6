"""The group coordinator's settings, with Kafka's defaults, units last."""

from __future__ import annotations

from dataclasses import dataclass

from onceflow.config.groups import GroupKeys
from onceflow.config.kinds import MINUTE_MS

# A member that has not finished its first join cannot heartbeat. Kafka times its parked
# JoinGroup out after five minutes so defunct joiners cannot stall rebalances for ever.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000

# group.consumer.migration.policy: what each value allows, as (upgrade, downgrade).
# Upgrade turns a non-empty classic group into a consumer-protocol group when a KIP-848
# member joins it; downgrade turns it back when its last KIP-848 member leaves.
MIGRATION_POLICIES: dict[str, tuple[bool, bool]] = {
    "disabled": (False, False),
    "upgrade": (True, False),
    "downgrade": (False, True),
    "bidirectional": (True, True),
}


@dataclass(frozen=True, slots=True)
class GroupCoordinatorConfig:
    """The group settings the coordinator reads, defaulting to the broker keys' defaults
    (declared once, in onceflow.config.groups); `from_broker_config` picks a broker's."""

    offsets_topic_num_partitions: int = GroupKeys.offsets_topic_num_partitions
    group_min_session_timeout_ms: int = GroupKeys.group_min_session_timeout_ms
    group_max_session_timeout_ms: int = GroupKeys.group_max_session_timeout_ms
    group_initial_rebalance_delay_ms: int = GroupKeys.group_initial_rebalance_delay_ms
    group_max_size: int = GroupKeys.group_max_size
    # offsets.retention.minutes, in ms
    offsets_retention_ms: int = GroupKeys.offsets_retention_minutes * MINUTE_MS
    offsets_retention_check_interval_ms: int = GroupKeys.offsets_retention_check_interval_ms
    offset_metadata_max_bytes: int = GroupKeys.offset_metadata_max_bytes
    # The consumer protocol (KIP-848): Kafka's group.consumer.* settings.
    consumer_session_timeout_ms: int = GroupKeys.group_consumer_session_timeout_ms
    consumer_heartbeat_interval_ms: int = GroupKeys.group_consumer_heartbeat_interval_ms
    consumer_assignors: tuple[str, ...] = GroupKeys.group_consumer_assignors
    consumer_max_size: int = GroupKeys.group_consumer_max_size
    consumer_migration_policy: str = GroupKeys.group_consumer_migration_policy

    def __post_init__(self) -> None:
        if self.consumer_migration_policy not in MIGRATION_POLICIES:
            raise ValueError(
                "group.consumer.migration.policy must be one of " + ", ".join(MIGRATION_POLICIES)
            )
        if self.offsets_topic_num_partitions <= 0:
            raise ValueError("offsets.topic.num.partitions must be positive")
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise ValueError("group.min.session.timeout.ms exceeds group.max.session.timeout.ms")

    @property
    def upgrade_allowed(self) -> bool:
        return MIGRATION_POLICIES[self.consumer_migration_policy][0]

    @property
    def downgrade_allowed(self) -> bool:
        return MIGRATION_POLICIES[self.consumer_migration_policy][1]

    @classmethod
    def from_broker_config(cls, config: GroupKeys) -> GroupCoordinatorConfig:
        """Pick the group settings out of a broker's config (its group keys)."""
        return cls(
            offsets_topic_num_partitions=config.offsets_topic_num_partitions,
            group_min_session_timeout_ms=config.group_min_session_timeout_ms,
            group_max_session_timeout_ms=config.group_max_session_timeout_ms,
            group_initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            offsets_retention_ms=config.offsets_retention_minutes * MINUTE_MS,
            group_max_size=config.group_max_size,
            offsets_retention_check_interval_ms=config.offsets_retention_check_interval_ms,
            offset_metadata_max_bytes=config.offset_metadata_max_bytes,
            consumer_session_timeout_ms=config.group_consumer_session_timeout_ms,
            consumer_heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms,
            consumer_assignors=tuple(config.group_consumer_assignors),
            consumer_max_size=config.group_consumer_max_size,
            consumer_migration_policy=config.group_consumer_migration_policy,
        )
