"""The console's web server (aiohttp): the static page and its JSON endpoints.

Every Kafka call is blocking, so it runs in a small thread pool, never on the event loop,
and is awaited for at most the call timeout plus a margin. Any failure is a JSON answer
(`{"error": ...}`) that the page shows as its error state: never a traceback page.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from importlib.resources import files
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web

from onceflow.client.errors import ClientError
from onceflow.console import groups_view, records_view, share_groups_view, topics_view, txn_view
from onceflow.console.clients import ActionRefused, BadRequest, ClusterUnavailable, KafkaClients
from onceflow.console.settings import ConsoleSettings

__all__ = ["make_app"]

LOG = logging.getLogger("onceflow.console")
STATIC_DIR = Path(str(files("onceflow.console") / "static"))
WORKERS = 8
MARGIN_S = 2.0
T = TypeVar("T")
CLIENTS: web.AppKey[KafkaClients] = web.AppKey("clients", KafkaClients)
POOL: web.AppKey[ThreadPoolExecutor] = web.AppKey("pool", ThreadPoolExecutor)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def _in_thread(request: web.Request, fn: Callable[..., T], *args: Any) -> T:
    clients = request.app[CLIENTS]
    loop = asyncio.get_running_loop()
    future = loop.run_in_executor(request.app[POOL], fn, clients, *args)
    try:
        return await asyncio.wait_for(future, clients.timeout_s + MARGIN_S)
    except TimeoutError:
        raise ClusterUnavailable(
            f"the cluster did not answer within {clients.timeout_s:g} s"
        ) from None


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


@web.middleware
async def errors_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except BadRequest as exc:
        return _error(400, str(exc))
    except ActionRefused as exc:
        return _error(409, str(exc))
    except (ClusterUnavailable, ClientError) as exc:
        return _error(503, str(exc))
    except Exception as exc:
        LOG.exception("console request %s failed", request.path)
        return _error(500, f"internal error: {type(exc).__name__}: {exc}")


def _int(request: web.Request, name: str, default: int | None = None) -> int | None:
    text = request.query.get(name) or request.match_info.get(name)
    if text in (None, ""):
        return default
    try:
        return int(text)
    except ValueError:
        raise BadRequest(f"{name} must be an integer, not {text!r}") from None


async def index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC_DIR / "index.html")


async def health(request: web.Request) -> web.Response:
    return web.json_response({"ok": True, "bootstrap": request.app[CLIENTS].settings.bootstrap})


async def overview(request: web.Request) -> web.Response:
    return web.json_response(await _in_thread(request, topics_view.overview))


async def topic(request: web.Request) -> web.Response:
    name = request.match_info["topic"]
    return web.json_response(await _in_thread(request, topics_view.topic_detail, name))


async def groups(request: web.Request) -> web.Response:
    return web.json_response(await _in_thread(request, groups_view.groups))


async def share_groups(request: web.Request) -> web.Response:
    return web.json_response(await _in_thread(request, share_groups_view.share_groups))


async def transactions(request: web.Request) -> web.Response:
    return web.json_response(await _in_thread(request, txn_view.transactions))


async def producers(request: web.Request) -> web.Response:
    name, partition = request.match_info["topic"], _int(request, "partition")
    return web.json_response(await _in_thread(request, txn_view.producers, name, partition))


async def hanging(request: web.Request) -> web.Response:
    return web.json_response(await _in_thread(request, txn_view.hanging))


async def abort(request: web.Request) -> web.Response:
    try:
        body = await request.json()
        name, partition, start = str(body["topic"]), int(body["partition"]), int(body["start"])
    except (ValueError, KeyError, TypeError):
        raise BadRequest("expected JSON {topic, partition, start}") from None
    LOG.warning("aborting the transaction at offset %d of %s-%d", start, name, partition)
    result = await _in_thread(request, txn_view.abort_hanging, name, partition, start)
    return web.json_response(result)


async def records(request: web.Request) -> web.Response:
    """?timestamp=MS, else ?offset=N, else ?from=end (the last `limit` offsets) or
    ?from=earliest (the default); the page's follow mode asks again with ?offset=next."""
    q = request.query
    start = q.get("from") or "earliest"
    if start not in ("earliest", "end"):
        raise BadRequest(f"from must be earliest or end, not {start!r}")
    result = await _in_thread(
        request,
        lambda clients: records_view.browse(
            clients,
            request.match_info["topic"],
            _int(request, "partition") or 0,
            isolation=q.get("isolation", "read_committed"),
            offset=_int(request, "offset"),
            timestamp_ms=_int(request, "timestamp"),
            from_end=start == "end",
            limit=_int(request, "limit", 50) or 50,
            fmt=q.get("format", "text"),
        ),
    )
    return web.json_response(result)


def make_app(settings: ConsoleSettings) -> web.Application:
    app = web.Application(middlewares=[errors_as_json])
    app[CLIENTS] = KafkaClients(settings)
    app[POOL] = ThreadPoolExecutor(WORKERS, thread_name_prefix="console-kafka")

    async def close_pool(app: web.Application) -> None:
        app[POOL].shutdown(wait=False, cancel_futures=True)

    app.on_cleanup.append(close_pool)
    app.router.add_get("/", index)
    app.router.add_static("/static/", STATIC_DIR)
    app.router.add_get("/api/health", health)
    app.router.add_get("/api/overview", overview)
    app.router.add_get("/api/topics/{topic}", topic)
    app.router.add_get("/api/topics/{topic}/{partition}/producers", producers)
    app.router.add_get("/api/topics/{topic}/{partition}/records", records)
    app.router.add_get("/api/groups", groups)
    app.router.add_get("/api/share-groups", share_groups)
    app.router.add_get("/api/transactions", transactions)
    app.router.add_get("/api/hanging", hanging)
    app.router.add_post("/api/hanging/abort", abort)
    return app
