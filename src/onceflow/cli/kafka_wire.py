"""The CLI's edge of Onceflow's own protocol client (`onceflow.client`).

`wire_cluster` opens the client for a command's bootstrap servers, timeout and
`--command-config`. The client raises its own `ClientError`s, which main prints as it
prints a `CliError`. `Connection` turns them into `CliError` itself, for the one caller
that catches `CliError` around a bare connection (`onceflow cluster` waiting for its
brokers to answer).
"""

from __future__ import annotations

import argparse

from onceflow.cli.command_config import wire_security
from onceflow.cli.common import CliError
from onceflow.client import blocking
from onceflow.client.cluster import Cluster
from onceflow.client.errors import ClientError
from onceflow.security.client_config import ClientSecurity

__all__ = ["Connection", "wire_cluster"]


def wire_cluster(args: argparse.Namespace) -> Cluster:
    """Onceflow's protocol client for the command's bootstrap servers and security."""
    return Cluster(args.bootstrap_server, args.timeout_ms / 1000.0, wire_security(args))


class Connection(blocking.Connection):
    """A blocking connection whose failures to connect or to answer ApiVersions are
    CliErrors."""

    def __init__(
        self,
        host: str,
        port: int,
        timeout_s: float = blocking.DEFAULT_TIMEOUT_S,
        security: ClientSecurity | None = None,
    ) -> None:
        try:
            super().__init__(host, port, timeout_s, security)
        except ClientError as exc:
            raise CliError(str(exc)) from None

    @property
    def versions(self) -> dict[int, tuple[int, int]]:
        try:
            return super().versions
        except ClientError as exc:
            raise CliError(str(exc)) from None
