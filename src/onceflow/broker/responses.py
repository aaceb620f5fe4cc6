"""What a handler may return besides a kio response: later, pre-encoded, or nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from onceflow.errors import ErrorCode, KafkaError


class NoResponse:
    """Returned for requests Kafka never answers (Produce with acks=0)."""


NO_RESPONSE = NoResponse()


@dataclass(frozen=True, slots=True)
class Deferred:
    """A response that is ready once every future in `waits` is done (e.g. once appended
    data is durable).

    The connection moves on to its next request meanwhile; responses still leave in order.
    The writer awaits the futures itself: no task per response on the produce hot path.
    With `finish`, a future that fails with a KafkaError does not close the connection:
    `finish` gets each future's error (None for success) and returns the response to send.
    """

    waits: list[asyncio.Future[None]]
    response: Any
    finish: Callable[[list[KafkaError | None]], Any] | None = None


def answered_later(answer: asyncio.Future[Any]) -> Deferred:
    """The response `answer` resolves to: the connection's next request is handled
    meanwhile (a transaction coordinator's add waiting for the previous transaction)."""
    return Deferred([answer], answer)


@dataclass(frozen=True, slots=True)
class RawBody:
    """A pre-encoded response body: bytes and file regions sent without copying, and the
    errors it carries (for the metrics, which cannot read them in the bytes)."""

    parts: list[Any]  # bytes | onceflow.storage.partition_log.FileRegion
    errors: tuple[ErrorCode, ...] = ()
