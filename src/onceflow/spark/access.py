"""Refused logins and denied operations: errors no retry can fix, told apart from the
transient ones the connector waits out.

librdkafka reports a failed SASL login only through `error_cb`, and a group it may not
describe only as a consumer error event, both served by `poll()`, while the blocking call
that needed them (list_topics, committed) waits out its whole timeout and then says
"transport failure" or "timed out". Kafka's Java clients treat both as fatal, and so does
the connector: such calls run in doubling slices, with the client polled in between, so a
wrong password or a missing ACL fails a query in about a second and names the reason.

A denied operation is never mistaken for a deleted topic either, so `failOnDataLoss=false`
cannot turn missing ACLs into skipped records. No message here holds a setting's value:
librdkafka's texts name no secret.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from confluent_kafka import KafkaError, KafkaException

__all__ = [
    "ACCESS_DENIED",
    "ConnectionErrors",
    "KafkaAccessError",
    "access_error",
    "await_broker",
    "check_client",
    "in_slices",
    "list_topics",
]

T = TypeVar("T")

# A login the brokers refused: wrong password, unknown user, mechanism not enabled.
REFUSED_LOGIN = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED})
# Errors that say why connections fail, where the request itself only says it failed.
CONNECTION_ERRORS = REFUSED_LOGIN | {KafkaError._SSL}
VAGUE = frozenset({KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN})
# Operations the principal may not do. GROUP_AUTHORIZATION_FAILED is not among them for
# every client: a read task's consumer looks its group up without needing it.
ACCESS_DENIED = REFUSED_LOGIN | {
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}
FIRST_SLICE_S = 1.0

SETTINGS_HINT = "check the kafka.security.protocol, kafka.sasl.* and kafka.ssl.* options"


class KafkaAccessError(Exception):
    """The brokers refused the login or denied an operation the query needs; retrying
    cannot help. The message names the error and the resource, never a secret."""


class _Client(Protocol):
    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any: ...

    def poll(self, timeout: float = -1) -> Any: ...


class ConnectionErrors:
    """librdkafka's `error_cb`, keeping the last error that says why connections fail, and
    the last error event a poll of the client returned (a consumer's, e.g. its group's
    coordinator lookup refused: librdkafka reports that once, not on every retry)."""

    def __init__(self) -> None:
        self.last: KafkaError | None = None
        self.event: KafkaError | None = None

    def __call__(self, error: KafkaError) -> None:
        if error.code() in CONNECTION_ERRORS:
            self.last = error

    def poll(self, client: _Client) -> None:
        """Serve the client's callbacks and keep the error of an event it returns."""
        event = client.poll(0)
        err = event.error() if hasattr(event, "error") else None
        if isinstance(err, KafkaError):
            self.event = err

    @property
    def refused_login(self) -> KafkaError | None:
        last = self.last
        return last if last is not None and last.code() in REFUSED_LOGIN else None


def access_error(error: KafkaError, what: str) -> KafkaAccessError:
    """`what` failed with an access error: the error's name and librdkafka's text."""
    hint = f"; {SETTINGS_HINT}" if error.code() in REFUSED_LOGIN else ""
    return KafkaAccessError(f"{what}: {error.name()}: {error.str()}{hint}")


def check_client(
    client: _Client,
    errors: ConnectionErrors,
    what: str = "",
    denied: frozenset[int] = ACCESS_DENIED,
) -> None:
    """Poll `client`: a refused login its `error_cb` saw, or an error event with a
    `denied` code, is raised as a KafkaAccessError."""
    errors.poll(client)
    event = errors.event
    if event is not None and event.code() in denied:
        raise access_error(event, what or "denied")
    refused = errors.refused_login
    if refused is not None:
        raise access_error(refused, "cannot log in to Kafka")


def in_slices(
    call: Callable[[float], T], check: Callable[[], None], errors: ConnectionErrors, timeout: float
) -> T:
    """`call(slice timeout)` until it succeeds, in doubling slices up to `timeout` seconds
    in all, so a slow cluster still gets the whole time. Only vague failures (transport,
    time-out) are tried again; `check()` runs after each, to raise what the client reported
    meanwhile. At the deadline the error says what the connections failed with."""
    deadline = time.monotonic() + timeout
    slice_s = FIRST_SLICE_S
    while True:
        remaining = deadline - time.monotonic()
        try:
            result = call(max(min(slice_s, remaining), 0.01))
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if not isinstance(err, KafkaError) or err.code() not in VAGUE:
                raise
            check()
            if time.monotonic() >= deadline:
                if errors.last is None:
                    raise
                raise KafkaException(
                    KafkaError(err.code(), f"{err.str()} ({errors.last.str()})")
                ) from exc
            slice_s *= 2
        else:
            errors.last = None
            return result


def await_broker(
    client: _Client, errors: ConnectionErrors | None, timeout_s: float, topic: str
) -> None:
    """Return once a new client holds a connection to a broker Metadata named. librdkafka
    drops its bootstrap connection when the first Metadata answer names the brokers, and a
    request that then finds no broker connected waits for a timer: 500 ms for a producer's
    init_transactions (about one start in five paid it), one to three seconds for an admin
    client's ListOffsets (about one in twenty-five). A second Metadata request waits for
    the named broker's connection instead."""
    for _ in range(2):
        if errors is None:
            client.list_topics(topic, timeout=timeout_s)
        else:
            list_topics(client, errors, timeout_s, topic)


def list_topics(
    client: _Client, errors: ConnectionErrors, timeout_s: float, topic: str | None = None
) -> Any:
    """`client.list_topics()` that fails at once on a refused login (`errors` is the
    client's `error_cb`)."""
    md = in_slices(
        lambda t: client.list_topics(topic, timeout=t),
        lambda: check_client(client, errors),
        errors,
        timeout_s,
    )
    errors.poll(client)  # drains what was queued while all went well
    return md
