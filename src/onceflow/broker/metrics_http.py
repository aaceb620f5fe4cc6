"""The `/metrics` endpoint: aiohttp's low-level HTTP server on the broker's own event loop.

Why on the loop rather than prometheus_client's `start_http_server` (a thread): a scrape
reads the logs, producer states, coordinators and replica states, which only the loop
changes. Read from another thread, a dict could change size under the iteration, or a
transaction be seen half moved between two of its structures. On the loop, collecting runs
between two steps of the broker and needs no lock; it takes about a millisecond for a
thousand series. Rendering the text, three times as long, works on that snapshot alone, so
it goes family by family, letting the loop serve requests in between: a scrape never holds
the loop for more than one family's lines. One request per connection, then close.

Why aiohttp's `web.Server` and not an `Application`: two paths need no router, and the
protocol handler is ours to choose, so a request head too large is answered 431 and a
malformed request 400, both without the traceback aiohttp logs for them (a port scanner's
noise is no broker error).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from functools import partial

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 16 * 1024
# A connection that has not sent a whole request head by then is closed.
READ_TIMEOUT_S = 10.0
# Prometheus's text format, which every Prometheus version scrapes.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


async def start_metrics_server(
    registry: CollectorRegistry, host: str, port: int, *, start_serving: bool = True
) -> asyncio.Server:
    """Bind HOST:PORT (OSError if it cannot) and serve `registry` at /metrics."""
    loop = asyncio.get_running_loop()
    server = web.Server(partial(_answer, registry), loop=loop)

    def protocol() -> _Handler:
        return _Handler(
            server,
            loop=loop,
            keepalive_timeout=READ_TIMEOUT_S,
            # No access log, as web.run_app(access_log=None): typed as a Logger only.
            access_log=None,  # type: ignore[arg-type]
            max_line_size=MAX_HEAD_BYTES,
            max_field_size=MAX_HEAD_BYTES,
        )

    return await loop.create_server(
        protocol, host or None, port, reuse_address=True, start_serving=start_serving
    )


class _Handler(web.RequestHandler):
    """aiohttp's protocol handler, with its answers to requests it could not parse."""

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if isinstance(exc, LineTooLong):
            return _response(431, b"request head too large\n")
        if isinstance(exc, HttpProcessingError):
            return _response(400, b"bad request\n")
        return super().handle_error(request, status, exc, message)


async def _answer(registry: CollectorRegistry, request: web.BaseRequest) -> web.StreamResponse:
    if request.method not in ("GET", "HEAD"):
        return _response(405, b"only GET\n", headers={"Allow": "GET, HEAD"})
    if request.path == "/":
        return _response(200, b"Onceflow broker metrics: /metrics\n")
    if request.path != "/metrics":
        return _response(404, b"not found; try /metrics\n")
    try:
        body = await render(registry)
    except Exception:
        log.exception("collecting metrics failed")
        return _response(500, b"collecting metrics failed\n")
    return _response(200, body, content_type=CONTENT_TYPE)


def _response(
    status: int,
    body: bytes,
    *,
    content_type: str = "text/plain",
    headers: dict[str, str] | None = None,
) -> web.Response:
    """One answer, then the connection closes (aiohttp's HEAD answer has no body)."""
    response = web.Response(
        status=status, body=body, headers={**(headers or {}), "Content-Type": content_type}
    )
    response.force_close()
    return response


class _Collected(Collector):
    """Families collected already, for the encoder."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


async def render(registry: CollectorRegistry) -> bytes:
    """The text exposition: one snapshot of every family, then its text family by family,
    with the loop free in between."""
    families = list(registry.collect())
    parts = []
    for family in families:
        parts.append(generate_latest(_Collected([family])))
        await asyncio.sleep(0)
    return b"".join(parts)
