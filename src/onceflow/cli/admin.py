"""The AdminClient of the admin commands (topics, acls, users): bootstrap probe, security."""

from __future__ import annotations

import argparse
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from onceflow.cli.command_config import security_properties
from onceflow.cli.common import CliError, client_config, describe_kafka_error, probe_bootstrap

__all__ = ["connect_admin"]


def connect_admin(args: argparse.Namespace) -> Any:
    """An AdminClient for the command's bootstrap servers, `--command-config` and
    `--property` settings (when the command has them)."""
    security = security_properties(args)
    probe_bootstrap(args.bootstrap_server)
    config = client_config(args.bootstrap_server, getattr(args, "property", ()), security)
    try:
        admin: Any = AdminClient(config)
    except (KafkaException, ValueError, TypeError) as exc:
        raise CliError(f"bad client setting: {describe_kafka_error(exc)}") from None
    admin.connection_errors = config["error_cb"]  # for explain_failure
    return admin
