"""DescribeConfigs: each key's value, source, synonyms, type and documentation, as Kafka
reports them, and the documentation rows of every key."""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from onceflow.config.broker import (
    BROKER_KEY_GROUPS,
    BROKER_KEYS,
    BROKER_KEYS_BY_NAME,
    DYNAMIC_BROKER_KEYS,
    BrokerConfig,
)
from onceflow.config.spec import ConfigType, Key, render
from onceflow.config.topic import TOPIC_KEYS, TopicConfig


class ConfigSource(enum.IntEnum):
    """Where a value came from, with Kafka's DescribeConfigs numeric codes."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


class ConfigSynonym(NamedTuple):
    """One (name, value, source) synonym of a described config, highest precedence first."""

    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True)
class ConfigEntry:
    """One row of a DescribeConfigs answer, values rendered as Kafka renders them."""

    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    is_default: bool
    is_sensitive: bool = False
    synonyms: tuple[ConfigSynonym, ...] = ()
    config_type: ConfigType = ConfigType.UNKNOWN
    documentation: str | None = None


class ConfigDoc(NamedTuple):
    """A documentation row: Kafka key, rendered default (None: unset) and what it does."""

    key: str
    default: str | None
    doc: str


def _broker_default(spec: Key) -> str | None:
    if not spec.primary or spec.kind.config_type is ConfigType.PASSWORD:
        return None  # a synonym: the group's first key carries the default
    return render(spec.kind, spec.default)


#: (key, default, doc) for every broker key, in a sensible reading order, for the README.
CONFIG_DOCS: tuple[ConfigDoc, ...] = tuple(
    ConfigDoc(spec.name, _broker_default(spec), spec.doc) for spec in BROKER_KEYS
)

#: (key, default, doc) for every topic-level key; the default is the broker's.
TOPIC_CONFIG_DOCS: tuple[ConfigDoc, ...] = tuple(
    ConfigDoc(
        spec.name,
        render(spec.kind, spec.primary.default),
        f"{spec.doc} Broker default: {spec.primary.name}." if spec.broker_keys else spec.doc,
    )
    for spec in TOPIC_KEYS
)


def describe_broker_config(
    cfg: BrokerConfig, explicitly_set: Collection[str] | None = None
) -> list[ConfigEntry]:
    """DescribeConfigs entries for the broker, one per key Onceflow knows.

    `explicitly_set` names the keys the operator set (default: the keys `cfg` was loaded
    from). Their source is STATIC_BROKER_CONFIG, under the dynamic configs of `cfg` (this
    broker's, then the cluster default); the rest are DEFAULT_CONFIG. Only the keys in
    DYNAMIC_BROKER_KEYS are not read-only. A synonym key (log.retention.hours) that was not
    set has no value: the group's first key carries the effective one.
    """
    explicit = {key for key, _ in cfg.settings} if explicitly_set is None else set(explicitly_set)
    raw = dict(cfg.settings)
    dynamic = _dynamic_layers(cfg)
    entries: list[ConfigEntry] = []
    for attr, group in BROKER_KEY_GROUPS.items():
        primary = group[0]
        effective: Any = getattr(cfg, attr)
        if attr == "advertised_listeners":
            effective = cfg.effective_advertised_listeners()
        value = render(primary.kind, effective)
        read_only = primary.name not in DYNAMIC_BROKER_KEYS
        synonyms = [
            ConfigSynonym(spec.name, layer[spec.name], source)
            for layer, source in dynamic
            for spec in group
            if spec.name in layer
        ]
        synonyms += [
            ConfigSynonym(
                spec.name,
                raw.get(spec.name, value if spec is primary else None),
                ConfigSource.STATIC_BROKER_CONFIG,
            )
            for spec in group
            if spec.name in explicit
        ]
        synonyms.append(
            ConfigSynonym(primary.name, _broker_default(primary), ConfigSource.DEFAULT_CONFIG)
        )
        entries.append(_entry(primary, value, synonyms[0].source, synonyms, read_only))
        for alias in group[1:]:
            own = [
                ConfigSynonym(alias.name, layer[alias.name], source)
                for layer, source in (*dynamic, (raw, ConfigSource.STATIC_BROKER_CONFIG))
                if alias.name in layer and (layer is not raw or alias.name in explicit)
            ]
            if own:
                entries.append(_entry(alias, own[0].value, own[0].source, own, read_only))
            else:
                entries.append(_entry(alias, None, ConfigSource.DEFAULT_CONFIG, [], read_only))
    return entries


def describe_default_broker_config(cfg: BrokerConfig) -> list[ConfigEntry]:
    """DescribeConfigs for the cluster-wide default (broker resource ""): as in Kafka, only
    the keys set there, with the synonyms below it (no broker's own entity)."""
    layer = dict(cfg.dynamic_default)
    raw = dict(cfg.settings)
    entries = []
    for key, value in sorted(layer.items()):
        spec = BROKER_KEYS_BY_NAME[key]
        group = BROKER_KEY_GROUPS[spec.attr]
        synonyms = [
            ConfigSynonym(s.name, layer[s.name], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
            for s in group
            if s.name in layer
        ]
        synonyms += [
            ConfigSynonym(s.name, raw[s.name], ConfigSource.STATIC_BROKER_CONFIG)
            for s in group
            if s.name in raw
        ]
        synonyms.append(
            ConfigSynonym(group[0].name, _broker_default(group[0]), ConfigSource.DEFAULT_CONFIG)
        )
        source = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        entries.append(_entry(spec, value, source, synonyms, read_only=False))
    return entries


def _dynamic_layers(cfg: BrokerConfig) -> tuple[tuple[dict[str, str], ConfigSource], ...]:
    return (
        (dict(cfg.dynamic_broker), ConfigSource.DYNAMIC_BROKER_CONFIG),
        (dict(cfg.dynamic_default), ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
    )


def describe_topic_config(
    topic: TopicConfig,
    overrides: Mapping[str, str] | None = None,
    *,
    broker: BrokerConfig | None = None,
) -> list[ConfigEntry]:
    """DescribeConfigs entries for a topic, one per topic-level key, sorted by name.

    A key in `overrides` (default: the topic's recorded overrides) is DYNAMIC_TOPIC_CONFIG.
    Otherwise the value comes from the broker: STATIC_BROKER_CONFIG when `broker` was loaded
    with one of the key's broker synonyms set, else DEFAULT_CONFIG. Synonyms list every
    source in precedence order, ending with the built-in default.
    """
    overridden = set(topic.overrides_dict() if overrides is None else overrides)
    levels = (
        (*_dynamic_layers(broker), (dict(broker.settings), ConfigSource.STATIC_BROKER_CONFIG))
        if broker is not None
        else ()
    )
    entries: list[ConfigEntry] = []
    for spec in TOPIC_KEYS:
        value = render(spec.kind, getattr(topic, spec.attr))
        synonyms: list[ConfigSynonym] = []
        if spec.name in overridden:
            synonyms.append(ConfigSynonym(spec.name, value, ConfigSource.DYNAMIC_TOPIC_CONFIG))
        synonyms.extend(
            ConfigSynonym(bspec.name, layer[bspec.name], source)
            for layer, source in levels
            for bspec in spec.broker_keys
            if bspec.name in layer
        )
        primary = spec.primary
        synonyms.append(
            ConfigSynonym(primary.name, _broker_default(primary), ConfigSource.DEFAULT_CONFIG)
        )
        entries.append(
            ConfigEntry(
                name=spec.name,
                value=value,
                source=synonyms[0].source,
                read_only=False,
                is_default=synonyms[0].source == ConfigSource.DEFAULT_CONFIG,
                synonyms=tuple(synonyms),
                config_type=spec.kind.config_type,
                documentation=spec.doc,
            )
        )
    return entries


def _entry(
    spec: Key,
    value: str | None,
    source: ConfigSource,
    synonyms: list[ConfigSynonym],
    read_only: bool,
) -> ConfigEntry:
    sensitive = spec.kind.config_type is ConfigType.PASSWORD
    if sensitive:  # Kafka never returns a password's value, only that it is one
        value = None
        synonyms = [synonym._replace(value=None) for synonym in synonyms]
    return ConfigEntry(
        name=spec.name,
        value=value,
        source=source,
        read_only=read_only,
        is_default=source == ConfigSource.DEFAULT_CONFIG,
        is_sensitive=sensitive,
        synonyms=tuple(synonyms),
        config_type=spec.kind.config_type,
        documentation=spec.doc,
    )
