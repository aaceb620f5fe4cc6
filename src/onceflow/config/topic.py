"""Topic-level keys and `TopicConfig`, a topic's effective configuration.

Each topic key is declared once, as a `TopicConfig` field naming the broker key that supplies
its default (retention.ms falls back to log.retention.ms). Its default, parsing, range check
and synonyms are that broker key's, read from `LogKeys`, so none is written twice; the field's
annotation (which mypy needs) is checked against the broker attribute's at import.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from onceflow.config.kinds import LIST
from onceflow.config.log import LogKeys
from onceflow.config.spec import (
    Check,
    ConfigError,
    Key,
    Kind,
    group_keys,
    invalid,
    keys_of,
    parse_checked,
    render,
    suggestion,
)

_METADATA = "onceflow.config.topic_key"
_LOG_KEY_GROUPS = group_keys(keys_of(LogKeys))
_LOG_KEYS_BY_NAME = {row.name: row for row in keys_of(LogKeys)}


@dataclass(frozen=True)
class _TopicDeclared:
    name: str
    broker_key: str
    doc: str


def _topic(name: str, broker_key: str, doc: str) -> Any:
    """Declare a topic key as a `TopicConfig` field whose default is `broker_key`'s.

    Typed Any because the default is looked up, not written; `TOPIC_KEYS` below checks that the
    field's annotation is the broker attribute's.
    """
    default = _LOG_KEYS_BY_NAME[broker_key].default
    return dataclasses.field(
        default=default, metadata={_METADATA: _TopicDeclared(name, broker_key, doc)}
    )


@dataclass(frozen=True)
class _TopicOnlyDeclared:
    name: str
    kind: Kind[Any]
    check: Check | None
    doc: str


def _topic_only(name: str, kind: Kind[Any], default: Any, check: Check | None, doc: str) -> Any:
    """Declare a topic key that no broker key supplies a default for (Kafka's throttled
    replica lists): its type, check and default are its own."""
    return dataclasses.field(
        default=default, metadata={_METADATA: _TopicOnlyDeclared(name, kind, check, doc)}
    )


def _is_replica_list(items: tuple[str, ...]) -> bool:
    if items == ("*",):
        return True
    for item in items:
        partition, colon, broker = item.partition(":")
        if not (colon and partition.strip().isdigit() and broker.strip().isdigit()):
            return False
    return True


#: Kafka's ThrottledReplicaListValidator.
REPLICA_LIST = Check(
    "the literal '*' or a list of replicas in the following format: "
    "[partitionId]:[brokerId],[partitionId]:[brokerId],...",
    _is_replica_list,
)


@dataclass(frozen=True)
class TopicKey:
    """One topic-level key, its `TopicConfig` attribute and the broker keys it falls back to."""

    name: str
    attr: str
    doc: str
    #: The broker keys this topic key falls back to, highest precedence first; none for a
    #: topic-only key, which then has its own (`own`).
    broker_keys: tuple[Key, ...]
    own: Key | None = None

    @property
    def primary(self) -> Key:
        """The key whose type, check and default this topic key has."""
        if self.broker_keys:
            return self.broker_keys[0]
        assert self.own is not None, self.name
        return self.own

    @property
    def kind(self) -> Kind[Any]:
        return self.primary.kind

    @property
    def check(self) -> Check | None:
        return self.primary.check

    def parse(self, raw: str) -> Any:
        """The parsed, range-checked value of `raw`; ConfigError naming this key otherwise."""
        return parse_checked(self.name, self.kind, self.check, raw)


@dataclass(frozen=True)
class TopicConfig:
    """A topic's effective configuration; see `TOPIC_CONFIG_DOCS` for each key.

    `overrides` holds the topic-level keys set on this topic (normalised, sorted by key). That
    is what the broker persists; `BrokerConfig.topic_config(overrides_dict())` rebuilds an equal
    TopicConfig, picking up the current broker defaults for everything else.
    """

    # fmt: off
    cleanup_policy: tuple[str, ...] = _topic(
        "cleanup.policy", "log.cleanup.policy",
        "delete (retention), compact (latest record per key) or compact,delete.",
    )
    compression_type: str = _topic(
        "compression.type", "compression.type",
        "Final compression of stored batches; 'producer' keeps the producer's.",
    )
    delete_retention_ms: int = _topic(
        "delete.retention.ms", "log.cleaner.delete.retention.ms",
        "How long compaction keeps tombstones and transaction markers.",
    )
    file_delete_delay_ms: int = _topic(
        "file.delete.delay.ms", "log.segment.delete.delay.ms",
        "Delay before a removed segment's files are deleted.",
    )
    flush_messages: int = _topic(
        "flush.messages", "log.flush.interval.messages",
        "fsync every N messages (Kafka's knob; see onceflow.fsync.on.ack).",
    )
    flush_ms: int = _topic(
        "flush.ms", "log.flush.interval.ms",
        "fsync after a message waited this long (Kafka's knob; see onceflow.fsync.on.ack).",
    )
    index_interval_bytes: int = _topic(
        "index.interval.bytes", "log.index.interval.bytes",
        "Bytes of log between offset index entries.",
    )
    max_compaction_lag_ms: int = _topic(
        "max.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms",
        "A record becomes eligible for compaction after at most this long.",
    )
    max_message_bytes: int = _topic(
        "max.message.bytes", "message.max.bytes",
        "Largest record batch the topic accepts.",
    )
    message_timestamp_after_max_ms: int = _topic(
        "message.timestamp.after.max.ms", "log.message.timestamp.after.max.ms",
        "How far in the future a CreateTime may be.",
    )
    message_timestamp_before_max_ms: int = _topic(
        "message.timestamp.before.max.ms", "log.message.timestamp.before.max.ms",
        "How far in the past a CreateTime may be.",
    )
    message_timestamp_type: str = _topic(
        "message.timestamp.type", "log.message.timestamp.type",
        "CreateTime (producer's clock) or LogAppendTime (broker's clock).",
    )
    min_cleanable_dirty_ratio: float = _topic(
        "min.cleanable.dirty.ratio", "log.cleaner.min.cleanable.ratio",
        "Dirty share of the log above which it is compacted.",
    )
    min_compaction_lag_ms: int = _topic(
        "min.compaction.lag.ms", "log.cleaner.min.compaction.lag.ms",
        "A record stays uncompacted for at least this long.",
    )
    min_insync_replicas: int = _topic(
        "min.insync.replicas", "min.insync.replicas",
        "Replicas that must hold a write for acks=all.",
    )
    retention_bytes: int = _topic(
        "retention.bytes", "log.retention.bytes",
        "Per-partition size above which the oldest segments are deleted; -1: no limit.",
    )
    retention_ms: int = _topic(
        "retention.ms", "log.retention.ms",
        "Age after which segments are deleted; -1: keep forever.",
    )
    segment_bytes: int = _topic(
        "segment.bytes", "log.segment.bytes",
        "Segment size that triggers a roll.",
    )
    segment_index_bytes: int = _topic(
        "segment.index.bytes", "log.index.size.max.bytes",
        "Largest offset or time index file of a segment.",
    )
    segment_jitter_ms: int = _topic(
        "segment.jitter.ms", "log.roll.jitter.ms",
        "Random amount subtracted from segment.ms.",
    )
    segment_ms: int = _topic(
        "segment.ms", "log.roll.ms",
        "Age of a segment's first record that triggers a roll.",
    )
    leader_replication_throttled_replicas: tuple[str, ...] = _topic_only(
        "leader.replication.throttled.replicas", LIST, (), REPLICA_LIST,
        "Replicas (partition:broker, or * for all) whose leader's sends to followers outside "
        "the ISR count against that broker's leader.replication.throttled.rate.",
    )
    follower_replication_throttled_replicas: tuple[str, ...] = _topic_only(
        "follower.replication.throttled.replicas", LIST, (), REPLICA_LIST,
        "Replicas (partition:broker, or * for all) whose copying, outside the ISR, counts "
        "against that broker's follower.replication.throttled.rate.",
    )
    # fmt: on
    overrides: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        for spec in TOPIC_KEYS:
            value = getattr(self, spec.attr)
            if spec.check is not None and not spec.check.ok(value):
                raise invalid(spec.name, render(spec.kind, value) or "", spec.check.expected)
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise invalid(
                "min.compaction.lag.ms",
                str(self.min_compaction_lag_ms),
                f"at most max.compaction.lag.ms ({self.max_compaction_lag_ms})",
            )

    @property
    def compact_enabled(self) -> bool:
        """True when the cleaner compacts this topic."""
        return "compact" in self.cleanup_policy

    @property
    def delete_enabled(self) -> bool:
        """True when retention (time and size) deletes this topic's old segments."""
        return "delete" in self.cleanup_policy

    def with_overrides(self, overrides: Mapping[str, str | None]) -> TopicConfig:
        """This config with topic-level keys set; raises ConfigError on an unknown key or bad value.

        New overrides are added to (and win over) the ones already recorded. A None value (a
        null in CreateTopics) is rejected, as Kafka rejects it.
        """
        changes: dict[str, Any] = {}
        recorded = dict(self.overrides)
        for key, raw in overrides.items():
            spec = TOPIC_KEYS_BY_NAME.get(key)
            if spec is None:
                hint = suggestion(key, TOPIC_KEYS_BY_NAME)
                raise ConfigError(f"Unknown topic config name: {key}{hint}", key)
            if raw is None:
                raise ConfigError(f"Null value for topic config {key}: expected a value", key)
            value = spec.parse(raw)
            changes[spec.attr] = value
            recorded[key] = spec.kind.render(value)
        return dataclasses.replace(self, **changes, overrides=tuple(sorted(recorded.items())))

    def overrides_dict(self) -> dict[str, str]:
        """The topic-level overrides, Kafka key to normalised string: what to persist."""
        return dict(self.overrides)


