"""The quota check after each request (KIP-219): measure what the request cost its client,
put the throttle time it earned in the response, and say how long to mute the connection.

As Kafka does: a produce's bytes are its request's, a consumer fetch's its response's; a
fetch of a client over its budget is answered empty, its records not counted, so the client
gets them after the pause. Better than Kafka, which decides that after counting the
response: a fetch of a client within its budget is sent even when it takes the budget over
(with the throttle time it earns), as a produce is, and an empty answer's throttle time is
how long the budget needs to be within again, not that plus the refused records' share.
On Kafka a batch bigger than the budget's window stalls its consumer for ever, and a
consumer is paused about twice as long as its quota asks.

Every request but the exempt ones counts its handler time against `request_percentage`;
CreateTopics, CreatePartitions and DeleteTopics also answer how long the client's
`controller_mutation_rate` bucket needs to refill. The response leaves at once (to a client
of a Produce or Fetch version from before KIP-219 only after the throttle time, as Kafka
holds it); the connection then reads nothing more from the client for the throttle time,
so a client that ignores `throttle_time_ms` is held back all the same.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import struct
import time
from collections.abc import Awaitable, Generator
from typing import Any

from onceflow.broker.handlers.base import RequestContext
from onceflow.broker.quotas import ClientQuotas, QuotaType
from onceflow.broker.responses import Deferred, NoResponse, RawBody
from onceflow.errors import ErrorCode
from onceflow.protocol import codec
from onceflow.protocol.api_versions import ApiKey
from onceflow.storage.partition_log import FileRegion

#: The first version of an API whose clients pause for throttle_time_ms themselves
#: (KIP-219); to older ones Kafka sends a throttled response only after the pause.
CLIENT_THROTTLES_FROM: dict[int, int] = {ApiKey.PRODUCE: 6, ApiKey.FETCH: 8}
#: The APIs that create or delete partitions (controller_mutation_rate, KIP-599).
MUTATING_APIS = frozenset({ApiKey.CREATE_TOPICS, ApiKey.CREATE_PARTITIONS, ApiKey.DELETE_TOPICS})
#: Never throttled (Kafka exempts these: the handshake, and brokers' own requests).
EXEMPT = frozenset(
    {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE, ApiKey.WRITE_TXN_MARKERS}
)
_I32 = struct.Struct(">i")


def _replica_id(ctx: RequestContext, request: Any) -> int:
    if ctx.api_version < 15:
        return int(request.replica_id)
    return int(request.replica_state.replica_id)


def _size(body: RawBody) -> int:
    return sum(p.size if isinstance(p, FileRegion) else len(p) for p in body.parts)


def apply_quotas(
    quotas: ClientQuotas,
    ctx: RequestContext,
    request: Any,
    result: Any,
    request_bytes: int,
    handler_seconds: float,
) -> tuple[Any, int]:
    """The response to send and the milliseconds to mute the connection for."""
    api_key = ctx.header.api_key
    if api_key in EXEMPT:
        return result, 0
    if api_key == ApiKey.FETCH and _replica_id(ctx, request) >= 0:
        return result, 0  # a follower's fetch: replication throttles, not client quotas
    principal = ctx.session.principal
    client_id = ctx.header.client_id or ""
    delay, sensor = quotas.record_request_time(principal, client_id, handler_seconds)
    if api_key in MUTATING_APIS:  # KIP-599: the time until the mutation budget recovers
        bucket = quotas.mutation_bucket(principal, client_id)
        if bucket is not None:
            mutation_delay = bucket.delay_ms(quotas.clock.monotonic_ms())
            if mutation_delay > delay:
                delay, sensor = mutation_delay, None
    if api_key == ApiKey.PRODUCE:
        byte_delay, byte_sensor = quotas.record(
            QuotaType.PRODUCE, principal, client_id, request_bytes
        )
        if byte_delay > delay:
            delay, sensor = byte_delay, byte_sensor
    elif api_key == ApiKey.FETCH and isinstance(result, RawBody):
        over_ms, byte_sensor = quotas.over_quota(QuotaType.FETCH, principal, client_id)
        if over_ms > 0:  # over its budget already: the records wait, nothing is counted
            if over_ms > delay:
                delay, sensor = over_ms, byte_sensor
            return _held_if_old(ctx, _empty_fetch(ctx, delay), delay), _counted(sensor, delay)
        byte_delay, byte_sensor = quotas.record(
            QuotaType.FETCH, principal, client_id, _size(result)
        )
        if byte_delay > delay:
            delay, sensor = byte_delay, byte_sensor
    if delay <= 0:
        return result, 0
    return _held_if_old(ctx, with_throttle(result, delay), delay), _counted(sensor, delay)


def _held_if_old(ctx: RequestContext, result: Any, delay: int) -> Any:
    """A response to a client from before KIP-219, sent only once the throttle time has
    passed, as Kafka does: such a client would not pause by itself."""
    if ctx.header.api_version >= CLIENT_THROTTLES_FROM.get(ctx.header.api_key, 0):
        return result
    if isinstance(result, NoResponse):
        return result
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def release() -> None:
        if not done.done():
            done.set_result(None)

    loop.call_later(delay / 1000, release)
    if isinstance(result, Deferred):
        return Deferred([*result.waits, done], result.response, result.finish)
    return Deferred([done], result)


def _counted(sensor: Any, delay: int) -> int:
    if sensor is not None:
        sensor.throttled(delay)
    return delay


def _empty_fetch(ctx: RequestContext, delay: int) -> RawBody:
    """Kafka's throttled fetch response: no partitions, only the throttle time."""
    body = ctx.response(
        throttle_time=datetime.timedelta(milliseconds=delay),
        error_code=ErrorCode.none,
        session_id=0,
        responses=(),
    )
    return RawBody([codec.encode_body(body)])


def with_throttle(result: Any, delay: int) -> Any:
    """The response with its throttle_time_ms set, whatever form the handler gave it in."""
    if isinstance(result, NoResponse):
        return result
    if isinstance(result, Deferred):
        finish = result.finish
        return Deferred(
            result.waits,
            with_throttle(result.response, delay),
            None if finish is None else lambda errors: with_throttle(finish(errors), delay),
        )
    if isinstance(result, RawBody):  # a fetch: throttle_time_ms is the body's first field
        head = bytes(result.parts[0])
        return RawBody([_I32.pack(delay) + head[4:], *result.parts[1:]], result.errors)
    if (
        dataclasses.is_dataclass(result)
        and not isinstance(result, type)
        and hasattr(result, "throttle_time")
    ):
        return dataclasses.replace(result, throttle_time=datetime.timedelta(milliseconds=delay))
    return result  # an API without a throttle field: the mute alone holds the client back


class timed:  # used like a function: `await timed(coroutine)`
    """Await a coroutine and add up the time spent running it, its waits left out: the
    handler's share of the event loop, as Kafka counts a request's thread time."""

    __slots__ = ("_awaitable", "seconds")

    def __init__(self, awaitable: Awaitable[Any]) -> None:
        self._awaitable = awaitable
        self.seconds = 0.0

    def __await__(self) -> Generator[Any, Any, Any]:
        coroutine = self._awaitable.__await__()
        value: Any = None
        error: BaseException | None = None
        while True:
            began = time.perf_counter()
            try:
                step = coroutine.send(value) if error is None else coroutine.throw(error)
            except StopIteration as stop:
                return stop.value
            finally:
                self.seconds += time.perf_counter() - began
            try:
                value, error = (yield step), None
            except BaseException as exc:  # cancellation and the like go to the coroutine
                value, error = None, exc
