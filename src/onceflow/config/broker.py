"""`BrokerConfig`: every broker key, composed from the per-concern key classes.

The key classes (server, security, log, replication, groups, transactions) each declare their
keys once; this module joins them into the one frozen dataclass the broker reads with flat
attribute access (`config.log_segment_bytes`), derives the key table from it, and holds the
checks that span several concerns.

Why the shape:

* `BrokerConfig` holds *effective* values only. Kafka keys that are synonyms in coarser units
  (`log.retention.hours` for `log.retention.ms`) resolve into one attribute at load time, with
  Kafka's precedence: the key itself, then its synonyms in declaration order.
* `ConfigError` always names the key, the bad value and what was expected. The broker turns it
  into INVALID_CONFIG for CreateTopics and AlterConfigs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from onceflow.config.groups import GroupKeys, check_consumer_group_timeouts, check_session_timeouts
from onceflow.config.kinds import Listener
from onceflow.config.log import LogKeys, check_compaction_lag
from onceflow.config.quotas import QuotaKeys
from onceflow.config.replication import ReplicationKeys, check_replica_fetch_wait
from onceflow.config.security import SASL_MECHANISMS, SecurityKeys
from onceflow.config.server import ServerKeys, check_listeners
from onceflow.config.share import ShareKeys, check_share_bounds
from onceflow.config.spec import (
    ConfigError,
    Key,
    group_keys,
    invalid,
    keys_of,
    render,
    suggestion,
)
from onceflow.config.topic import TOPIC_KEYS, TopicConfig
from onceflow.config.transactions import TransactionKeys

LISTENER_PREFIX = "listener.name."

#: Kafka keys accepted and ignored, with the reason: they configure parts of a Kafka cluster
#: Onceflow does not have. They raise no warning, so a stock server.properties loads quietly.
IGNORED_BROKER_KEYS: Mapping[str, str] = {
    "process.roles": "Onceflow runs no KRaft controller",
    "controller.quorum.voters": "Onceflow runs no KRaft controller",
    "controller.quorum.bootstrap.servers": "Onceflow runs no KRaft controller",
    "inter.broker.protocol.version": "every broker speaks the same versions",
    "num.network.threads": "the server is one asyncio loop",
    "num.io.threads": "the server is one asyncio loop",
    "background.threads": "the server is one asyncio loop",
    "num.recovery.threads.per.data.dir": "recovery runs in the server's own loop",
    "num.replica.fetchers": "one fetcher per leader broker, in the server's own loop",
    "socket.send.buffer.bytes": "the OS defaults are used",
    "socket.receive.buffer.bytes": "the OS defaults are used",
    "log.flush.scheduler.interval.ms": "flushing follows onceflow.fsync.on.ack",
    "log.flush.offset.checkpoint.interval.ms": "checkpoints are written by the log itself",
    "log.preallocate": "segments are not preallocated",
    "log.cleaner.threads": "the cleaner runs in the server's own loop",
    "log.cleaner.dedupe.buffer.size": "the cleaner sizes its own map",
    "group.coordinator.rebalance.protocols": (
        "the classic and the consumer (KIP-848) group protocols are both always enabled"
    ),
}


# The dataclass takes the fields of its last base first: the bases are listed in the reverse
# of the order the keys are documented and described in (server first, transactions last).
@dataclass(frozen=True)
class BrokerConfig(
    ShareKeys,
    QuotaKeys,
    TransactionKeys,
    GroupKeys,
    ReplicationKeys,
    LogKeys,
    SecurityKeys,
    ServerKeys,
):
    """The broker's static configuration; see `CONFIG_DOCS` for each attribute's Kafka key.

    Build one with `load_broker_config()`. Constructing it directly (in tests) is fine too:
    every value is range-checked here, and the error names the Kafka key. Attributes hold
    effective values: `log_retention_ms` is the answer whichever of log.retention.ms, .minutes
    or .hours was set.
    """

    #: The Kafka keys this config was loaded from and their values (normalised), for
    #: DescribeConfigs. Not part of equality: two configs with the same values are equal.
    settings: tuple[tuple[str, str], ...] = field(default=(), compare=False, repr=False)
    #: The dynamic broker configs on top (AlterConfigs): cluster-wide, then this broker's.
    dynamic_default: tuple[tuple[str, str], ...] = field(default=(), compare=False, repr=False)
    dynamic_broker: tuple[tuple[str, str], ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        for attr, group in BROKER_KEY_GROUPS.items():
            primary = group[0]
            value = getattr(self, attr)
            if primary.check is not None and not primary.check.ok(value):
                shown = render(primary.kind, value) or ""
                raise invalid(primary.name, shown, primary.check.expected)
        for rule in _BROKER_RULES:
            rule(self)

    def inter_broker_listener(self) -> Listener:
        """The listener brokers connect to each other on (inter.broker.listener.name, else
        the first with security.inter.broker.protocol, else the first listener)."""
        protocols = dict(self.listener_security_protocol_map)
        for listener in self.listeners:
            if self.inter_broker_listener_name:
                if listener.name == self.inter_broker_listener_name:
                    return listener
            elif protocols.get(listener.name) == self.security_inter_broker_protocol:
                return listener
        return self.listeners[0]

    def topic_defaults(self) -> TopicConfig:
        """The config of a topic with no overrides: the broker's log.* values."""
        return TopicConfig(
            **{
                spec.attr: getattr(self, spec.broker_keys[0].attr)
                for spec in TOPIC_KEYS
                if spec.broker_keys
            }
        )

    def topic_config(self, overrides: Mapping[str, str | None]) -> TopicConfig:
        """The config of a topic with these (persisted) overrides; raises ConfigError."""
        return self.topic_defaults().with_overrides(overrides)

    def with_dynamic(self, default: Mapping[str, str], broker: Mapping[str, str]) -> BrokerConfig:
        """This (static) config under dynamic broker configs, Kafka's precedence: this
        broker's, then the cluster-wide default, then static; within one of them the first
        synonym of a group (log.retention.ms before .hours). Raises ConfigError."""
        check_dynamic_broker_config(default)
        check_dynamic_broker_config(broker)
        changes: dict[str, Any] = {}
        for attr in _DYNAMIC_ATTRS:
            for layer in (broker, default):
                spec = next((s for s in BROKER_KEY_GROUPS[attr] if s.name in layer), None)
                if spec is not None:
                    changes[attr] = spec.effective(spec.parse(layer[spec.name]))
                    break
        return dataclasses.replace(
            self,
            **changes,
            dynamic_default=tuple(sorted(default.items())),
            dynamic_broker=tuple(sorted(broker.items())),
        )


