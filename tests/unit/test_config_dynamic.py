"""onceflow.config's runtime changes: IncrementalAlterConfigs' operations on topic overrides
and on dynamic broker settings, and the dynamic broker configs layered over the static
ones with Kafka's precedence, as DescribeConfigs then shows them."""

from __future__ import annotations

import re

import pytest

from onceflow.config import (
    DYNAMIC_BROKER_KEYS,
    AlterConfigOp,
    BrokerConfig,
    ConfigError,
    ConfigSource,
    alter_broker_settings,
    alter_topic_overrides,
    broker_config_from_properties,
    check_dynamic_broker_config,
    describe_broker_config,
    describe_topic_config,
)

SET, DELETE, APPEND, SUBTRACT = (
    AlterConfigOp.SET,
    AlterConfigOp.DELETE,
    AlterConfigOp.APPEND,
    AlterConfigOp.SUBTRACT,
)
MINUTE_MS = 60_000


def static(**properties: str) -> BrokerConfig:
    cfg, warnings = broker_config_from_properties(properties)
    assert not warnings
    return cfg


def test_topic_operations_follow_kafka() -> None:
    cfg = static(**{"log.cleanup.policy": "compact"})
    topic = cfg.topic_config({})
    # A list key without an override starts from the value the topic has (the broker's).
    first: list[tuple[str, AlterConfigOp, str | None]] = [
        ("cleanup.policy", APPEND, "delete,compact"),
        ("retention.ms", SET, "5"),
    ]
    assert alter_topic_overrides(topic, {}, first) == {
        "cleanup.policy": "compact,delete",
        "retention.ms": "5",
    }
    current = {"cleanup.policy": "compact,delete", "retention.ms": "5"}
    ops: list[tuple[str, AlterConfigOp, str | None]] = [
        ("cleanup.policy", SUBTRACT, "compact"),
        ("retention.ms", DELETE, None),
    ]
    assert alter_topic_overrides(topic, current, ops) == {"cleanup.policy": "delete"}
    with pytest.raises(ConfigError, match=re.escape("Can't SUBTRACT to key segment.ms because")):
        alter_topic_overrides(topic, {}, [("segment.ms", SUBTRACT, "1")])
    with pytest.raises(ConfigError, match="APPEND to key nope because its type"):
        alter_topic_overrides(topic, {}, [("nope", APPEND, "1")])


def test_broker_operations_follow_kafka() -> None:
    cfg = static()
    ops = [("log.cleanup.policy", APPEND, "compact"), ("log.retention.ms", SET, "1")]
    assert alter_broker_settings(cfg, {"log.roll.ms": "9"}, ops) == {
        "log.roll.ms": "9",
        "log.cleanup.policy": "delete,compact",
        "log.retention.ms": "1",
    }
    with pytest.raises(ConfigError, match="Config value subtract is not allowed for config key"):
        alter_broker_settings(cfg, {}, [("log.retention.ms", SUBTRACT, "1")])


def test_only_the_topic_defaults_are_dynamic() -> None:
    assert {"log.retention.ms", "log.retention.hours", "message.max.bytes"} <= DYNAMIC_BROKER_KEYS
    assert {"min.insync.replicas", "log.cleanup.policy", "compression.type"} <= DYNAMIC_BROKER_KEYS
    assert not {"num.partitions", "log.dirs", "listeners", "node.id"} & DYNAMIC_BROKER_KEYS
    check_dynamic_broker_config({"log.segment.bytes": "4096"})
    cases = {
        "Cannot update these configs dynamically: Set(num.partitions, num.io.threads)": {
            "log.retention.ms": "1",
            "num.partitions": "3",
            "num.io.threads": "8",  # Kafka's, ignored by Onceflow: fixed all the same
        },
        "Cannot update these configs dynamically: Set(listener.name.a.ssl.keystore.type)": {
            "listener.name.a.ssl.keystore.type": "PEM"
        },
        "Unknown broker config name: my.plugin.key": {"my.plugin.key": "1"},
        "Invalid value '-5' for configuration log.segment.bytes": {"log.segment.bytes": "-5"},
    }
    for words, settings in cases.items():
        with pytest.raises(ConfigError) as caught:
            check_dynamic_broker_config(settings)
        assert str(caught.value).startswith(words)


def test_dynamic_layers_take_kafkas_precedence() -> None:
    base = static(**{"log.retention.hours": "10", "min.insync.replicas": "2"})
    assert base.log_retention_ms == 600 * MINUTE_MS
    default = {"log.retention.minutes": "30", "min.insync.replicas": "1"}
    own = {"log.retention.hours": "2", "log.retention.ms": "1000"}
    cfg = base.with_dynamic(default, own)
    assert cfg.log_retention_ms == 1000  # this broker's, and .ms before .hours
    assert cfg.min_insync_replicas == 1  # the cluster default over server.properties
    assert cfg.topic_config({}).retention_ms == 1000
    assert cfg.topic_config({"retention.ms": "7"}).retention_ms == 7  # the topic's own wins
    assert base.with_dynamic(default, {}).log_retention_ms == 30 * MINUTE_MS
    assert base.with_dynamic({}, {}) == base
    assert cfg.settings == base.settings  # what server.properties said is kept apart


def test_inconsistent_layers_are_refused() -> None:
    base = static()
    with pytest.raises(ConfigError, match=re.escape("at most log.cleaner.max.compaction.lag.ms")):
        base.with_dynamic(
            {"log.cleaner.min.compaction.lag.ms": "5"},
            {"log.cleaner.max.compaction.lag.ms": "4"},
        )


def test_describe_shows_each_layer_as_a_synonym() -> None:
    base = static(**{"log.retention.hours": "10"})
    cfg = base.with_dynamic({"log.retention.minutes": "30"}, {"log.retention.ms": "1000"})
    [topic_entry] = [
        e for e in describe_topic_config(cfg.topic_config({}), {}, broker=cfg)
        if e.name == "retention.ms"
    ]  # fmt: skip
    assert (topic_entry.value, topic_entry.source) == ("1000", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert [(s.name, s.value, s.source) for s in topic_entry.synonyms] == [
        ("log.retention.ms", "1000", ConfigSource.DYNAMIC_BROKER_CONFIG),
        ("log.retention.minutes", "30", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.retention.hours", "10", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.ms", "604800000", ConfigSource.DEFAULT_CONFIG),
    ]
    entries = {e.name: e for e in describe_broker_config(cfg)}
    minutes = entries["log.retention.minutes"]
    assert (minutes.value, minutes.source, minutes.read_only) == (
        "30",
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
        False,
    )
    assert entries["log.retention.ms"].synonyms[0].source == ConfigSource.DYNAMIC_BROKER_CONFIG
    assert entries["num.partitions"].read_only
