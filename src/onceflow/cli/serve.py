"""`onceflow serve`: run a broker from a server.properties, flags and overrides.

Precedence, lowest first: Kafka's defaults, the `--config` file, `--override KEY=VALUE`,
then the named options (`--data-dir`, `--listener`, ...). Named options win over overrides
because they are the more deliberate spelling of the same wish. Every value becomes a Kafka
key and goes through `load_broker_config`, so the file and the flags are checked alike.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from onceflow import failpoints
from onceflow.cli.common import CliError, UsageError, host_port, key_value, non_negative_int
from onceflow.config import BrokerConfig, ConfigError, load_broker_config

__all__ = ["build_serve_config", "register", "run_serve", "serve_overrides"]

log = logging.getLogger("onceflow.cli.serve")

SERVE_LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# (argparse destination, Kafka key) of each named option.
NAMED_OPTIONS: tuple[tuple[str, str], ...] = (
    ("data_dir", "log.dirs"),
    ("listener", "listeners"),
    ("advertised_listener", "advertised.listeners"),
    ("node_id", "node.id"),
)


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "serve",
        help="run a broker (like kafka-server-start.sh)",
        description="Run an Onceflow broker until SIGTERM or Ctrl-C. As with "
        "kafka-server-start.sh, the properties file may come first and --override sets any "
        "key; the named options are shorthands for keys.",
    )
    parser.add_argument(
        "properties", nargs="?", metavar="server.properties", help="the broker's properties file"
    )
    parser.add_argument("--config", metavar="FILE", help="the same, as an option")
    parser.add_argument("--data-dir", metavar="DIR", help="where logs live (log.dirs)")
    parser.add_argument(
        "--listener", type=host_port, metavar="HOST:PORT", help="address to listen on (listeners)"
    )
    parser.add_argument(
        "--advertised-listener",
        type=host_port,
        metavar="HOST:PORT",
        help="address given to clients (advertised.listeners)",
    )
    parser.add_argument("--node-id", type=non_negative_int, metavar="N", help="node.id")
    parser.add_argument(
        "--override",
        type=key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set any broker key; repeatable",
    )
    parser.set_defaults(func=run_serve, command_parser=parser, normalize=_normalize)


def _normalize(args: argparse.Namespace) -> None:
    """kafka-server-start.sh's positional properties file is `--config`'s."""
    if args.properties is not None and args.config not in (None, args.properties):
        raise UsageError("give the properties file once (positional or --config)")
    args.config = args.config or args.properties
    args.properties = None


def serve_overrides(args: argparse.Namespace) -> dict[str, str]:
    """The Kafka keys the command line sets, named options applied after `--override`."""
    overrides: dict[str, str] = dict(args.override)
    for dest, key in NAMED_OPTIONS:
        value = getattr(args, dest)
        if value is not None:
            overrides[key] = str(value)
    return overrides


def build_serve_config(args: argparse.Namespace) -> tuple[BrokerConfig, list[str]]:
    """The broker config and load warnings; raises ConfigError for a bad file or value."""
    return load_broker_config(args.config, serve_overrides(args))


def _setup_logging() -> None:
    """INFO and up to stderr with timestamps: the broker's log is its operator's main view."""
    logging.basicConfig(level=logging.INFO, format=SERVE_LOG_FORMAT)
    logging.getLogger("onceflow").setLevel(logging.INFO)


def run_serve(args: argparse.Namespace) -> int:
    _setup_logging()
    try:
        config, warnings = build_serve_config(args)
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    for warning in warnings:
        log.warning("%s", warning)
    try:
        failpoints.arm_from_environment()
    except ValueError as exc:
        raise CliError(str(exc)) from None
    # Imported here so the client commands never load the broker.
    from onceflow.broker.app import serve

    return serve(config)
