"""Broker and topic configuration, keyed by Kafka's own names.

A `server.properties` written for Apache Kafka mostly works unchanged: the keys are Kafka's,
the defaults are Kafka's, values are parsed the way Kafka's ConfigDef parses them, and keys
that only matter to a Kafka cluster (controller quorum, thread pools, replication of the
internal topics) are accepted and ignored instead of being reported as typos.

Each key is declared once, as a field of the key class of its concern, with its Kafka name,
type, default, range check and documentation (`spec.key()`); loading, the constructor checks,
DescribeConfigs and the documentation rows all read those declarations. The modules:

* `spec`: how a key is declared, `ConfigError`; `kinds`: value types, range checks, listeners.
* `server`, `security`, `log`, `replication`, `groups`, `transactions`: the keys, by concern.
* `broker`: `BrokerConfig`, all of them with flat attribute access, and cross-key checks.
* `topic`: `TopicConfig`, the topic-level keys, each defaulting to a log.* broker key.
* `properties`, `load`: reading server.properties; `dynamic`: IncrementalAlterConfigs'
  operations; `describe`: DescribeConfigs and the documentation rows.

Adding a broker key is adding one `key(...)` field to the class of its concern; a topic-level
key is one more `_topic(...)` field on `TopicConfig` naming the log.* key behind it (and, if
storage acts on it, a `LogConfig` field); a check across keys is one rule in `broker.py`.

This package imports nothing of Onceflow outside it, so every layer may use it.
"""

from onceflow.config.broker import (
    BROKER_CONFIG_KEYS,
    DYNAMIC_BROKER_KEYS,
    IGNORED_BROKER_KEYS,
    BrokerConfig,
    check_dynamic_broker_config,
)
from onceflow.config.describe import (
    CONFIG_DOCS,
    TOPIC_CONFIG_DOCS,
    ConfigDoc,
    ConfigEntry,
    ConfigSource,
    ConfigSynonym,
    describe_broker_config,
    describe_default_broker_config,
    describe_topic_config,
)
from onceflow.config.dynamic import AlterConfigOp, alter_broker_settings, alter_topic_overrides
from onceflow.config.kinds import Listener
from onceflow.config.load import broker_config_from_properties, load_broker_config
from onceflow.config.properties import parse_properties, read_properties
from onceflow.config.security import AUTHORIZER_CLASS_NAMES
from onceflow.config.spec import ConfigError, ConfigType
from onceflow.config.topic import TOPIC_CONFIG_KEYS, TopicConfig

__all__ = [
    "AUTHORIZER_CLASS_NAMES",
    "BROKER_CONFIG_KEYS",
    "CONFIG_DOCS",
    "DYNAMIC_BROKER_KEYS",
    "IGNORED_BROKER_KEYS",
    "TOPIC_CONFIG_DOCS",
    "TOPIC_CONFIG_KEYS",
    "AlterConfigOp",
    "BrokerConfig",
    "ConfigDoc",
    "ConfigEntry",
    "ConfigError",
    "ConfigSource",
    "ConfigSynonym",
    "ConfigType",
    "Listener",
    "TopicConfig",
    "alter_broker_settings",
    "alter_topic_overrides",
    "broker_config_from_properties",
    "check_dynamic_broker_config",
    "describe_broker_config",
    "describe_default_broker_config",
    "describe_topic_config",
    "load_broker_config",
    "parse_properties",
    "read_properties",
]
