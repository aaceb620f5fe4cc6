"""Log and topic keys: where partitions live, how segments roll, retention, compaction and
the broker's disk guards.

The log.* keys here are also the defaults of the topic-level keys (`TopicConfig`).
"""

from __future__ import annotations

from dataclasses import dataclass

from onceflow.config.kinds import (
    BOOL,
    CLEANUP_POLICY,
    DOUBLE,
    HOUR_MS,
    INT,
    LIST,
    LONG,
    LONG_MAX,
    MINUTE_MS,
    NON_EMPTY,
    NON_NEGATIVE,
    OPTIONAL_ADDRESS,
    POSITIVE,
    STRING,
    UNLIMITED_OR_NON_NEGATIVE,
    WEEK_MS,
    Listener,
    at_least,
    between,
    one_of,
)
from onceflow.config.spec import Synonym, invalid, key

_COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
_TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


@dataclass(frozen=True)
class LogKeys:
    """Part of `BrokerConfig`: topics, logs and the data directories."""

    # fmt: off
    log_dirs: tuple[str, ...] = key(
        "log.dirs", LIST, ("./data",), NON_EMPTY,
        "Data directories, comma-separated; each partition lives in one of them.",
        Synonym("log.dir",
                "Legacy single data directory, used when log.dirs is unset."),
    )
    num_partitions: int = key(
        "num.partitions", INT, 1, POSITIVE,
        "Partitions of an auto-created topic.",
    )
    auto_create_topics_enable: bool = key(
        "auto.create.topics.enable", BOOL, True, None,
        "Create a topic when a producer or Metadata request names an unknown one.",
    )
    default_replication_factor: int = key(
        "default.replication.factor", INT, 1, POSITIVE,
        "Replication factor of auto-created topics and of CreateTopics without one; a broker "
        "without zookeeper.connect runs alone, so there it must be 1.",
    )
    delete_topic_enable: bool = key(
        "delete.topic.enable", BOOL, True, None,
        "Allow DeleteTopics.",
    )
    min_insync_replicas: int = key(
        "min.insync.replicas", INT, 1, POSITIVE,
        "In-sync replicas that must hold a write for acks=all: with fewer in the ISR the write "
        "is refused (NOT_ENOUGH_REPLICAS), or fails after its append if the ISR shrank while it "
        "waited (NOT_ENOUGH_REPLICAS_AFTER_APPEND).",
    )
    message_max_bytes: int = key(
        "message.max.bytes", INT, 1_048_588, NON_NEGATIVE,
        "Largest record batch a topic accepts (topic key: max.message.bytes).",
    )
    compression_type: str = key(
        "compression.type", STRING, "producer", one_of(*_COMPRESSION_TYPES),
        "Final compression of a topic's batches; 'producer' keeps what the producer sent.",
    )
    log_segment_bytes: int = key(
        "log.segment.bytes", INT, 1 << 30, at_least(14),
        "A segment is rolled when the next batch would take it past this size.",
    )
    log_roll_ms: int = key(
        "log.roll.ms", LONG, WEEK_MS, POSITIVE,
        "A segment is rolled once its first record is this old.",
        Synonym("log.roll.hours",
                "log.roll.ms in hours, used when log.roll.ms is unset.", INT, scale=HOUR_MS),
    )
    log_roll_jitter_ms: int = key(
        "log.roll.jitter.ms", LONG, 0, NON_NEGATIVE,
        "Random amount subtracted from the roll time so segments do not roll together.",
        Synonym("log.roll.jitter.hours",
                "log.roll.jitter.ms in hours, used when log.roll.jitter.ms is unset.",
                INT, scale=HOUR_MS),
    )
    log_index_interval_bytes: int = key(
        "log.index.interval.bytes", INT, 4096, NON_NEGATIVE,
        "Bytes of log between two offset index entries.",
    )
    log_index_size_max_bytes: int = key(
        "log.index.size.max.bytes", INT, 10 << 20, at_least(4),
        "Largest offset or time index file; a full index rolls the segment.",
    )
    log_retention_ms: int = key(
        "log.retention.ms", LONG, WEEK_MS, UNLIMITED_OR_NON_NEGATIVE,
        "Segments older than this are deleted; -1 keeps them forever.",
        Synonym("log.retention.minutes",
                "log.retention.ms in minutes, used when log.retention.ms is unset.",
                INT, scale=MINUTE_MS),
        Synonym("log.retention.hours",
                "log.retention.ms in hours, used when neither log.retention.ms nor .minutes is "
                "set.", INT, scale=HOUR_MS),
    )
    log_retention_bytes: int = key(
        "log.retention.bytes", LONG, -1, UNLIMITED_OR_NON_NEGATIVE,
        "Oldest segments are deleted while a partition is larger than this; -1 means no limit.",
    )
    log_retention_check_interval_ms: int = key(
        "log.retention.check.interval.ms", LONG, 300_000, POSITIVE,
        "How often retention is enforced.",
    )
    log_segment_delete_delay_ms: int = key(
        "log.segment.delete.delay.ms", LONG, 60_000, NON_NEGATIVE,
        "How long a segment removed by retention stays on disk before its files are deleted.",
    )
    log_cleanup_policy: tuple[str, ...] = key(
        "log.cleanup.policy", CLEANUP_POLICY, ("delete",), None,
        "delete (retention), compact (keep the latest record per key) or compact,delete.",
    )
    log_cleaner_enable: bool = key(
        "log.cleaner.enable", BOOL, True, None,
        "Run the compaction cleaner.",
    )
    log_cleaner_delete_retention_ms: int = key(
        "log.cleaner.delete.retention.ms", LONG, 86_400_000, NON_NEGATIVE,
        "How long compaction keeps tombstones and transaction markers.",
    )
    log_cleaner_min_compaction_lag_ms: int = key(
        "log.cleaner.min.compaction.lag.ms", LONG, 0, NON_NEGATIVE,
        "A record stays uncompacted for at least this long.",
    )
    log_cleaner_max_compaction_lag_ms: int = key(
        "log.cleaner.max.compaction.lag.ms", LONG, LONG_MAX, POSITIVE,
        "A record becomes eligible for compaction after at most this long.",
    )
    log_cleaner_min_cleanable_ratio: float = key(
        "log.cleaner.min.cleanable.ratio", DOUBLE, 0.5, between(0, 1),
        "Dirty share of a log above which it is compacted.",
    )
    log_cleaner_backoff_ms: int = key(
        "log.cleaner.backoff.ms", LONG, 15_000, NON_NEGATIVE,
        "Cleaner sleep when no log needs cleaning.",
    )
    log_flush_interval_messages: int = key(
        "log.flush.interval.messages", LONG, LONG_MAX, POSITIVE,
        "Kafka's fsync every N messages; the default never flushes by count. Onceflow's guarantee "
        "comes from onceflow.fsync.on.ack.",
    )
    log_flush_interval_ms: int = key(
        "log.flush.interval.ms", LONG, LONG_MAX, NON_NEGATIVE,
        "Kafka's fsync after a message has waited this long; the default never flushes by time.",
    )
    log_message_timestamp_type: str = key(
        "log.message.timestamp.type", STRING, "CreateTime", one_of(*_TIMESTAMP_TYPES),
        "CreateTime keeps the producer's timestamps; LogAppendTime stamps the broker's clock.",
    )
    log_message_timestamp_before_max_ms: int = key(
        "log.message.timestamp.before.max.ms", LONG, LONG_MAX, NON_NEGATIVE,
        "How far in the past a CreateTime timestamp may be.",
    )
    log_message_timestamp_after_max_ms: int = key(
        "log.message.timestamp.after.max.ms", LONG, HOUR_MS, NON_NEGATIVE,
        "How far in the future a CreateTime timestamp may be.",
    )
    onceflow_fsync_on_ack: bool = key(
        "onceflow.fsync.on.ack", BOOL, True, None,
        "Answer acks=all produce requests only after the data is fsynced. false is Kafka's page- "
        "cache behaviour: faster, but an acknowledged write can be lost in a power cut.",
    )
    onceflow_log_dir_min_free_bytes: int = key(
        "onceflow.log.dir.min.free.bytes", LONG, 1 << 30, NON_NEGATIVE,
        "Produce requests are refused (KAFKA_STORAGE_ERROR, retriable) while the log dir has "
        "less free space than the smaller of this and onceflow.log.dir.min.free.percent; the "
        "broker's own writes (markers, transaction log, offset commits) go on in the space "
        "below. 0 switches the check off.",
    )
    onceflow_log_dir_min_free_percent: float = key(
        "onceflow.log.dir.min.free.percent", DOUBLE, 5.0, between(0, 100),
        "The free-space threshold as a percentage of the log dir's file system; the smaller "
        "of the two thresholds applies. 0 switches the check off.",
    )
    onceflow_log_dir_ballast_bytes: int = key(
        "onceflow.log.dir.ballast.bytes", LONG, 16 << 20, NON_NEGATIVE,
        "Space reserved in the log dir (the file onceflow-ballast) and released the moment a "
        "write finds the disk full anyway, so the broker's own writes can finish in-flight "
        "transactions; made again once free space is back above the threshold. 0: none.",
    )
    onceflow_metrics_listener: Listener | None = key(  # noqa: RUF009 (a frozen Listener, or None)
        "onceflow.metrics.listener", OPTIONAL_ADDRESS, None, None,
        "HOST:PORT where the broker serves Prometheus metrics at http://HOST:PORT/metrics. "
        "Unset (the default): no metrics endpoint.",
    )
    # fmt: on


def check_compaction_lag(cfg: LogKeys) -> None:
    if cfg.log_cleaner_min_compaction_lag_ms > cfg.log_cleaner_max_compaction_lag_ms:
        raise invalid(
            "log.cleaner.min.compaction.lag.ms",
            str(cfg.log_cleaner_min_compaction_lag_ms),
            f"at most log.cleaner.max.compaction.lag.ms ({cfg.log_cleaner_max_compaction_lag_ms})",
        )