#: Every broker key with its synonyms, in documentation order.
BROKER_KEYS: tuple[Key, ...] = keys_of(BrokerConfig)
BROKER_KEYS_BY_NAME: dict[str, Key] = {row.name: row for row in BROKER_KEYS}
#: Attribute -> its keys, highest precedence first.
BROKER_KEY_GROUPS: dict[str, tuple[Key, ...]] = group_keys(BROKER_KEYS)

#: Every broker key Onceflow understands.
BROKER_CONFIG_KEYS: frozenset[str] = frozenset(BROKER_KEYS_BY_NAME)


def _check_security(cfg: BrokerConfig) -> None:
    """What each listener's security protocol needs, checked before anything binds."""
    names = {listener.name for listener in cfg.listeners}
    if cfg.inter_broker_listener_name:
        if cfg.inter_broker_listener_name not in names:
            raise invalid(
                "inter.broker.listener.name",
                cfg.inter_broker_listener_name,
                f"a listener name defined in listeners ({', '.join(sorted(names))})",
            )
        if any(key == "security.inter.broker.protocol" for key, _ in cfg.settings):
            raise invalid(
                "security.inter.broker.protocol",
                cfg.security_inter_broker_protocol,
                "not set together with inter.broker.listener.name",
            )
    for listener in cfg.listeners:
        protocol = cfg.security_protocol(listener.name)
        if protocol in ("SSL", "SASL_SSL"):
            location = cfg.listener_value(listener.name, "ssl.keystore.location")
            chain = cfg.listener_value(listener.name, "ssl.keystore.certificate.chain")
            key = cfg.listener_value(listener.name, "ssl.keystore.key")
            if not location and not (chain and key):
                raise invalid(
                    "ssl.keystore.location",
                    "",
                    f"a PEM key and certificate for the {protocol} listener {listener.name} "
                    "(or ssl.keystore.certificate.chain with ssl.keystore.key)",
                )
        if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
            mechanisms = cfg.listener_value(listener.name, "sasl.enabled.mechanisms")
            unsupported = [m for m in mechanisms if m not in SASL_MECHANISMS]
            if not mechanisms or unsupported:
                raise invalid(
                    "sasl.enabled.mechanisms",
                    ",".join(mechanisms),
                    f"mechanisms Onceflow supports ({', '.join(SASL_MECHANISMS)}) for the "
                    f"{protocol} listener {listener.name}",
                )
    inter = cfg.inter_broker_listener()
    if cfg.zookeeper_connect and cfg.security_protocol(inter.name).startswith("SASL"):
        mechanism = cfg.sasl_mechanism_inter_broker_protocol
        enabled = cfg.listener_value(inter.name, "sasl.enabled.mechanisms")
        if mechanism not in enabled:
            raise invalid(
                "sasl.mechanism.inter.broker.protocol",
                mechanism,
                f"a mechanism enabled on the inter-broker listener {inter.name} "
                f"({', '.join(enabled)})",
            )


