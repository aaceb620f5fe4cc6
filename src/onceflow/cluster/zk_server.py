"""Run Apache ZooKeeper servers as subprocesses: Debian's `zookeeper` package, one JVM each.

`onceflow cluster` starts one server for a local cluster and the tests start their own
(standalone or an ensemble), both through this module, so there is one place that knows how
to write a zoo.cfg, launch `QuorumPeerMain`, tell when a server is serving and stop it.

A server is serving when it answers the four-letter words `ruok` with `imok` and `srvr` with
its `Mode:` (standalone, leader or follower). `ruok` alone is not enough: a member of an
ensemble answers imok before it has joined a quorum.

Where the jar comes from: `$ZOOKEEPER_JAR`, else Debian's `/usr/share/java/zookeeper.jar`
(its manifest's Class-Path names the other jars it needs). `java` is `$JAVA_HOME/bin/java`,
else the one on PATH. When either is missing, `ZooKeeperNotInstalled` says what to install,
in one line.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from onceflow.retry import Backoff, retry

__all__ = [
    "DEFAULT_ZOOKEEPER_JAR",
    "INSTALL_HINT",
    "Peer",
    "PreExec",
    "ZooKeeperEnsemble",
    "ZooKeeperError",
    "ZooKeeperNotInstalled",
    "ZooKeeperServer",
    "ZooKeeperStartError",
    "die_with_parent",
    "four_letter_word",
    "is_serving",
    "require_zookeeper",
    "zoo_cfg",
]

DEFAULT_ZOOKEEPER_JAR = "/usr/share/java/zookeeper.jar"
ZOOKEEPER_JAR_ENV = "ZOOKEEPER_JAR"
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
# Debian's zookeeper.jar brings slf4j's API but no binding, so the server would log nothing;
# slf4j-simple (Debian's libslf4j-java, a dependency of the package) writes to stderr.
SLF4J_BINDING = "slf4j-simple.jar"
INSTALL_HINT = (
    "install Debian's zookeeper package (apt-get install zookeeper) "
    f"or set {ZOOKEEPER_JAR_ENV} to the path of zookeeper.jar"
)

DEFAULT_TICK_MS = 500  # ZooKeeper allows session timeouts of 2 to 20 ticks unless told
MAX_SESSION_TIMEOUT_MS = 60_000
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
HEAP_MB = 128
LOG_FILE = "zookeeper.log"
CONFIG_FILE = "zoo.cfg"
FOUR_LETTER_WORDS = "ruok,srvr,stat,mntr,conf"
LOG_TAIL_CHARS = 3000

# Run in a child between fork and exec (subprocess's preexec_fn), or None.
PreExec = Callable[[], None] | None


class ZooKeeperError(Exception):
    """A ZooKeeper server could not be had; the message says why, in one line or with its
    log's tail."""


class ZooKeeperNotInstalled(ZooKeeperError):
    """The jar or java is missing: nothing to start."""


class ZooKeeperStartError(ZooKeeperError):
    """The server exited or did not serve in time. The message carries its log's tail;
    `reason` is the one-line summary and `log_path` where the whole log is."""

    def __init__(self, reason: str, log_path: Path, log_tail: str) -> None:
        super().__init__(f"{reason}; its log ({log_path}):\n{log_tail}")
        self.reason = reason
        self.log_path = log_path


# ---- installation ----------------------------------------------------------------------


def zookeeper_jar() -> str:
    return os.environ.get(ZOOKEEPER_JAR_ENV) or DEFAULT_ZOOKEEPER_JAR


def java_executable() -> str | None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = os.path.join(java_home, "bin", "java")
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("java")


def require_zookeeper() -> tuple[str, str]:
    """(java, jar), or ZooKeeperNotInstalled saying what to install."""
    jar = zookeeper_jar()
    if not os.path.isfile(jar):
        raise ZooKeeperNotInstalled(
            f"ZooKeeper is not installed ({jar} is missing): {INSTALL_HINT}"
        )
    java = java_executable()
    if java is None:
        raise ZooKeeperNotInstalled(
            f"ZooKeeper needs java, which is not on PATH (nor in $JAVA_HOME): {INSTALL_HINT} "
            "(it brings a Java runtime)"
        )
    return java, jar


def classpath(jar: str) -> str:
    binding = os.path.join(os.path.dirname(jar), SLF4J_BINDING)
    return f"{jar}{os.pathsep}{binding}" if os.path.isfile(binding) else jar


