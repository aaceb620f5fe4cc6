"""Loading a BrokerConfig from Kafka keys: a server.properties, command-line overrides, and the
listener.name.<listener>.<key> settings; unknown keys become warnings, bad values errors."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from onceflow.config.broker import (
    BROKER_KEY_GROUPS,
    BROKER_KEYS_BY_NAME,
    IGNORED_BROKER_KEYS,
    LISTENER_PREFIX,
    BrokerConfig,
)
from onceflow.config.properties import read_properties
from onceflow.config.spec import ConfigError, invalid, suggestion


def load_broker_config(
    path: str | Path | None, overrides: Mapping[str, str]
) -> tuple[BrokerConfig, list[str]]:
    """Load a server.properties (if `path`), apply `overrides` on top, and check everything.

    Returns the config and one warning per unknown key. Raises ConfigError for a missing file
    or a bad value, naming the key, the value and what was expected.
    """
    from_file = read_properties(path) if path is not None else {}
    from_overrides = {key.strip(): value for key, value in overrides.items()}
    try:
        return broker_config_from_properties({**from_file, **from_overrides})
    except ConfigError as exc:
        if exc.key in from_file and exc.key not in from_overrides:
            raise ConfigError(f"{exc} (set in {path})", exc.key) from None
        raise


def broker_config_from_properties(
    properties: Mapping[str, str],
) -> tuple[BrokerConfig, list[str]]:
    """Build a BrokerConfig from Kafka keys and string values (already merged)."""
    warnings: list[str] = []
    parsed: dict[str, Any] = {}
    settings: dict[str, str] = {}
    per_listener: list[tuple[str, str, Any]] = []
    for key, raw in properties.items():
        if key.startswith(LISTENER_PREFIX):
            per_listener.append(_listener_setting(key, raw))
            settings[key] = "[hidden]" if per_listener[-1][1].endswith("jaas.config") else raw
            continue
        spec = BROKER_KEYS_BY_NAME.get(key)
        if spec is None:
            if key not in IGNORED_BROKER_KEYS:
                hint = suggestion(key, BROKER_KEYS_BY_NAME)
                warnings.append(f"unknown configuration key {key!r} ignored{hint}")
            continue
        parsed[key] = spec.parse(raw)
        settings[key] = spec.kind.render(parsed[key])

    if "node.id" in parsed and "broker.id" in parsed and parsed["node.id"] != parsed["broker.id"]:
        raise invalid(
            "broker.id", settings["broker.id"], f"the same id as node.id ({settings['node.id']})"
        )

    values: dict[str, Any] = {}
    for attr, group in BROKER_KEY_GROUPS.items():
        for spec in group:  # table order is precedence order
            if spec.name in parsed:
                values[attr] = spec.effective(parsed[spec.name])
                break

    controller_names = set(values.get("controller_listener_names", ()))
    for attr in ("listeners", "advertised_listeners"):
        if attr in values and controller_names:
            kept = tuple(lis for lis in values[attr] if lis.name not in controller_names)
            if not kept:
                key = attr.replace("_", ".")
                raise invalid(
                    key, settings[key], "at least one listener that is no controller listener"
                )
            values[attr] = kept

    config = BrokerConfig(
        **values, listener_settings=tuple(per_listener), settings=tuple(settings.items())
    )
    return config, warnings


_JAAS_RE = re.compile(r"(plain|scram-sha-256|scram-sha-512)\.sasl\.jaas\.config")


def _listener_setting(key: str, raw: str) -> tuple[str, str, Any]:
    """One listener.name.<listener>.<key> setting: (LISTENER, key, parsed value)."""
    listener, _, rest = key.removeprefix(LISTENER_PREFIX).partition(".")
    if not listener or not rest:
        raise ConfigError(f"Invalid configuration key {key}: expected listener.name.NAME.KEY", key)
    if _JAAS_RE.fullmatch(rest):
        return listener.upper(), rest, raw.strip()
    spec = BROKER_KEYS_BY_NAME.get(rest)
    if spec is None or not rest.startswith(("ssl.", "sasl.", "connections.max.reauth")):
        raise ConfigError(
            f"Invalid configuration key {key}: a listener may override ssl.*, sasl.* and "
            "connections.max.reauth.ms keys, and set <mechanism>.sasl.jaas.config "
            "(plain, scram-sha-256, scram-sha-512)",
            key,
        )
    value = spec.parse(raw)
    return listener.upper(), rest, value