def _check_metrics_listener(cfg: BrokerConfig) -> None:
    metrics = cfg.onceflow_metrics_listener
    if metrics is None or metrics.port == 0:
        return
    for listener in cfg.listeners:
        same_host = listener.is_wildcard or metrics.is_wildcard or listener.host == metrics.host
        if listener.port == metrics.port and same_host:
            raise invalid(
                "onceflow.metrics.listener",
                metrics.address,
                f"a port other than the Kafka listener's ({listener.address})",
            )


def _check_standalone(cfg: BrokerConfig) -> None:
    """A broker without ZooKeeper runs alone: a topic cannot have replicas elsewhere."""
    if not cfg.zookeeper_connect and cfg.default_replication_factor != 1:
        raise invalid(
            "default.replication.factor",
            str(cfg.default_replication_factor),
            "1 on a single broker (set zookeeper.connect to run a cluster)",
        )


_BROKER_RULES: tuple[Callable[[BrokerConfig], None], ...] = (
    check_listeners,
    _check_security,
    _check_metrics_listener,
    check_session_timeouts,
    check_consumer_group_timeouts,
    check_share_bounds,
    check_compaction_lag,
    check_replica_fetch_wait,
    _check_standalone,
)


#: The broker keys AlterConfigs may change at runtime, cluster-wide or per broker: the
#: defaults of the topic-level keys (Kafka's DynamicLogConfig). Kafka's other dynamic keys
#: tune parts Onceflow does not have (thread pools, listeners reloaded in place).
#: And the replication throttles' rates (Kafka's DynamicReplicationConfig).
_THROTTLE_ATTRS = ("leader_replication_throttled_rate", "follower_replication_throttled_rate")
DYNAMIC_BROKER_KEYS: frozenset[str] = frozenset(
    spec.name for topic_key in TOPIC_KEYS for spec in topic_key.broker_keys
) | frozenset(spec.name for attr in _THROTTLE_ATTRS for spec in BROKER_KEY_GROUPS[attr])
_DYNAMIC_ATTRS: tuple[str, ...] = (
    *dict.fromkeys(t.broker_keys[0].attr for t in TOPIC_KEYS if t.broker_keys),
    *_THROTTLE_ATTRS,
)


def check_dynamic_broker_config(settings: Mapping[str, str]) -> None:
    """Kafka's DynamicBrokerConfig.validateConfigs for Onceflow's keys: ConfigError for keys
    that cannot change at runtime (Kafka's message), for unknown keys (Kafka would keep
    them, doing nothing with them), and for bad values."""
    fixed = [
        key
        for key in settings
        if key not in DYNAMIC_BROKER_KEYS
        and (
            key in BROKER_KEYS_BY_NAME
            or key in IGNORED_BROKER_KEYS
            or key.startswith(LISTENER_PREFIX)
        )
    ]
    if fixed:
        raise ConfigError(f"Cannot update these configs dynamically: Set({', '.join(fixed)})")
    for key, raw in settings.items():
        if key not in DYNAMIC_BROKER_KEYS:
            raise ConfigError(
                f"Unknown broker config name: {key}{suggestion(key, DYNAMIC_BROKER_KEYS)}", key
            )
        BROKER_KEYS_BY_NAME[key].parse(raw)