def die_with_parent() -> None:
    """In a child before exec: SIGKILL it when the process that started it dies, so a killed
    launcher or test run never leaves servers behind (Linux only; elsewhere a no-op).

    The signal comes when the *thread* that forked the child ends: start children from a
    thread that lives as long as they should (the main thread)."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None).prctl(pr_set_pdeathsig, signal.SIGKILL)


# ---- four-letter words -------------------------------------------------------------------


def four_letter_word(host: str, port: int, word: str, timeout: float = 0.5) -> bytes:
    """Send one of ZooKeeper's four-letter commands and read the answer; b"" if none."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(word.encode())
            chunks = []
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                chunks.append(chunk)
            return b"".join(chunks)
    except OSError:
        return b""


def is_serving(host: str, port: int, timeout: float = 0.5) -> bool:
    """The server is up (ruok: imok) and part of a working quorum (srvr shows its Mode)."""
    return four_letter_word(
        host, port, "ruok", timeout
    ) == b"imok" and b"Mode:" in four_letter_word(host, port, "srvr", timeout)


# ---- configuration -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Peer:
    """One member of an ensemble: its id (myid) and its quorum and election ports."""

    server_id: int
    host: str
    quorum_port: int
    election_port: int

    @property
    def line(self) -> str:
        return f"server.{self.server_id}={self.host}:{self.quorum_port}:{self.election_port}"


def zoo_cfg(
    data_dir: str | os.PathLike[str],
    client_port: int,
    *,
    host: str = "127.0.0.1",
    tick_ms: int = DEFAULT_TICK_MS,
    peers: Sequence[Peer] = (),
) -> str:
    """The text of a zoo.cfg: standalone without peers, else a member of their ensemble.

    The admin HTTP server is off (it would take port 8080 on every server) and only the
    four-letter words this module and operators use are allowed."""
    lines = [
        f"tickTime={tick_ms}",
        "initLimit=50",
        "syncLimit=25",
        f"dataDir={os.fspath(data_dir)}",
        f"clientPort={client_port}",
        f"clientPortAddress={host}",
        "admin.enableServer=false",
        f"4lw.commands.whitelist={FOUR_LETTER_WORDS}",
        f"maxSessionTimeout={MAX_SESSION_TIMEOUT_MS}",
        "autopurge.purgeInterval=1",
    ]
    lines += [peer.line for peer in peers]
    return "\n".join(lines) + "\n"


# ---- one server --------------------------------------------------------------------------


class ZooKeeperServer:
    """One ZooKeeper server with everything in `directory`: zoo.cfg, data/ (snapshots,
    transaction logs, myid) and zookeeper.log (its output, appended over restarts)."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        client_port: int,
        server_id: int = 1,
        *,
        host: str = "127.0.0.1",
        tick_ms: int = DEFAULT_TICK_MS,
        heap_mb: int = HEAP_MB,
    ) -> None:
        self.dir = Path(directory)
        self.client_port = client_port
        self.server_id = server_id
        self.host = host
        self.tick_ms = tick_ms
        self.heap_mb = heap_mb
        self.proc: subprocess.Popen[bytes] | None = None
        self.argv: list[str] | None = None  # the command of the last start

    @property
    def address(self) -> str:
        return f"{self.host}:{self.client_port}"

    @property
    def data_dir(self) -> Path:
        return self.dir / "data"

    @property
    def config_path(self) -> Path:
        return self.dir / CONFIG_FILE

    @property
    def log_path(self) -> Path:
        return self.dir / LOG_FILE

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def configure(self, peers: Sequence[Peer] = ()) -> None:
        """Write zoo.cfg (and myid in an ensemble); keeps the data of an earlier run."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if peers:
            (self.data_dir / "myid").write_text(f"{self.server_id}\n")
        text = zoo_cfg(
            self.data_dir.resolve(),
            self.client_port,
            host=self.host,
            tick_ms=self.tick_ms,
            peers=peers,
        )
        self.config_path.write_text(text)

    def command(self, java: str, jar: str) -> list[str]:
        return [
            java,
            f"-Xmx{self.heap_mb}m",
            "-XX:+UseSerialGC",  # one GC thread: a small server among brokers on few cores
            "-cp",
            classpath(jar),
            MAIN_CLASS,
            str(self.config_path.resolve()),
        ]

    def start(self, preexec_fn: PreExec = die_with_parent) -> None:
        """Launch the JVM (configure() first); returns at once, see wait_serving().

        The child gets its own session, so a Ctrl-C in the terminal reaches only the
        process that started it, which then stops it in order."""
        if self.running:
            raise RuntimeError(f"ZooKeeper server {self.server_id} is already running")
        java, jar = require_zookeeper()
        if not self.config_path.exists():
            self.configure()
        cmd = self.argv = self.command(java, jar)
        with open(self.log_path, "ab") as log:
            log.write(f"\n=== {' '.join(cmd)}\n".encode())
            log.flush()
            try:
                self.proc = subprocess.Popen(
                    cmd,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    preexec_fn=preexec_fn,
                    start_new_session=True,
                )
            except OSError as exc:
                raise ZooKeeperNotInstalled(
                    f"cannot run {java}: {exc.strerror or exc}; {INSTALL_HINT}"
                ) from None

    def wait_serving(
        self, timeout: float = START_TIMEOUT_S, cancelled: Callable[[], bool] | None = None
    ) -> bool:
        """True once the server serves; False if `cancelled()` turned true first (checked
        every 0.1 s). ZooKeeperStartError if it exits or the timeout passes."""

        def serving() -> bool | None:
            if self.proc is not None and self.proc.poll() is not None:
                raise ZooKeeperStartError(
                    f"ZooKeeper server {self.server_id} exited with code {self.proc.returncode}",
                    self.log_path,
                    self.tail(),
                )
            if is_serving(self.host, self.client_port):
                return True
            if cancelled is not None and cancelled():
                return False
            return None  # not yet

        outcome = retry(
            serving, Backoff(0.1), retry_if=lambda answer: answer is None, deadline_s=timeout
        )
        if outcome is not None:
            return outcome
        raise ZooKeeperStartError(
            f"ZooKeeper server {self.server_id} is not serving on {self.address} after "
            f"{timeout:.0f} s",
            self.log_path,
            self.tail(),
        )

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM and wait; SIGKILL if it does not exit in time. Returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL: a crash of the server."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def tail(self, chars: int = LOG_TAIL_CHARS) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return text if len(text) <= chars else "...\n" + text[-chars:]


