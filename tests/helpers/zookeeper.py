"""Real ZooKeeper servers for cluster tests: Debian's package, one JVM per server, each on
free loopback ports with a data dir of its own. Never a mock.

A thin layer over the product's launcher (`onceflow.cluster.zk_server`) with the tests'
settings: a 200 ms tick, so sessions may be as short as 400 ms (fast failover tests), and a
missing ZooKeeper failing the test as an environment error rather than a traceback.

`ZooKeeperEnsemble(root, n)` starts n servers (a standalone one for n == 1), gives the
`zookeeper.connect` string, and can kill, stop and restart each server (`servers[i]`).
"""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import pytest

from onceflow.cluster import zk_server
from onceflow.cluster.zk_server import ZooKeeperNotInstalled, die_with_parent, is_serving

__all__ = ["TICK_MS", "ZooKeeperEnsemble", "ZooKeeperServer", "is_serving"]

START_TIMEOUT_S = zk_server.START_TIMEOUT_S
TICK_MS = 200  # sessions expire in 2-20 ticks: short sessions for fast failover tests


def _environment_failure(exc: ZooKeeperNotInstalled) -> NoReturn:
    pytest.fail(f"environment: {exc} (`make test` installs it where it may)", pytrace=False)


class ZooKeeperServer(zk_server.ZooKeeperServer):
    """One server in root/zk-<server_id>; `start()` after a `kill()` brings it back on the
    same port with its data."""

    def __init__(self, root: Path, server_id: int, client_port: int) -> None:
        super().__init__(root / f"zk-{server_id}", client_port, server_id, tick_ms=TICK_MS)

    def start(self, preexec_fn: zk_server.PreExec = die_with_parent) -> None:
        try:
            super().start(preexec_fn)
        except ZooKeeperNotInstalled as exc:
            _environment_failure(exc)


class ZooKeeperEnsemble(zk_server.ZooKeeperEnsemble):
    def __init__(self, root: Path, size: int = 1) -> None:
        super().__init__(root, size, tick_ms=TICK_MS)

    def new_server(
        self, root: Path, server_id: int, client_port: int, host: str, tick_ms: int
    ) -> ZooKeeperServer:
        return ZooKeeperServer(root, server_id, client_port)

    def start(
        self, timeout: float = START_TIMEOUT_S, preexec_fn: zk_server.PreExec = die_with_parent
    ) -> ZooKeeperEnsemble:
        try:
            super().start(timeout, preexec_fn)
        except ZooKeeperNotInstalled as exc:
            _environment_failure(exc)
        return self

    def stop(self, timeout: float = 0.0) -> None:
        """Tests need no graceful shutdown of ZooKeeper: SIGKILL, the quickest."""
        self.kill()
