"""What the console was started with, and the Kafka client settings derived from it."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from onceflow.cli.common import CliError
from onceflow.config import ConfigError, read_properties

__all__ = ["ConsoleSettings", "read_command_config"]

# librdkafka's connection chatter (a cluster that went away logs every reconnect) stays here.
KAFKA_LOG = logging.getLogger("onceflow.console.librdkafka")
KAFKA_LOG.setLevel(logging.CRITICAL + 1)

# Reconnect within a second of a broker coming back (librdkafka's default backs off to 10 s).
CLIENT_DEFAULTS: dict[str, Any] = {
    "reconnect.backoff.ms": 100,
    "reconnect.backoff.max.ms": 1000,
}


def read_command_config(path: str | None) -> dict[str, str]:
    """Kafka client properties (`--command-config`), passed through to the clients."""
    if path is None:
        return {}
    try:
        return read_properties(path)
    except ConfigError as exc:
        raise CliError(str(exc)) from None


@dataclass(frozen=True, slots=True)
class ConsoleSettings:
    bootstrap: str
    timeout_s: float = 10.0
    # transaction.max.timeout.ms of the cluster: an open transaction idle longer is a
    # candidate for find-hanging (as `onceflow transactions find-hanging` does).
    max_transaction_timeout_ms: int = 15 * 60_000
    properties: dict[str, str] = field(default_factory=dict)

    def client_config(self, **extra: Any) -> dict[str, Any]:
        """librdkafka settings: ours, then the user's properties, which win."""
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "logger": KAFKA_LOG,
            "socket.timeout.ms": max(int(self.timeout_s * 1000), 10),
            **CLIENT_DEFAULTS,
            **extra,
        }
        config.update(self.properties)
        return config

    def check_wire_support(self) -> None:
        """The KIP-664 pages use our own protocol client, which speaks PLAINTEXT only."""
        protocol = self.properties.get("security.protocol", "PLAINTEXT").upper()
        if protocol != "PLAINTEXT":
            raise CliError(
                f"the transaction pages need a PLAINTEXT listener; security.protocol={protocol} "
                "is not supported by onceflow's admin client yet"
            )
