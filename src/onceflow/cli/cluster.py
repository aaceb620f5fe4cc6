"""`onceflow cluster`: a local cluster in one command, ZooKeeper and N brokers as subprocesses.

    onceflow cluster --brokers 3 --data-dir ./cluster

starts one ZooKeeper server (data in DIR/zookeeper) and brokers 1..N (`python -m onceflow
serve`, data in DIR/broker-<id>, output appended to DIR/broker-<id>/broker.log), each on a
free 127.0.0.1 port, waits until every broker answers ApiVersions, prints the bootstrap
servers on stdout (one line; progress goes to stderr) and runs until Ctrl-C, SIGTERM or
SIGHUP. Then it stops the brokers (SIGTERM, SIGKILL after a timeout) and ZooKeeper.

DIR/cluster.json says where everything is: ZooKeeper's connect string, PID and command, and
for each broker its id, address, data dir, PID, log file and the exact argv that starts it
again. The launcher never restarts a broker: kill one, start it again with its recorded
command, and the launcher notices (by that exact argv among the running processes), records
its new PID and stops it too at the end. Running again on the same DIR reuses the data, the
ids and, when they are free, the ports.

The launcher's children run in sessions of their own, so a Ctrl-C in the terminal reaches the
launcher alone, which stops them in order; they are killed if the launcher itself is killed.
With fewer than 3 brokers the replication factors of the internal topics are capped to N, so
a cluster of 1 or 2 works; `--override KEY=VALUE` sets any other broker key on every broker.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from onceflow.cli.common import CliError, key_value
from onceflow.client.blocking import Connection
from onceflow.client.errors import ClientError
from onceflow.cluster.local import (
    CLUSTER_FILE,
    pid_alive,
    processes_running,
    read_cluster_file,
)
from onceflow.cluster.zk_server import (
    ZooKeeperError,
    ZooKeeperServer,
    ZooKeeperStartError,
    die_with_parent,
    require_zookeeper,
)
from onceflow.config import ConfigError, load_broker_config
from onceflow.retry import Backoff, retry

__all__ = [
    "BrokerSpec",
    "assign_ports",
    "bootstrap_servers",
    "broker_command",
    "broker_overrides",
    "cluster_document",
    "plan_brokers",
    "register",
    "replication_overrides",
    "run_cluster",
]

HOST = "127.0.0.1"
LOCK_FILE = "cluster.lock"
BROKER_LOG = "broker.log"
ZOOKEEPER_DIR = "zookeeper"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
POLL_S = 0.5
FORMAT_VERSION = 1

# Set by the launcher for each broker: an override of one would break the cluster.
RESERVED_KEYS = frozenset(
    {
        "node.id",
        "broker.id",
        "listeners",
        "advertised.listeners",
        "log.dirs",
        "log.dir",
        "zookeeper.connect",
    }
)

# Kafka's defaults for a cluster of 3 or more; a smaller cluster gets them capped to its size.
INTERNAL_REPLICATION: tuple[tuple[str, int], ...] = (
    ("default.replication.factor", 3),
    ("offsets.topic.replication.factor", 3),
    ("transaction.state.log.replication.factor", 3),
    ("transaction.state.log.min.isr", 2),
)


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port 1-65535, got {value}")
    return value


def _count(text: str) -> int:
    """Any integer: a count below 1 is refused by run_cluster, with exit code 1."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "cluster",
        help="run a local cluster: ZooKeeper and N brokers",
        description=(
            "Start a ZooKeeper server and N brokers as subprocesses on 127.0.0.1, print the "
            "bootstrap servers and run until Ctrl-C or SIGTERM. DIR/cluster.json holds each "
            "process's address, PID and the command that starts it again."
        ),
    )
    parser.add_argument(
        "--brokers", type=_count, required=True, metavar="N", help="number of brokers (ids 1..N)"
    )
    parser.add_argument(
        "--data-dir",
        required=True,
        metavar="DIR",
        help="where ZooKeeper's and the brokers' data live; reused by the next run",
    )
    parser.add_argument(
        "--zookeeper-port",
        type=_port,
        metavar="P",
        help="ZooKeeper's client port (default: the last run's if free, else a free one)",
    )
    parser.add_argument(
        "--base-port",
        type=_port,
        metavar="P",
        help="broker i listens on P+i-1 (default: the last run's ports if free, else free ones)",
    )
    parser.add_argument(
        "--config", metavar="FILE", help="a server.properties every broker starts from"
    )
    parser.add_argument(
        "--override",
        type=key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a broker key on every broker; repeatable",
    )
    parser.set_defaults(func=run_cluster, command_parser=parser)


