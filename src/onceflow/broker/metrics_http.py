"""The `/metrics` endpoint: a minimal HTTP/1.1 server on the broker's own event loop.

Why on the loop rather than prometheus_client's `start_http_server` (a thread): a scrape
reads the logs, producer states, coordinators and replica states, which only the loop
changes. Read from another thread, a dict could change size under the iteration, or a
transaction be seen half moved between two of its structures. On the loop, collecting runs
between two steps of the broker and needs no lock; it takes about a millisecond for a
thousand series. Rendering the text, three times as long, works on that snapshot alone, so
it goes family by family, letting the loop serve requests in between: a scrape never holds
the loop for more than one family's lines. One request per connection, then close.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 16 * 1024
READ_TIMEOUT_S = 10.0
# Prometheus's text format, which every Prometheus version scrapes.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


async def start_metrics_server(
    registry: CollectorRegistry, host: str, port: int, *, start_serving: bool = True
) -> asyncio.Server:
    """Bind HOST:PORT (OSError if it cannot) and serve `registry` at /metrics."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await _answer(registry, reader, writer)
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError):
            pass  # the scraper went away or sent nothing usable: nothing to answer
        except asyncio.LimitOverrunError:
            with contextlib.suppress(ConnectionError):
                await _respond(writer, 431, "text/plain", b"request head too large\n")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    return await asyncio.start_server(
        handle,
        host or None,
        port,
        limit=MAX_HEAD_BYTES,
        reuse_address=True,
        start_serving=start_serving,
    )


async def _answer(
    registry: CollectorRegistry, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        await _respond(writer, 400, "text/plain", b"bad request\n")
        return
    method, target = parts[0], parts[1]
    path = target.split("?", 1)[0]
    if method not in ("GET", "HEAD"):
        await _respond(writer, 405, "text/plain", b"only GET\n", allow="GET, HEAD")
        return
    if path == "/":
        await _respond(writer, 200, "text/plain", b"Onceflow broker metrics: /metrics\n")
        return
    if path != "/metrics":
        await _respond(writer, 404, "text/plain", b"not found; try /metrics\n")
        return
    try:
        body = await render(registry)
    except Exception:
        log.exception("collecting metrics failed")
        await _respond(writer, 500, "text/plain", b"collecting metrics failed\n")
        return
    await _respond(writer, 200, CONTENT_TYPE, body, head_only=method == "HEAD")


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


_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
}


async def _respond(
    writer: asyncio.StreamWriter,
    status: int,
    content_type: str,
    body: bytes,
    *,
    head_only: bool = False,
    allow: str | None = None,
) -> None:
    headers = [
        f"HTTP/1.1 {status} {_REASONS[status]}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
        "Connection: close",
    ]
    if allow is not None:
        headers.append(f"Allow: {allow}")
    writer.write(("\r\n".join(headers) + "\r\n\r\n").encode("latin-1"))
    if not head_only:
        writer.write(body)
    await writer.drain()
