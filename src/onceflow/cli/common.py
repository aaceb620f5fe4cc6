"""Pieces every command shares: the user-error exception, argument types, client settings.

The client commands (topics, produce, consume) speak only the Kafka protocol through
confluent-kafka, so they work against any Kafka-compatible broker. librdkafka retries an
unreachable broker quietly for as long as a timeout allows and logs every failed connect; a
command line tool should instead say once, quickly, that nothing answers. Hence the TCP probe
of the bootstrap servers and the client logger that stays silent unless `--verbose`.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import socket
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import KafkaError

from onceflow.client.librdkafka import describe_kafka_error

__all__ = [
    "DEFAULT_BOOTSTRAP",
    "KAFKA_LOG",
    "CliError",
    "ConnectionErrors",
    "UsageError",
    "add_bootstrap_option",
    "client_config",
    "describe_kafka_error",
    "explain_failure",
    "host_port",
    "key_value",
    "non_negative_int",
    "positive_int",
    "probe_bootstrap",
]

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
PROBE_TIMEOUT_S = 5.0

# librdkafka's own log lines (connection failures, the mock cluster banner) go here. Its level
# is set by main: hidden unless --verbose, because failures reach the user as one clear line.
KAFKA_LOG = logging.getLogger("onceflow.cli.librdkafka")


class CliError(Exception):
    """A failure the user can act on: main prints the message on one line and exits 1, as
    it does for the client package's own `ClientError`."""


class UsageError(CliError):
    """A bad combination of arguments that argparse cannot express: exit 2 with the usage."""


def key_value(text: str) -> tuple[str, str]:
    """argparse type for `KEY=VALUE`; the value may itself contain `=`."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def host_port(text: str) -> str:
    """argparse type for `HOST:PORT` (IPv6 hosts in brackets), kept as the text given."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT with a port 0-65535, got {text!r}")
    if ":" in host and not (host.startswith("[") and host.endswith("]")):
        raise argparse.ArgumentTypeError(f"an IPv6 host needs brackets: [{host}]:{port}")
    return text


def _int_at_least(lowest: int, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < lowest:
        raise argparse.ArgumentTypeError(f"expected an integer >= {lowest}, got {value}")
    return value


def positive_int(text: str) -> int:
    """argparse type for counts such as partitions and messages."""
    return _int_at_least(1, text)


def positive_float(text: str) -> float:
    """argparse type for rates and durations: a finite number above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):  # `not >` also rejects nan
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text}")
    return value


def non_negative_int(text: str) -> int:
    """argparse type for partitions, offsets and timeouts."""
    return _int_at_least(0, text)


def add_bootstrap_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-server",
        default=DEFAULT_BOOTSTRAP,
        metavar="HOST:PORT[,...]",
        help=f"broker(s) to bootstrap from (default {DEFAULT_BOOTSTRAP})",
    )


class ConnectionErrors:
    """librdkafka's `error_cb`: keeps the last error saying why connections fail (a refused
    login, a certificate not trusted), which a request only reports as a transport failure.
    librdkafka calls it from poll(), so `explain` polls the client first."""

    CODES = frozenset(
        {KafkaError._AUTHENTICATION, KafkaError._SSL, KafkaError.SASL_AUTHENTICATION_FAILED}
    )
    VAGUE = frozenset({KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT})

    def __init__(self) -> None:
        self.last: str | None = None

    def __call__(self, error: Any) -> None:
        if error.code() in self.CODES:
            self.last = str(error.str())

    def explain(self, exc: BaseException, client: Any) -> str:
        """describe_kafka_error, with the connection error behind a vague one."""
        text = describe_kafka_error(exc)
        error = exc.args[0] if exc.args else None
        if not isinstance(error, KafkaError) or error.code() not in self.VAGUE:
            return text
        with contextlib.suppress(Exception):
            client.poll(0)
        return text if self.last is None else f"{text} ({self.last})"


def explain_failure(exc: BaseException, client: Any) -> str:
    """The readable part of a client's exception, with the cause its `error_cb` saw."""
    errors = getattr(client, "connection_errors", None)
    if isinstance(errors, ConnectionErrors):
        return errors.explain(exc, client)
    return describe_kafka_error(exc)


def client_config(
    bootstrap: str,
    properties: Iterable[tuple[str, str]] = (),
    security: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """librdkafka settings: the bootstrap servers, our logger and error callback, the
    `--command-config` security settings (already librdkafka's names), then the user's
    pass-through.

    The user's properties come last so an expert can override anything, the logger included.
    """
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "logger": KAFKA_LOG,
        "error_cb": ConnectionErrors(),
    }
    config.update(security or {})
    config.update(dict(properties))
    return config


def _split_servers(bootstrap: str) -> list[tuple[str, int]]:
    servers: list[tuple[str, int]] = []
    for item in bootstrap.split(","):
        item = item.strip()
        if "://" in item:
            item = item.split("://", 1)[1]
        host, sep, port = item.rpartition(":")
        if not item or not sep or not port.isdigit():
            raise CliError(f"bad bootstrap server {item!r}: expected HOST:PORT")
        servers.append((host.removeprefix("[").removesuffix("]") or "localhost", int(port)))
    return servers


def probe_bootstrap(bootstrap: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Fail fast, with one line, when no bootstrap server accepts a TCP connection.

    Only a TCP connect, closed at once: it says nothing on the wire, so it works the same
    on a TLS or SASL listener (the broker sees a client that went away before speaking).

    librdkafka would otherwise retry until the request timeout and then report a generic
    transport failure. A server that accepts is left to librdkafka: it may still speak
    something else, and librdkafka's own error says so better than a guess here.
    """
    failures: list[str] = []
    for host, port in _split_servers(bootstrap):
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                return
        except OSError as exc:
            reason = exc.strerror or str(exc) or type(exc).__name__
            failures.append(f"{host}:{port} ({reason})")
    raise CliError(f"cannot connect to any bootstrap server: {', '.join(failures)}")