# ---- the plan: pure functions ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerSpec:
    """Everything needed to start one broker of the cluster, and again after a crash."""

    broker_id: int
    host: str
    port: int
    data_dir: str
    log: str
    command: tuple[str, ...]

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def replication_overrides(brokers: int) -> dict[str, str]:
    """The internal topics' replication factors, the default one and the transaction log's
    min ISR: Kafka's defaults, capped to the number of brokers."""
    return {key: str(min(default, brokers)) for key, default in INTERNAL_REPLICATION}


def broker_overrides(
    brokers: int, zookeeper_connect: str, user: Mapping[str, str]
) -> dict[str, str]:
    """The keys every broker gets as overrides: ZooKeeper, the capped replication factors,
    then the user's (which win). Raises CliError for a key the launcher sets itself."""
    reserved = sorted(RESERVED_KEYS.intersection(key.strip() for key in user))
    if reserved:
        raise CliError(
            f"--override {reserved[0]} is set by onceflow cluster for each broker; "
            "it cannot be overridden"
        )
    return {
        "zookeeper.connect": zookeeper_connect,
        **replication_overrides(brokers),
        **{key.strip(): value for key, value in user.items()},
    }


def broker_command(
    python: str,
    broker_id: int,
    data_dir: str,
    listener: str,
    overrides: Mapping[str, str],
    config_file: str | None = None,
) -> list[str]:
    """The argv of `onceflow serve` for one broker of the cluster."""
    cmd = [python, "-m", "onceflow", "serve"]
    if config_file is not None:
        cmd += ["--config", config_file]
    cmd += ["--node-id", str(broker_id), "--data-dir", data_dir, "--listener", listener]
    for key, value in overrides.items():
        cmd += ["--override", f"{key}={value}"]
    return cmd


def plan_brokers(
    root: Path,
    ports: Sequence[int],
    overrides: Mapping[str, str],
    *,
    python: str = sys.executable,
    config_file: str | None = None,
    host: str = HOST,
) -> list[BrokerSpec]:
    """Broker i (1..N) on ports[i-1], data in root/broker-<i>; root is made absolute so
    the commands work from any directory."""
    root = root.absolute()
    specs = []
    for broker_id, port in enumerate(ports, start=1):
        data_dir = root / f"broker-{broker_id}"
        command = broker_command(
            python, broker_id, str(data_dir), f"{host}:{port}", overrides, config_file
        )
        specs.append(
            BrokerSpec(
                broker_id, host, port, str(data_dir), str(data_dir / BROKER_LOG), tuple(command)
            )
        )
    return specs


def bootstrap_servers(brokers: Sequence[BrokerSpec]) -> str:
    return ",".join(b.address for b in brokers)


def cluster_document(
    *,
    state: str,
    launcher_pid: int,
    zookeeper: Mapping[str, Any],
    brokers: Sequence[BrokerSpec],
    pids: Mapping[int, int | None],
) -> dict[str, Any]:
    """The content of cluster.json."""
    return {
        "version": FORMAT_VERSION,
        "state": state,
        "launcher_pid": launcher_pid,
        "bootstrap_servers": bootstrap_servers(brokers),
        "zookeeper": dict(zookeeper),
        "brokers": [
            {
                "id": b.broker_id,
                "host": b.host,
                "port": b.port,
                "address": b.address,
                "data_dir": b.data_dir,
                "pid": pids.get(b.broker_id),
                "log": b.log,
                "command": list(b.command),
            }
            for b in brokers
        ],
    }


