"""IncrementalAlterConfigs' operations on a topic's overrides and on a dynamic broker layer.

The results are not validated here: `BrokerConfig.topic_config` and `BrokerConfig.with_dynamic`
check what the broker then applies.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping

from onceflow.config.broker import BROKER_KEYS_BY_NAME, BrokerConfig
from onceflow.config.spec import ConfigError, ConfigType, render
from onceflow.config.topic import TOPIC_KEYS_BY_NAME, TopicConfig


class AlterConfigOp(enum.IntEnum):
    """IncrementalAlterConfigs' operations, with Kafka's codes (AlterConfigOp.OpType)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


def alter_topic_overrides(
    topic: TopicConfig,
    overrides: Mapping[str, str],
    ops: Iterable[tuple[str, AlterConfigOp, str | None]],
) -> dict[str, str]:
    """A topic's persisted `overrides` after IncrementalAlterConfigs' `ops`, as Kafka applies
    them: SET and DELETE a key; APPEND (items not there yet) and SUBTRACT items of a
    LIST-typed key, else ConfigError. A list key without an override starts from `topic`'s
    effective value (Kafka starts from the built-in default, which differs only where the
    broker's own log.* default was changed, and then contradicts what DescribeConfigs showed).
    The result is not validated: `BrokerConfig.topic_config` does that.
    """

    def current(key: str, op: AlterConfigOp) -> str:
        spec = TOPIC_KEYS_BY_NAME.get(key)
        if spec is None or spec.kind.config_type is not ConfigType.LIST:
            raise ConfigError(f"Can't {op.name} to key {key} because its type is not LIST.", key)
        return render(spec.kind, getattr(topic, spec.attr)) or ""

    return _apply_ops(overrides, ops, current)


def alter_broker_settings(
    cfg: BrokerConfig,
    settings: Mapping[str, str],
    ops: Iterable[tuple[str, AlterConfigOp, str | None]],
) -> dict[str, str]:
    """One dynamic layer's `settings` after IncrementalAlterConfigs' `ops`, as Kafka's
    prepareIncrementalConfigs applies them; APPEND and SUBTRACT only on LIST keys (starting
    from `cfg`'s effective value, as for topics), else ConfigError. Not validated."""

    def current(key: str, op: AlterConfigOp) -> str:
        spec = BROKER_KEYS_BY_NAME.get(key)
        if spec is None or spec.kind.config_type is not ConfigType.LIST:
            verb = "append" if op is AlterConfigOp.APPEND else "subtract"
            raise ConfigError(f"Config value {verb} is not allowed for config key: {key}", key)
        return render(spec.kind, getattr(cfg, spec.attr)) or ""

    return _apply_ops(settings, ops, current)


def _apply_ops(
    settings: Mapping[str, str],
    ops: Iterable[tuple[str, AlterConfigOp, str | None]],
    list_value: Callable[[str, AlterConfigOp], str],
) -> dict[str, str]:
    """SET and DELETE keys; APPEND (items not there yet) and SUBTRACT items of list keys,
    from the setting or else `list_value(key, op)`, which raises for a key that is no list."""
    result = dict(settings)
    for key, op, value in ops:
        if op is AlterConfigOp.SET:
            result[key] = value or ""
        elif op is AlterConfigOp.DELETE:
            result.pop(key, None)
        else:
            base = list_value(key, op)  # checks the key even when it is set
            items = [i.strip() for i in result.get(key, base).split(",") if i.strip()]
            given = [i.strip() for i in (value or "").split(",")]
            if op is AlterConfigOp.APPEND:
                items += [item for item in dict.fromkeys(given) if item not in items]
            else:
                items = [item for item in items if item not in given]
            result[key] = ",".join(items)
    return result
