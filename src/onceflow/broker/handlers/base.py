"""What every request handler receives, and the shape of a handler."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from onceflow.errors import ErrorCode, KafkaError
from onceflow.protocol.codec import RequestHeader, build, nested, response_type

if TYPE_CHECKING:
    from onceflow.broker.broker import Broker


@dataclass(frozen=True, slots=True)
class RequestContext:
    """One request's header and the broker serving it."""

    header: RequestHeader
    broker: Broker

    @property
    def api_version(self) -> int:
        return self.header.api_version

    def response(self, **fields: Any) -> Any:
        """The response entity of this request's API and version, from the given fields."""
        return build(response_type(self.header.api_key, self.header.api_version), **fields)

    def entity(self, entity_name: str, /, **fields: Any) -> Any:
        """A nested response entity of this request's API and version."""
        return build(nested(self.header.api_key, self.header.api_version, entity_name), **fields)


# A handler takes the context and the decoded kio request, and returns the kio response.
Handler = Callable[[RequestContext, Any], Awaitable[Any]]


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


@dataclass(frozen=True, slots=True)
class RawBody:
    """A pre-encoded response body: bytes and file regions sent without copying, and the
    errors it carries (for the metrics, which cannot read them in the bytes)."""

    parts: list[Any]  # bytes | onceflow.storage.partition_log.FileRegion
    errors: tuple[ErrorCode, ...] = ()