def assign_ports(
    explicit: Sequence[int | None],
    previous: Sequence[int | None],
    is_free: Callable[[int], bool],
    fresh: Callable[[], int],
) -> list[int]:
    """One port per slot: the explicit one (which must be free), else the previous run's if
    still free, else a fresh one; no two slots share a port."""
    taken: set[int] = set()
    ports: list[int] = []
    for wanted, before in zip(explicit, previous, strict=True):
        if wanted is not None:
            if wanted in taken or not is_free(wanted):
                raise CliError(f"port {wanted} is in use")
            port = wanted
        elif before is not None and before not in taken and is_free(before):
            port = before
        else:
            port = fresh()
            while port in taken:
                port = fresh()
        taken.add(port)
        ports.append(port)
    return ports


# ---- processes ---------------------------------------------------------------------------


def port_is_free(port: int, host: str = HOST) -> bool:
    """Nobody listens on it (a socket in TIME_WAIT does not count: servers reuse the address)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = HOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _last_line(path: str) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 4096))
            lines = [line.strip() for line in f.read().decode(errors="replace").splitlines()]
    except OSError:
        return ""
    lines = [line for line in lines if line]
    return lines[-1] if lines else ""


class _StopRequested(Exception):
    """A stop signal arrived while starting or running: go to the shutdown."""


@dataclass
class _Broker:
    spec: BrokerSpec
    proc: subprocess.Popen[bytes] | None = None  # our own start of it
    pid: int | None = None  # the live process: ours, or one started by hand from cluster.json
    reported_exit: bool = False


@dataclass
class LocalCluster:
    """The running cluster: ZooKeeper, the brokers and cluster.json.

    The signal handlers only set `stopping` (and `force` on a second signal) and never
    print; the loops that wait check them, so the shutdown never starts halfway through a
    step."""

    root: Path
    zookeeper: ZooKeeperServer
    brokers: list[_Broker]
    out: TextIO = field(default_factory=lambda: sys.stderr)
    stopping: str | None = None  # the name of the signal that asked for the stop
    force: bool = False

    def check_stop(self) -> None:
        if self.stopping is not None:
            raise _StopRequested

    @property
    def json_path(self) -> Path:
        return self.root / CLUSTER_FILE

    def say(self, message: str) -> None:
        print(message, file=self.out, flush=True)

    def zookeeper_entry(self) -> dict[str, Any]:
        zk = self.zookeeper
        return {
            "connect": zk.address,
            "host": zk.host,
            "port": zk.client_port,
            "pid": zk.pid if zk.running else None,
            "data_dir": str(zk.data_dir.absolute()),
            "log": str(zk.log_path.absolute()),
            "command": zk.argv,
        }

    def write_json(self, state: str) -> None:
        document = cluster_document(
            state=state,
            launcher_pid=os.getpid(),
            zookeeper=self.zookeeper_entry(),
            brokers=[b.spec for b in self.brokers],
            pids={b.spec.broker_id: b.pid for b in self.brokers},
        )
        tmp = self.json_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(document, indent=2) + "\n")
        os.replace(tmp, self.json_path)

    # ---- start ---------------------------------------------------------------------------

    def start_zookeeper(self) -> None:
        zk = self.zookeeper
        zk.configure()
        zk.start(die_with_parent)
        if not zk.wait_serving(cancelled=lambda: self.stopping is not None):
            raise _StopRequested
        self.say(f"ZooKeeper serving on {zk.address} (pid {zk.pid}, log {zk.log_path})")

    def spawn_broker(self, broker: _Broker) -> None:
        spec = broker.spec
        os.makedirs(spec.data_dir, exist_ok=True)
        with open(spec.log, "ab") as log:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            log.write(f"\n=== {stamp} onceflow cluster starts broker {spec.broker_id}\n".encode())
            log.flush()
            broker.proc = subprocess.Popen(
                spec.command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=die_with_parent,
                start_new_session=True,
            )
        broker.pid = broker.proc.pid
        broker.reported_exit = False

    def wait_ready(self, broker: _Broker, deadline: float) -> None:
        """Until the broker answers ApiVersions; CliError if it exits or takes too long."""
        spec = broker.spec
        proc = broker.proc
        assert proc is not None

        def answers() -> bool:
            self.check_stop()
            code = proc.poll()
            if code is not None:
                raise CliError(
                    f"broker {spec.broker_id} exited with code {code} while starting: "
                    f"{_last_line(spec.log) or '(no output)'} (log: {spec.log})"
                )
            try:
                connection = Connection(spec.host, spec.port, timeout_s=2.0)
            except ClientError:
                return False
            try:
                _ = connection.versions
                return True
            except ClientError:
                return False
            finally:
                connection.close()

        left_s = deadline - time.monotonic()
        if not retry(answers, Backoff(0.1), retry_if=lambda ok: not ok, deadline_s=left_s):
            raise CliError(
                f"broker {spec.broker_id} did not answer on {spec.address} within "
                f"{START_TIMEOUT_S:.0f} s (log: {spec.log})"
            )

    def start(self) -> None:
        self.start_zookeeper()
        for broker in self.brokers:
            self.spawn_broker(broker)
        self.write_json("starting")
        deadline = time.monotonic() + START_TIMEOUT_S
        for broker in self.brokers:
            self.wait_ready(broker, deadline)
            spec = broker.spec
            self.say(
                f"broker {spec.broker_id} ready on {spec.address} "
                f"(pid {broker.pid}, log {spec.log})"
            )
        self.write_json("running")

    # ---- run -----------------------------------------------------------------------------

    def watch(self) -> None:
        """Report brokers that exit and adopt ones restarted by hand; never restart one."""
        while True:
            self.check_stop()
            if self.refresh():
                self.write_json("running")
            time.sleep(POLL_S)

    def refresh(self) -> bool:
        """Update each broker's live PID; True when one changed."""
        changed = False
        for broker in self.brokers:
            if broker.pid is not None and self._alive(broker, broker.pid):
                continue
            spec = broker.spec
            if broker.pid is not None and not broker.reported_exit:
                code = broker.proc.poll() if broker.proc is not None else None
                how = f" with code {code}" if code is not None else ""
                self.say(
                    f"broker {spec.broker_id} (pid {broker.pid}) exited{how}; not restarting "
                    f"it (its command is in {self.json_path})"
                )
                broker.reported_exit = True
                broker.pid = None
                changed = True
            others = processes_running(spec.command)
            if others:
                broker.pid = others[0]
                broker.proc = None
                broker.reported_exit = False
                self.say(f"broker {spec.broker_id} is running again (pid {broker.pid})")
                changed = True
        return changed

    @staticmethod
    def _alive(broker: _Broker, pid: int) -> bool:
        if broker.proc is not None and broker.proc.pid == pid:
            return bool(broker.proc.poll() is None)
        return pid_alive(pid)

    # ---- stop ----------------------------------------------------------------------------

    def stop_broker(self, broker: _Broker, timeout: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM every process of this broker (ours, or restarted by hand), SIGKILL what
        is left after the timeout."""
        pids = set(processes_running(broker.spec.command))
        if broker.proc is not None and broker.proc.poll() is None:
            pids.add(broker.proc.pid)
        if not pids:
            return
        for pid in pids:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while (
            time.monotonic() < deadline
            and not self.force
            and any(self._alive(broker, p) for p in pids)
        ):
            time.sleep(0.05)
        left = [p for p in pids if self._alive(broker, p)]
        for pid in left:
            why = "a second stop signal" if self.force else f"no exit {timeout:.0f} s after SIGTERM"
            self.say(f"broker {broker.spec.broker_id} (pid {pid}) killed: {why}")
            _signal(pid, signal.SIGKILL)
        if broker.proc is not None:
            with contextlib.suppress(Exception):
                broker.proc.wait(10)
        broker.pid = None

    def stop(self) -> None:
        """The brokers, highest id first, then ZooKeeper."""
        if self.stopping is not None:
            self.say(f"{self.stopping}: stopping the cluster")
        self.stopping = self.stopping or "stop"
        for broker in reversed(self.brokers):
            self.stop_broker(broker)
        if self.force:
            self.zookeeper.kill()
        else:
            self.zookeeper.stop()
        self.say("stopped")


@contextlib.contextmanager
def _stop_signals(cluster: LocalCluster) -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP stop the cluster; a second one kills what is left."""

    def handler(signum: int, frame: FrameType | None) -> None:
        if cluster.stopping is None:
            cluster.stopping = signal.Signals(signum).name
        else:
            cluster.force = True

    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _lock(root: Path) -> int:
    """One launcher per data dir: an exclusive lock held while it runs."""
    try:
        fd = os.open(root / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise CliError(f"cannot use data dir {root}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        previous = read_cluster_file(root)
        who = f" (launcher pid {previous.get('launcher_pid')})" if previous else ""
        raise CliError(f"a cluster is already running on {root}{who}") from None
    return fd


def _previous_ports(
    previous: Mapping[str, Any], brokers: int
) -> tuple[int | None, list[int | None]]:
    zk = previous.get("zookeeper")
    zk_port = zk.get("port") if isinstance(zk, dict) else None
    by_id: dict[int, int] = {}
    for entry in previous.get("brokers") or ():
        if isinstance(entry, dict) and isinstance(entry.get("id"), int):
            port = entry.get("port")
            if isinstance(port, int):
                by_id[entry["id"]] = port
    return (
        zk_port if isinstance(zk_port, int) else None,
        [by_id.get(i) for i in range(1, brokers + 1)],
    )


def run_cluster(args: argparse.Namespace) -> int:
    brokers: int = args.brokers
    if brokers < 1:
        raise CliError(f"--brokers must be at least 1, got {brokers}")
    if args.base_port is not None and args.base_port + brokers - 1 > 65535:
        raise CliError(f"--base-port {args.base_port} leaves no room for {brokers} brokers")
    config_file = os.path.abspath(args.config) if args.config else None
    user = dict(args.override)
    # Checked once here, so a bad value is one line now, not N brokers failing to start.
    overrides = broker_overrides(brokers, f"{HOST}:2181", user)
    root = Path(args.data_dir).absolute()
    try:
        _, warnings = load_broker_config(
            config_file,
            {**overrides, "node.id": "1", "log.dirs": str(root), "listeners": f"{HOST}:9092"},
        )
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    try:
        require_zookeeper()
        root.mkdir(parents=True, exist_ok=True)
    except ZooKeeperError as exc:
        raise CliError(str(exc)) from None
    except OSError as exc:
        raise CliError(f"cannot create data dir {root}: {exc.strerror or exc}") from None

    lock_fd = _lock(root)
    try:
        previous = read_cluster_file(root)
        zk_before, brokers_before = _previous_ports(previous, brokers)
        explicit_brokers: list[int | None] = (
            [args.base_port + i for i in range(brokers)]
            if args.base_port is not None
            else [None] * brokers
        )
        ports = assign_ports(
            [args.zookeeper_port, *explicit_brokers],
            [zk_before, *brokers_before],
            port_is_free,
            free_port,
        )
        zookeeper = ZooKeeperServer(root / ZOOKEEPER_DIR, ports[0], host=HOST)
        specs = plan_brokers(
            root,
            ports[1:],
            broker_overrides(brokers, zookeeper.address, user),
            config_file=config_file,
        )
        cluster = LocalCluster(root, zookeeper, [_Broker(spec) for spec in specs])
        return _run(cluster)
    finally:
        os.close(lock_fd)


def _run(cluster: LocalCluster) -> int:
    """Start, run until a stop signal, stop; 0 when stopped by a signal. A failure to start
    stops what did start and is a one-line CliError."""
    with _stop_signals(cluster):
        try:
            cluster.start()
            print(bootstrap_servers([b.spec for b in cluster.brokers]), flush=True)
            cluster.say(f"cluster.json: {cluster.json_path}; Ctrl-C or SIGTERM stops it")
            cluster.watch()
        except _StopRequested:
            pass
        except ZooKeeperStartError as exc:
            raise CliError(f"{exc.reason} (log: {exc.log_path})") from None
        except ZooKeeperError as exc:
            raise CliError(str(exc)) from None
        finally:
            cluster.stop()
            if cluster.json_path.exists():
                cluster.write_json("stopped")
    return 0
