"""The group coordinator's settings, with Kafka's defaults, units last."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
    offsets_topic_num_partitions: int = 50
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3_000
    group_max_size: int = 2**31 - 1
    offsets_retention_ms: int = 7 * 24 * 60 * 60_000  # offsets.retention.minutes, in ms
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4_096
    # The consumer protocol (KIP-848): Kafka's group.consumer.* settings.
    consumer_session_timeout_ms: int = 45_000
    consumer_heartbeat_interval_ms: int = 5_000
    consumer_assignors: tuple[str, ...] = ("uniform", "range")
    consumer_max_size: int = 2**31 - 1
    consumer_migration_policy: str = "bidirectional"

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
    def from_broker_config(cls, config: Any) -> GroupCoordinatorConfig:
        """Pick the group settings out of a BrokerConfig (duck-typed: any object will do).

        The first five are required; the rest fall back to Kafka's defaults when the broker
        config does not define them.
        """
        defaults = cls()
        return cls(
            offsets_topic_num_partitions=config.offsets_topic_num_partitions,
            group_min_session_timeout_ms=config.group_min_session_timeout_ms,
            group_max_session_timeout_ms=config.group_max_session_timeout_ms,
            group_initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            offsets_retention_ms=config.offsets_retention_minutes * 60_000,
            group_max_size=getattr(config, "group_max_size", defaults.group_max_size),
            offsets_retention_check_interval_ms=getattr(
                config,
                "offsets_retention_check_interval_ms",
                defaults.offsets_retention_check_interval_ms,
            ),
            offset_metadata_max_bytes=getattr(
                config, "offset_metadata_max_bytes", defaults.offset_metadata_max_bytes
            ),
            consumer_session_timeout_ms=getattr(
                config, "group_consumer_session_timeout_ms", defaults.consumer_session_timeout_ms
            ),
            consumer_heartbeat_interval_ms=getattr(
                config,
                "group_consumer_heartbeat_interval_ms",
                defaults.consumer_heartbeat_interval_ms,
            ),
            consumer_assignors=tuple(
                getattr(config, "group_consumer_assignors", defaults.consumer_assignors)
            ),
            consumer_max_size=getattr(
                config, "group_consumer_max_size", defaults.consumer_max_size
            ),
            consumer_migration_policy=getattr(
                config, "group_consumer_migration_policy", defaults.consumer_migration_policy
            ),
        )
