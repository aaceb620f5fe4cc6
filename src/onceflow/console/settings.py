"""What the console was started with, and the Kafka client settings derived from it."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from onceflow.client.errors import ConfigError
from onceflow.client.librdkafka import librdkafka_properties
from onceflow.client.properties import client_security, read_command_config
from onceflow.security.client_config import ClientSecurity

__all__ = ["ConsoleSettings", "Security", "security_from_file"]

# librdkafka's connection chatter (a cluster that went away logs every reconnect) stays here.
KAFKA_LOG = logging.getLogger("onceflow.console.librdkafka")
KAFKA_LOG.setLevel(logging.CRITICAL + 1)

# Reconnect within a second of a broker coming back (librdkafka's default backs off to 10 s).
CLIENT_DEFAULTS: dict[str, Any] = {
    "reconnect.backoff.ms": 100,
    "reconnect.backoff.max.ms": 1000,
}


@dataclass(frozen=True, slots=True)
class Security:
    """`--command-config` for both kinds of client: librdkafka's settings, and the
    security of Onceflow's own protocol client, or why that client cannot use the file
    (a mechanism only librdkafka has, say: then only the transaction pages say so)."""

    librdkafka: dict[str, str] = field(default_factory=dict)
    wire: ClientSecurity | None = None
    wire_error: str | None = None


def security_from_file(path: str | None) -> Security:
    """The client security settings of a `--command-config` file (none without one).
    A file librdkafka cannot use is an error at start."""
    props = read_command_config(path)
    librdkafka = librdkafka_properties(props)
    try:
        return Security(librdkafka, client_security(props, path))
    except ConfigError as exc:
        return Security(librdkafka, None, f"the transaction pages cannot use it: {exc}")


@dataclass(frozen=True, slots=True)
class ConsoleSettings:
    bootstrap: str
    timeout_s: float = 10.0
    # transaction.max.timeout.ms of the cluster: an open transaction idle longer is a
    # candidate for find-hanging (as `onceflow transactions find-hanging` does).
    max_transaction_timeout_ms: int = 15 * 60_000
    security: Security = field(default_factory=Security)

    def client_config(self, **extra: Any) -> dict[str, Any]:
        """librdkafka settings: ours, then the user's security settings, which win."""
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "logger": KAFKA_LOG,
            "socket.timeout.ms": max(int(self.timeout_s * 1000), 10),
            **CLIENT_DEFAULTS,
            **extra,
        }
        config.update(self.security.librdkafka)
        return config

    def wire_security(self) -> ClientSecurity | None:
        """The security of the KIP-664 pages' protocol client; ConfigError if it has none."""
        if self.security.wire_error is not None:
            raise ConfigError(self.security.wire_error)
        return self.security.wire
