"""Group coordinator keys: __consumer_offsets, classic groups and consumer-protocol (KIP-848)
groups.
"""

from __future__ import annotations

from dataclasses import dataclass

from onceflow.config.kinds import (
    INT,
    INT_MAX,
    LIST,
    LONG,
    LOWER_STRING,
    NON_EMPTY,
    NON_NEGATIVE,
    POSITIVE,
    one_of,
)
from onceflow.config.spec import invalid, key


@dataclass(frozen=True)
class GroupKeys:
    """Part of `BrokerConfig`: the group coordinator's settings."""

    # fmt: off
    offsets_topic_num_partitions: int = key(
        "offsets.topic.num.partitions", INT, 50, POSITIVE,
        "Partitions of __consumer_offsets; fixed once the topic exists.",
    )
    offsets_topic_segment_bytes: int = key(
        "offsets.topic.segment.bytes", INT, 104_857_600, POSITIVE,
        "Segment size of __consumer_offsets.",
    )
    offsets_retention_minutes: int = key(
        "offsets.retention.minutes", INT, 10_080, POSITIVE,
        "Committed offsets of an empty group expire after this long.",
    )
    offsets_retention_check_interval_ms: int = key(
        "offsets.retention.check.interval.ms", LONG, 600_000, POSITIVE,
        "How often expired offsets are removed.",
    )
    offset_metadata_max_bytes: int = key(
        "offset.metadata.max.bytes", INT, 4096, POSITIVE,
        "Longest metadata an offset commit may carry (OFFSET_METADATA_TOO_LARGE beyond).",
    )
    offsets_commit_timeout_ms: int = key(
        "offsets.commit.timeout.ms", INT, 5000, POSITIVE,
        "An offset commit fails if its append to __consumer_offsets takes longer.",
    )
    group_min_session_timeout_ms: int = key(
        "group.min.session.timeout.ms", INT, 6000, NON_NEGATIVE,
        "Shortest session timeout a consumer may ask for.",
    )
    group_max_session_timeout_ms: int = key(
        "group.max.session.timeout.ms", INT, 1_800_000, NON_NEGATIVE,
        "Longest session timeout a consumer may ask for.",
    )
    group_initial_rebalance_delay_ms: int = key(
        "group.initial.rebalance.delay.ms", INT, 3000, NON_NEGATIVE,
        "How long a new group waits for more members before its first rebalance.",
    )
    group_max_size: int = key(
        "group.max.size", INT, INT_MAX, POSITIVE,
        "Most members a classic group may have.",
    )
    group_consumer_session_timeout_ms: int = key(
        "group.consumer.session.timeout.ms", INT, 45_000, POSITIVE,
        "A consumer-protocol member (KIP-848) that has not heartbeated for this long is "
        "removed and its partitions reassigned.",
    )
    group_consumer_min_session_timeout_ms: int = key(
        "group.consumer.min.session.timeout.ms", INT, 45_000, POSITIVE,
        "Lower bound of group.consumer.session.timeout.ms.",
    )
    group_consumer_max_session_timeout_ms: int = key(
        "group.consumer.max.session.timeout.ms", INT, 60_000, POSITIVE,
        "Upper bound of group.consumer.session.timeout.ms.",
    )
    group_consumer_heartbeat_interval_ms: int = key(
        "group.consumer.heartbeat.interval.ms", INT, 5_000, POSITIVE,
        "How often consumer-protocol members heartbeat (told in every heartbeat response).",
    )
    group_consumer_min_heartbeat_interval_ms: int = key(
        "group.consumer.min.heartbeat.interval.ms", INT, 5_000, POSITIVE,
        "Lower bound of group.consumer.heartbeat.interval.ms.",
    )
    group_consumer_max_heartbeat_interval_ms: int = key(
        "group.consumer.max.heartbeat.interval.ms", INT, 15_000, POSITIVE,
        "Upper bound of group.consumer.heartbeat.interval.ms.",
    )
    group_consumer_assignors: tuple[str, ...] = key(
        "group.consumer.assignors", LIST, ("uniform", "range"), NON_EMPTY,
        "Server-side assignors of consumer-protocol groups (uniform, range); the first is "
        "the default, a member picks another with group.remote.assignor.",
    )
    group_consumer_max_size: int = key(
        "group.consumer.max.size", INT, INT_MAX, POSITIVE,
        "Most members a consumer-protocol group may have.",
    )
    group_consumer_migration_policy: str = key(
        "group.consumer.migration.policy", LOWER_STRING,
        "bidirectional", one_of("disabled", "upgrade", "downgrade", "bidirectional"),
        "Whether a non-empty group may change protocol online: upgrade (a classic group "
        "becomes a consumer-protocol group when a KIP-848 member joins), downgrade (back "
        "when its last KIP-848 member leaves), bidirectional (both) or disabled.",
    )
    # fmt: on


def check_session_timeouts(cfg: GroupKeys) -> None:
    if cfg.group_min_session_timeout_ms > cfg.group_max_session_timeout_ms:
        raise invalid(
            "group.min.session.timeout.ms",
            str(cfg.group_min_session_timeout_ms),
            f"at most group.max.session.timeout.ms ({cfg.group_max_session_timeout_ms})",
        )


def check_consumer_group_timeouts(cfg: GroupKeys) -> None:
    """Kafka's bounds of the consumer protocol's session timeout and heartbeat interval."""
    for name, low, value, high in (
        (
            "session.timeout.ms",
            cfg.group_consumer_min_session_timeout_ms,
            cfg.group_consumer_session_timeout_ms,
            cfg.group_consumer_max_session_timeout_ms,
        ),
        (
            "heartbeat.interval.ms",
            cfg.group_consumer_min_heartbeat_interval_ms,
            cfg.group_consumer_heartbeat_interval_ms,
            cfg.group_consumer_max_heartbeat_interval_ms,
        ),
    ):
        if not low <= value <= high:
            raise invalid(
                f"group.consumer.{name}",
                str(value),
                f"between group.consumer.min.{name} ({low}) and group.consumer.max.{name} ({high})",
            )
    if cfg.group_consumer_heartbeat_interval_ms >= cfg.group_consumer_session_timeout_ms:
        raise invalid(
            "group.consumer.heartbeat.interval.ms",
            str(cfg.group_consumer_heartbeat_interval_ms),
            "less than group.consumer.session.timeout.ms "
            f"({cfg.group_consumer_session_timeout_ms})",
        )
    unknown = [a for a in cfg.group_consumer_assignors if a not in ("uniform", "range")]
    if unknown:
        raise invalid("group.consumer.assignors", ",".join(unknown), "uniform or range")
