"""`--command-config FILE`: the client security properties every client command takes.

The file is read and translated by the client package (`onceflow.client.properties` for
Onceflow's own client, `onceflow.client.librdkafka` for confluent-kafka's); a file either
cannot use is a `ConfigError`, which main prints as any other user error.
"""

from __future__ import annotations

import argparse

from onceflow.client.librdkafka import librdkafka_properties
from onceflow.client.properties import client_security, read_command_config
from onceflow.security.client_config import ClientSecurity

__all__ = ["add_command_config_option", "security_properties", "wire_security"]


def add_command_config_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--command-config",
        metavar="FILE",
        help="client security properties (security.protocol, ssl.*, sasl.*) as for "
        "Kafka's tools; Java's or librdkafka's names, PEM files only",
    )


def security_properties(args: argparse.Namespace) -> dict[str, str]:
    """librdkafka settings from the command's `--command-config` (none without it)."""
    return librdkafka_properties(read_command_config(getattr(args, "command_config", None)))


def wire_security(args: argparse.Namespace) -> ClientSecurity | None:
    """Security for Onceflow's own protocol client, from `--command-config`."""
    path = getattr(args, "command_config", None)
    return client_security(read_command_config(path), path)
