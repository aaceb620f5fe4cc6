"""`onceflow serve`: run one broker process until SIGTERM or SIGINT.

Startup takes an exclusive lock on the data dir, so a second broker on the same dir is
refused. Shutdown stops accepting, lets in-flight requests finish, flushes, closes segments
and writes the clean-shutdown marker that lets the next start skip recovery scans.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import signal
from collections.abc import Callable

from onceflow.allocator import keep_freed_memory
from onceflow.broker.broker import Broker
from onceflow.broker.handlers.registry import HANDLERS
from onceflow.broker.metrics_http import start_metrics_server
from onceflow.broker.security import ListenerSecurity, SecuritySetupError, listener_security
from onceflow.broker.server import KafkaConnection, TlsAcceptor
from onceflow.broker.topology.zookeeper import ClusterStartupError
from onceflow.config import BrokerConfig

log = logging.getLogger("onceflow.broker")

LOCK_FILE = ".lock"
# How long shutdown waits for in-flight requests before closing connections.
DRAIN_SECONDS = 5.0


class StartupError(Exception):
    """A clear, expected reason the broker cannot start (exit code 1, no traceback)."""


def lock_data_dir(path: str) -> int:
    os.makedirs(path, exist_ok=True)
    fd = os.open(os.path.join(path, LOCK_FILE), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        raise StartupError(
            f"data dir {path} is locked by another broker (or cannot be locked: {exc.strerror})"
        ) from exc
    return fd


async def run_broker(config: BrokerConfig, stop: asyncio.Event) -> None:
    data_dir = os.path.abspath(config.log_dirs[0])
    try:
        lock_fd = lock_data_dir(data_dir)
    except OSError as exc:
        # Any OSError, not only PermissionError: a data dir under a regular file (ENOTDIR),
        # on a read-only file system (EROFS) and the like ended in a traceback, not the
        # one-line error and exit code 1 promised for a data dir that cannot be locked.
        raise StartupError(f"cannot use data dir {data_dir}: {exc.strerror}") from exc
    try:
        broker = Broker(config)
        secured = [listener_security(config, listener) for listener in config.listeners]
    except SecuritySetupError as exc:
        os.close(lock_fd)
        raise StartupError(str(exc)) from exc
    loop = asyncio.get_running_loop()
    servers: list[asyncio.Server] = []
    for listener, security in zip(config.listeners, secured, strict=True):
        try:
            # Bind before loading logs, so a taken port fails fast; serve once loaded.
            servers.append(
                await loop.create_server(
                    _connection_factory(broker, security),
                    listener.host or None,
                    listener.port,
                    reuse_address=True,
                    start_serving=False,
                )
            )
        except OSError as exc:
            os.close(lock_fd)
            for server in servers:
                server.close()
            raise StartupError(
                f"cannot listen on {listener.host}:{listener.port}: {exc.strerror}"
            ) from exc
    metrics_server = None
    metrics_at = config.onceflow_metrics_listener
    if metrics_at is not None and broker.metrics is not None:
        try:
            metrics_server = await start_metrics_server(
                broker.metrics.registry, metrics_at.host, metrics_at.port, start_serving=False
            )
        except OSError as exc:
            os.close(lock_fd)
            _close_all(servers)
            raise StartupError(
                f"cannot listen for metrics on {metrics_at.address} "
                f"(onceflow.metrics.listener): {exc.strerror or exc}"
            ) from exc
    try:
        await broker.start()
    except ClusterStartupError as exc:
        os.close(lock_fd)
        _close_all(servers)
        if metrics_server is not None:
            metrics_server.close()
        await broker.stop()
        raise StartupError(f"cannot join the cluster: {exc}") from exc
    except OSError as exc:
        # Recovery writes a little (indexes, the coordinator epoch): on a disk with no
        # space at all, or one that fails, the broker says so instead of a traceback.
        os.close(lock_fd)
        _close_all(servers)
        if metrics_server is not None:
            metrics_server.close()
        broker.disk.refresh(force=True)
        usage = broker.disk.usage
        raise StartupError(
            f"cannot recover data dir {data_dir}: {exc} ({usage.free} bytes free of "
            f"{usage.total}); free some space or fix the disk, then start again"
        ) from exc
    try:
        for server in servers:
            await server.start_serving()
        log.info(
            "Onceflow broker %d listening on %s (advertised %s), data dir %s",
            broker.node_id,
            ", ".join(str(listener) for listener in config.listeners),
            ", ".join(str(ad) for ad in config.effective_advertised_listeners()),
            data_dir,
        )
        if metrics_server is not None:
            await metrics_server.start_serving()
            host, port = metrics_server.sockets[0].getsockname()[:2]
            log.info("Prometheus metrics at http://%s:%d/metrics", host, port)
        await stop.wait()
        log.info("shutting down")
        await broker.controlled_shutdown()
        _close_all(servers)
        await _drain(broker)
        for conn in list(broker.connections):
            if conn.transport is not None:
                conn.transport.close()
        for server in servers:
            await server.wait_closed()
    finally:
        if metrics_server is not None:
            metrics_server.close()
        await broker.stop()
        os.close(lock_fd)
    log.info("shut down cleanly")


def _connection_factory(
    broker: Broker, security: ListenerSecurity
) -> Callable[[], asyncio.BaseProtocol]:
    if security.tls is None:
        return lambda: KafkaConnection(broker, HANDLERS, security)
    context = security.tls
    return lambda: TlsAcceptor(KafkaConnection(broker, HANDLERS, security), context)


def _close_all(servers: list[asyncio.Server]) -> None:
    for server in servers:
        server.close()


async def _drain(broker: Broker) -> None:
    deadline = asyncio.get_running_loop().time() + DRAIN_SECONDS
    while any(c.busy for c in broker.connections):
        if asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.01)


def serve(config: BrokerConfig) -> int:
    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await run_broker(config, stop)

    keep_freed_memory()
    try:
        asyncio.run(main())
    except StartupError as exc:
        log.error("%s", exc)
        return 1
    with contextlib.suppress(Exception):
        logging.shutdown()
    return 0
