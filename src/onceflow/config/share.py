"""Share group keys (KIP-932, Kafka 4.2): the share coordinator's `__share_group_state`,
share-group membership and the share-partitions' acquisition locks and delivery counts.
"""

from __future__ import annotations

from dataclasses import dataclass

from onceflow.config.kinds import INT, POSITIVE
from onceflow.config.spec import invalid, key


@dataclass(frozen=True)
class ShareKeys:
    """Part of `BrokerConfig`: share groups' settings."""

    # fmt: off
    share_coordinator_state_topic_num_partitions: int = key(
        "share.coordinator.state.topic.num.partitions", INT, 50, POSITIVE,
        "Partitions of __share_group_state; fixed once the topic exists.",
    )
    share_coordinator_state_topic_replication_factor: int = key(
        "share.coordinator.state.topic.replication.factor", INT, 3, POSITIVE,
        "Replication factor of __share_group_state (capped at the live brokers unless set).",
    )
    share_coordinator_state_topic_min_isr: int = key(
        "share.coordinator.state.topic.min.isr", INT, 2, POSITIVE,
        "min.insync.replicas of __share_group_state.",
    )
    share_coordinator_state_topic_segment_bytes: int = key(
        "share.coordinator.state.topic.segment.bytes", INT, 104_857_600, POSITIVE,
        "Segment size of __share_group_state.",
    )
    group_share_session_timeout_ms: int = key(
        "group.share.session.timeout.ms", INT, 45_000, POSITIVE,
        "A share-group member that has not heartbeated for this long is removed and the "
        "records it holds are released.",
    )
    group_share_min_session_timeout_ms: int = key(
        "group.share.min.session.timeout.ms", INT, 45_000, POSITIVE,
        "Lower bound of group.share.session.timeout.ms.",
    )
    group_share_max_session_timeout_ms: int = key(
        "group.share.max.session.timeout.ms", INT, 60_000, POSITIVE,
        "Upper bound of group.share.session.timeout.ms.",
    )
    group_share_heartbeat_interval_ms: int = key(
        "group.share.heartbeat.interval.ms", INT, 5_000, POSITIVE,
        "How often share-group members heartbeat (told in every heartbeat response).",
    )
    group_share_min_heartbeat_interval_ms: int = key(
        "group.share.min.heartbeat.interval.ms", INT, 5_000, POSITIVE,
        "Lower bound of group.share.heartbeat.interval.ms.",
    )
    group_share_max_heartbeat_interval_ms: int = key(
        "group.share.max.heartbeat.interval.ms", INT, 15_000, POSITIVE,
        "Upper bound of group.share.heartbeat.interval.ms.",
    )
    group_share_max_size: int = key(
        "group.share.max.size", INT, 200, POSITIVE,
        "Most members a share group may have (GROUP_MAX_SIZE_REACHED beyond).",
    )
    group_share_record_lock_duration_ms: int = key(
        "group.share.record.lock.duration.ms", INT, 30_000, POSITIVE,
        "How long a consumer holds the records it acquired before they are delivered again; "
        "the default of a group's share.record.lock.duration.ms.",
    )
    group_share_min_record_lock_duration_ms: int = key(
        "group.share.min.record.lock.duration.ms", INT, 15_000, POSITIVE,
        "Lower bound of the record lock duration.",
    )
    group_share_max_record_lock_duration_ms: int = key(
        "group.share.max.record.lock.duration.ms", INT, 60_000, POSITIVE,
        "Upper bound of the record lock duration.",
    )
    group_share_delivery_count_limit: int = key(
        "group.share.delivery.count.limit", INT, 5, POSITIVE,
        "Deliveries of a record before it is archived (a poison record); the default of a "
        "group's share.delivery.count.limit.",
    )
    group_share_min_delivery_count_limit: int = key(
        "group.share.min.delivery.count.limit", INT, 2, POSITIVE,
        "Lower bound of the delivery count limit.",
    )
    group_share_max_delivery_count_limit: int = key(
        "group.share.max.delivery.count.limit", INT, 10, POSITIVE,
        "Upper bound of the delivery count limit.",
    )
    group_share_partition_max_record_locks: int = key(
        "group.share.partition.max.record.locks", INT, 2000, POSITIVE,
        "Most records of one share-partition acquired at once: its in-flight window.",
    )
    # fmt: on


def check_share_bounds(cfg: ShareKeys) -> None:
    """Each share-group default lies within its min and max, as Kafka checks."""
    for name, low, value, high in (
        (
            "session.timeout.ms",
            cfg.group_share_min_session_timeout_ms,
            cfg.group_share_session_timeout_ms,
            cfg.group_share_max_session_timeout_ms,
        ),
        (
            "heartbeat.interval.ms",
            cfg.group_share_min_heartbeat_interval_ms,
            cfg.group_share_heartbeat_interval_ms,
            cfg.group_share_max_heartbeat_interval_ms,
        ),
        (
            "record.lock.duration.ms",
            cfg.group_share_min_record_lock_duration_ms,
            cfg.group_share_record_lock_duration_ms,
            cfg.group_share_max_record_lock_duration_ms,
        ),
        (
            "delivery.count.limit",
            cfg.group_share_min_delivery_count_limit,
            cfg.group_share_delivery_count_limit,
            cfg.group_share_max_delivery_count_limit,
        ),
    ):
        if not low <= value <= high:
            raise invalid(
                f"group.share.{name}",
                str(value),
                f"between group.share.min.{name} ({low}) and group.share.max.{name} ({high})",
            )
