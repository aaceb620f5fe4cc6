"""onceflow.config's key declarations: one place per key, and the lists config keeps apart
from onceflow.security (so config stays a leaf) still agree with what security implements."""

from __future__ import annotations

import dataclasses
import importlib

import pytest

from onceflow.config import AUTHORIZER_CLASS_NAMES, BrokerConfig, ConfigError, TopicConfig
from onceflow.config.broker import BROKER_KEY_GROUPS, BROKER_KEYS_BY_NAME
from onceflow.config.security import SASL_MECHANISMS
from onceflow.config.topic import TOPIC_KEYS_BY_NAME
from onceflow.security.sasl import SUPPORTED_MECHANISMS
from onceflow.storage.partition_log import LogConfig


def test_sasl_mechanisms_are_the_ones_security_implements() -> None:
    assert SASL_MECHANISMS == SUPPORTED_MECHANISMS


def test_onceflow_authorizer_class_name_names_the_authorizer() -> None:
    for name in AUTHORIZER_CLASS_NAMES:
        if name.startswith("onceflow."):
            module, _, attr = name.rpartition(".")
            assert isinstance(getattr(importlib.import_module(module), attr), type)


def test_a_key_row_carries_everything_its_field_declares() -> None:
    row = BROKER_KEYS_BY_NAME["log.retention.ms"]
    assert (row.attr, row.default, row.primary) == ("log_retention_ms", 7 * 24 * 3_600_000, True)
    assert row.default == BrokerConfig().log_retention_ms
    names = [k.name for k in BROKER_KEY_GROUPS["log_retention_ms"]]
    assert names == ["log.retention.ms", "log.retention.minutes", "log.retention.hours"]
    hours = BROKER_KEYS_BY_NAME["log.retention.hours"]
    assert (hours.primary, hours.default, hours.effective(2)) == (False, None, 7_200_000)


def test_topic_keys_default_to_their_broker_keys() -> None:
    defaults = BrokerConfig()
    topic_types = {f.name: f.type for f in dataclasses.fields(TopicConfig)}
    broker_types = {f.name: f.type for f in dataclasses.fields(BrokerConfig)}
    for key in TOPIC_KEYS_BY_NAME.values():
        if not key.broker_keys:  # a topic-only key (a throttled replica list)
            assert getattr(TopicConfig(), key.attr) == key.primary.default
            continue
        primary = key.broker_keys[0]
        assert getattr(TopicConfig(), key.attr) == getattr(defaults, primary.attr)
        assert topic_types[key.attr] == broker_types[primary.attr]


def test_storage_defaults_are_a_default_topics() -> None:
    assert LogConfig() == LogConfig.from_topic(TopicConfig(), durable=True)
    compacted = BrokerConfig().topic_config({"cleanup.policy": "compact", "segment.ms": "5"})
    log = LogConfig.from_topic(compacted, durable=False)
    assert (log.cleanup_compact, log.cleanup_delete, log.segment_ms, log.durable) == (
        True,
        False,
        5,
        False,
    )


def test_throttled_replica_lists_are_topic_only_keys_checked_as_kafka() -> None:
    config = BrokerConfig().topic_config(
        {
            "leader.replication.throttled.replicas": "0:1,1:2",
            "follower.replication.throttled.replicas": "*",
        }
    )
    assert config.leader_replication_throttled_replicas == ("0:1", "1:2")
    assert config.follower_replication_throttled_replicas == ("*",)
    for bad in ("0-1", "*,0:1", "a:1"):
        with pytest.raises(ConfigError, match=r"the literal '\*' or a list of replicas"):
            BrokerConfig().topic_config({"leader.replication.throttled.replicas": bad})
    rates = BrokerConfig().with_dynamic({"leader.replication.throttled.rate": "1000"}, {})
    assert rates.leader_replication_throttled_rate == 1000
