"""The values an alter sets, as kafka-configs.sh reads them: `--add-config k1=v1,k2=[a,b]`
and `--add-config-file FILE` (a properties file). `configs` sends them as topic and broker
overrides, `quota_configs` as client quotas."""

from __future__ import annotations

import argparse

from onceflow.cli.common import CliError, UsageError
from onceflow.config import ConfigError, read_properties

__all__ = ["parse_add_config", "to_set"]


def parse_add_config(text: str) -> dict[str, str]:
    """Kafka's `k1=v1,k2=[a,b]`: a value in brackets may hold commas."""
    configs: dict[str, str] = {}
    rest = text
    while rest:
        key, sep, rest = rest.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--add-config: expected KEY=VALUE, got {key!r}")
        if rest.startswith("["):
            value, _, rest = rest[1:].partition("]")
            rest = rest.removeprefix(",")
        else:
            value, _, rest = rest.partition(",")
        configs[key.strip()] = value
    return configs


def to_set(args: argparse.Namespace) -> dict[str, str]:
    """Every key and value of `--add-config` and `--add-config-file` together."""
    configs = parse_add_config(args.add_config) if args.add_config else {}
    if args.add_config_file:
        try:
            configs.update(read_properties(args.add_config_file))
        except (ConfigError, OSError) as exc:
            raise CliError(f"cannot read {args.add_config_file}: {exc}") from None
    return configs
