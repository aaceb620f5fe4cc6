"""The CLI's edge of Onceflow's own protocol client (`onceflow.client`).

`wire_cluster` opens the client for a command's bootstrap servers, timeout and
`--command-config`. The client raises its own `ClientError`s, which main prints as it
prints a `CliError`.
"""

from __future__ import annotations

import argparse

from onceflow.cli.command_config import wire_security
from onceflow.client.cluster import Cluster

__all__ = ["wire_cluster"]


def wire_cluster(args: argparse.Namespace) -> Cluster:
    """Onceflow's protocol client for the command's bootstrap servers and security."""
    return Cluster(args.bootstrap_server, args.timeout_ms / 1000.0, wire_security(args))