def _topic_keys() -> tuple[TopicKey, ...]:
    log_fields = {f.name: f for f in dataclasses.fields(LogKeys)}
    rows = []
    for f in dataclasses.fields(TopicConfig):
        declared = f.metadata.get(_METADATA)
        if isinstance(declared, _TopicOnlyDeclared):
            own = Key(declared.name, f.name, declared.kind, declared.check, declared.doc, f.default)
            rows.append(TopicKey(declared.name, f.name, declared.doc, (), own))
            continue
        if not isinstance(declared, _TopicDeclared):
            continue
        primary = _LOG_KEYS_BY_NAME[declared.broker_key]
        if f.type != log_fields[primary.attr].type:
            raise TypeError(f"TopicConfig.{f.name} must be typed as LogKeys.{primary.attr}")
        rows.append(TopicKey(declared.name, f.name, declared.doc, _LOG_KEY_GROUPS[primary.attr]))
    return tuple(sorted(rows, key=lambda row: row.name))  # listed by name, as Kafka lists them


TOPIC_KEYS: tuple[TopicKey, ...] = _topic_keys()
TOPIC_KEYS_BY_NAME: dict[str, TopicKey] = {row.name: row for row in TOPIC_KEYS}

#: Every topic-level key Onceflow understands.
TOPIC_CONFIG_KEYS: frozenset[str] = frozenset(TOPIC_KEYS_BY_NAME)
