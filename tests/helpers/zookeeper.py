"""Real ZooKeeper servers for cluster tests: Debian's package, one JVM per server, each on
free loopback ports with a data dir of its own. Never a mock.

`ZooKeeperEnsemble(n)` starts n servers (a standalone one for n == 1), gives the
`zookeeper.connect` string, and can kill, stop and restart each server.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers.broker import die_with_parent, free_port

ZOOKEEPER_JAR = os.environ.get("ZOOKEEPER_JAR", "/usr/share/java/zookeeper.jar")
START_TIMEOUT_S = 30.0
TICK_MS = 200  # sessions expire in 2-20 ticks: short sessions for fast failover tests


def _ruok(port: int) -> bool:
    """ZooKeeper's four-letter health check: a serving server answers imok."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"ruok")
            return s.recv(4) == b"imok"
    except OSError:
        return False


def _serving(port: int) -> bool:
    """In an ensemble, a server answers imok before it has joined a quorum: srvr tells."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"srvr")
            return b"Mode:" in s.recv(4096)
    except OSError:
        return False


class ZooKeeperServer:
    def __init__(self, root: Path, server_id: int, client_port: int) -> None:
        self.server_id = server_id
        self.client_port = client_port
        self.dir = root / f"zk-{server_id}"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    def configure(self, peers: list[tuple[int, int, int]]) -> None:
        """peers: (server id, quorum port, election port) of every server; [] standalone."""
        (self.dir / "data").mkdir(parents=True, exist_ok=True)
        lines = [
            f"tickTime={TICK_MS}",
            "initLimit=50",
            "syncLimit=25",
            f"dataDir={self.dir / 'data'}",
            f"clientPort={self.client_port}",
            "clientPortAddress=127.0.0.1",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr",
            "maxSessionTimeout=60000",
        ]
        for sid, quorum, election in peers:
            lines.append(f"server.{sid}=127.0.0.1:{quorum}:{election}")
        if peers:
            (self.dir / "data" / "myid").write_text(f"{self.server_id}\n")
        (self.dir / "zoo.cfg").write_text("\n".join(lines) + "\n")

    def start(self) -> None:
        if not os.path.exists(ZOOKEEPER_JAR):
            pytest.fail(
                f"environment: ZooKeeper is not installed ({ZOOKEEPER_JAR} is missing); "
                "`make test` installs Debian's zookeeper package, or run apt-get install zookeeper"
            )
        log = open(self.dir / "server.log", "ab")  # noqa: SIM115 - the child keeps it
        with log:
            self.proc = subprocess.Popen(
                [
                    "java",
                    "-Xmx128m",
                    f"-Dzookeeper.log.dir={self.dir}",
                    "-cp",
                    ZOOKEEPER_JAR,
                    "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                    str(self.dir / "zoo.cfg"),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=die_with_parent,
            )

    def wait_serving(self, timeout: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                break
            if _ruok(self.client_port) and _serving(self.client_port):
                return
            time.sleep(0.1)
        raise AssertionError(f"ZooKeeper server {self.server_id} is not serving: {self.tail()}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def tail(self) -> str:
        path = self.dir / "server.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else "(no log)"


class ZooKeeperEnsemble:
    def __init__(self, root: Path, size: int = 1) -> None:
        self.servers = [ZooKeeperServer(root, i + 1, free_port()) for i in range(size)]
        peers = [(s.server_id, free_port(), free_port()) for s in self.servers] if size > 1 else []
        for server in self.servers:
            server.configure(peers)

    @property
    def connect(self) -> str:
        """The zookeeper.connect string of the whole ensemble."""
        return ",".join(s.address for s in self.servers)

    def start(self) -> ZooKeeperEnsemble:
        for server in self.servers:
            server.start()
        for server in self.servers:
            server.wait_serving()
        return self

    def stop(self) -> None:
        for server in self.servers:
            server.kill()
