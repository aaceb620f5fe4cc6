"""The demo on a cluster: ZooKeeper and N brokers through `onceflow cluster`, and a broker's
kill -9 and restart.

The launcher (`python -m onceflow cluster`, a subprocess) starts ZooKeeper and the brokers
and writes DIR/cluster.json: each broker's address, PID and the exact command that starts
it. To crash a broker the demo sends SIGKILL to that PID; to bring it back it runs that
command again, appending to the broker's log. The launcher notices the new process (by its
command line) and stops it with the others at the end.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from onceflow.client.blocking import Connection
from onceflow.client.cluster import Cluster
from onceflow.client.errors import ClientError
from onceflow.cluster.local import CLUSTER_FILE, pid_alive, read_cluster_file
from onceflow.cluster.zk_server import ZooKeeperError, die_with_parent, require_zookeeper

LAUNCH_TIMEOUT_S = 180.0
READY_TIMEOUT_S = 90.0
LAUNCHER_STOP_TIMEOUT_S = 150.0  # the launcher gives each broker 30 s to shut down
SESSION_TIMEOUT_MS = 6000

# On top of what `onceflow cluster` sets itself: ZooKeeper's address and, for 3 brokers or
# more, replication factor 3 for the demo's topics and the internal ones (min ISR 2 for
# the transaction log).
CLUSTER_OVERRIDES = {
    "min.insync.replicas": "2",
    "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
}


@dataclass
class BrokerKill:
    """What happened to the killed broker, as wall-clock times (time.time())."""

    broker_id: int
    coordinates: list[str]  # the transactional ids it was the coordinator of
    batch: int  # the micro-batch of the clean query running when it was killed
    killed_at: float
    gone_at: float | None = None  # when the other brokers' metadata no longer listed it
    restarted_at: float | None = None
    serving_at: float | None = None

    def describe(self, run_started: float) -> str:
        def at(t: float | None) -> str:
            if t is None:
                return "never"
            return f"{time.strftime('%H:%M:%S', time.localtime(t))} (+{t - run_started:.0f} s)"

        ids = ", ".join(self.coordinates)
        text = (
            f"broker {self.broker_id} (transaction coordinator of {ids}) killed with "
            f"kill -9 in micro-batch {self.batch} at {at(self.killed_at)}"
        )
        if self.gone_at is not None:
            text += f", dropped from the cluster {self.gone_at - self.killed_at:.1f} s later"
        text += f"; restarted at {at(self.restarted_at)}, serving at {at(self.serving_at)}"
        return text


def require_cluster_tools(brokers: int) -> None:
    """SystemExit saying what to install when ZooKeeper (or java) is missing."""
    try:
        require_zookeeper()
    except ZooKeeperError as exc:
        raise SystemExit(
            f"error: --brokers {brokers} runs a cluster, which needs ZooKeeper: {exc} "
            "(`make run` installs it when it runs as root)"
        ) from None


class DemoCluster:
    """A running `onceflow cluster` launcher and what its cluster.json says."""

    def __init__(self, root: Path, launcher: subprocess.Popen[bytes], log: Path) -> None:
        self.root = root
        self.launcher = launcher
        self.launcher_log = log
        self.restarted: list[subprocess.Popen[bytes]] = []

    # ---- start and stop ----------------------------------------------------------------

    @classmethod
    def start(
        cls,
        root: Path,
        brokers: int,
        overrides: Mapping[str, str],
        timeout: float = LAUNCH_TIMEOUT_S,
    ) -> DemoCluster:
        """Start ZooKeeper and `brokers` brokers; return once every broker answers.
        SystemExit with a one-line reason when ZooKeeper is missing or the launch fails."""
        require_cluster_tools(brokers)
        root.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "onceflow", "cluster", "--brokers", str(brokers)]
        command += ["--data-dir", str(root)]
        for key, value in {**overrides, **CLUSTER_OVERRIDES}.items():
            command += ["--override", f"{key}={value}"]
        log = root / "launcher.log"
        with log.open("ab") as out:
            launcher = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                # Its own session: a Ctrl-C reaches the demo alone, which stops the cluster
                # in order; and it dies if the demo is killed.
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        cluster = cls(root, launcher, log)
        deadline = time.monotonic() + timeout
        while True:
            code = launcher.poll()
            if code is not None:
                raise SystemExit(
                    f"error: the cluster did not start (onceflow cluster exited with code "
                    f"{code}): {_last_line(log)} (log: {log})"
                )
            document = cluster.document()
            if document.get("launcher_pid") == launcher.pid and document["state"] == "running":
                return cluster
            if time.monotonic() > deadline:
                cluster.stop()
                raise SystemExit(f"error: the cluster did not start in {timeout:.0f} s; see {log}")
            time.sleep(0.2)

    def stop(self) -> None:
        """SIGTERM to the launcher, which stops every broker (the restarted ones too) and
        ZooKeeper; whatever is left after the timeouts is killed."""
        if self.launcher.poll() is None:
            self.launcher.send_signal(signal.SIGTERM)
            try:
                self.launcher.wait(LAUNCHER_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.launcher.kill()
                self.launcher.wait()
        for proc in self.restarted:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()

    # ---- what cluster.json says --------------------------------------------------------

    def document(self) -> dict[str, Any]:
        return read_cluster_file(self.root)

    @property
    def bootstrap(self) -> str:
        return str(self.document()["bootstrap_servers"])

    def broker(self, broker_id: int) -> dict[str, Any]:
        for entry in self.document()["brokers"]:
            if entry["id"] == broker_id:
                return dict(entry)
        raise KeyError(f"broker {broker_id} is not in {self.root / CLUSTER_FILE}")

    def broker_ids(self) -> list[int]:
        return [int(entry["id"]) for entry in self.document()["brokers"]]

    # ---- questions to the cluster ------------------------------------------------------

    def coordinator(self, transactional_id: str) -> int:
        """The broker id of the transaction coordinator of `transactional_id`
        (FindCoordinator: the leader of its __transaction_state partition)."""
        with Cluster(self.bootstrap) as cluster:
            node_id, _ = cluster.transaction_coordinator(transactional_id)
        return int(node_id)

    def live_brokers(self, exclude: int) -> set[int] | None:
        """The broker ids in the cluster's metadata, asked of a broker other than `exclude`;
        None if none answers."""
        others = [self.broker(i)["address"] for i in self.broker_ids() if i != exclude]
        try:
            with Cluster(",".join(others), timeout_s=5) as cluster:
                return set(cluster.metadata().brokers)
        except ClientError:
            return None

    def under_replicated(self) -> list[str]:
        """Partitions (of every topic, internal ones too) whose ISR lacks a replica."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        topics = admin.list_topics(timeout=30).topics
        return [
            f"{name}-{p}"
            for name, topic in sorted(topics.items())
            for p, partition in sorted(topic.partitions.items())
            if set(partition.isrs) != set(partition.replicas)
        ]

    # ---- kill and restart --------------------------------------------------------------

    def kill(self, broker_id: int) -> None:
        """SIGKILL the broker's process, as a crash would."""
        pid = self.broker(broker_id)["pid"]
        if not isinstance(pid, int):
            raise SystemExit(f"broker {broker_id} is not running (see {self.launcher_log})")
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)

    def wait_dropped(self, broker_id: int, timeout: float) -> float | None:
        """Until the other brokers' metadata no longer lists the killed broker (its
        ZooKeeper session expired); the time.time() then, or None after the timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            live = self.live_brokers(exclude=broker_id)
            if live is not None and broker_id not in live:
                return time.time()
            time.sleep(0.2)
        return None

    def restart(self, broker_id: int, timeout: float = READY_TIMEOUT_S) -> None:
        """Start the broker again with the command cluster.json records for it; return once
        it answers ApiVersions. A start refused because the dead broker's registration has
        not expired yet is tried again."""
        entry = self.broker(broker_id)
        deadline = time.monotonic() + timeout
        while True:
            proc = self._spawn(entry)
            while proc.poll() is None:
                if _answers(str(entry["host"]), int(entry["port"])):
                    return
                if time.monotonic() > deadline:
                    raise SystemExit(
                        f"broker {broker_id} did not answer within {timeout:.0f} s of its "
                        f"restart (log: {entry['log']})"
                    )
                time.sleep(0.2)
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"broker {broker_id} exited with code {proc.returncode} at its restart: "
                    f"{_last_line(Path(entry['log']))} (log: {entry['log']})"
                )
            time.sleep(1)

    def _spawn(self, entry: Mapping[str, Any]) -> subprocess.Popen[bytes]:
        with open(entry["log"], "ab") as log:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            log.write(f"\n=== {stamp} the demo restarts broker {entry['id']}\n".encode())
            log.flush()
            proc = subprocess.Popen(
                [str(a) for a in entry["command"]],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        self.restarted.append(proc)
        return proc


def _answers(host: str, port: int) -> bool:
    try:
        connection = Connection(host, port, timeout_s=2.0)
    except ClientError:
        return False
    try:
        _ = connection.versions
        return True
    except ClientError:
        return False
    finally:
        connection.close()


def _last_line(path: Path) -> str:
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines()]
    except OSError:
        return "(no log)"
    lines = [line for line in lines if line]
    return lines[-1] if lines else "(no output)"