# ---- an ensemble -------------------------------------------------------------------------


class ZooKeeperEnsemble:
    """`size` servers in root/zk-<id>, standalone for size 1, else one ensemble. The ports
    are given (client_ports, and peer_ports: (quorum, election) per server) or chosen free."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        size: int = 1,
        *,
        host: str = "127.0.0.1",
        tick_ms: int = DEFAULT_TICK_MS,
        client_ports: Sequence[int] | None = None,
        peer_ports: Sequence[tuple[int, int]] | None = None,
    ) -> None:
        if size < 1:
            raise ValueError(f"an ensemble has at least one server, not {size}")
        # All the free ports at once, so that no two of them are the same.
        wanted = (size if client_ports is None else 0) + (2 * size if size > 1 else 0)
        spare = free_ports(wanted, host)
        ports = list(client_ports) if client_ports is not None else spare[:size]
        if len(ports) != size:
            raise ValueError(f"{size} servers need {size} client ports, got {len(ports)}")
        self.servers = [
            self.new_server(Path(root), i + 1, port, host, tick_ms) for i, port in enumerate(ports)
        ]
        self.peers: list[Peer] = []
        if size > 1:
            pairs = list(peer_ports) if peer_ports is not None else _pairs(spare[-2 * size :])
            self.peers = [
                Peer(s.server_id, host, quorum, election)
                for s, (quorum, election) in zip(self.servers, pairs, strict=True)
            ]
        for server in self.servers:
            server.configure(self.peers)

    def new_server(
        self, root: Path, server_id: int, client_port: int, host: str, tick_ms: int
    ) -> ZooKeeperServer:
        """Server `server_id` of the ensemble, in root/zk-<id> (a subclass may make its own)."""
        return ZooKeeperServer(
            root / f"zk-{server_id}", client_port, server_id, host=host, tick_ms=tick_ms
        )

    @property
    def connect(self) -> str:
        """The zookeeper.connect string of the whole ensemble."""
        return ",".join(s.address for s in self.servers)

    def start(
        self,
        timeout: float = START_TIMEOUT_S,
        preexec_fn: PreExec = die_with_parent,
    ) -> ZooKeeperEnsemble:
        """Start every server and wait until all serve (a quorum needs the others up)."""
        require_zookeeper()
        try:
            for server in self.servers:
                server.start(preexec_fn)
            for server in self.servers:
                server.wait_serving(timeout)
        except BaseException:
            self.kill()
            raise
        return self

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        for server in self.servers:
            server.stop(timeout)

    def kill(self) -> None:
        for server in self.servers:
            server.kill()


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct ports nobody listens on now (another process may take one before
    it is used: a server that cannot bind says so in its log)."""
    ports: list[int] = []
    while len(ports) < count:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = int(s.getsockname()[1])
        if port not in ports:
            ports.append(port)
    return ports


def _pairs(ports: list[int]) -> list[tuple[int, int]]:
    return list(zip(ports[::2], ports[1::2], strict=True))
