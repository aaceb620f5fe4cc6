"""`onceflow cluster` as a user runs it: `python -m onceflow cluster --brokers 3 --data-dir DIR`
in a subprocess, with a real ZooKeeper server and three real brokers.

The bootstrap line, cluster.json (ZooKeeper's and each broker's address, PID, log and
command), brokers answering ApiVersions and Metadata listing all three, a broker killed with
kill -9 and started again by hand from its recorded command, SIGTERM stopping every process
(ZooKeeper and the restarted broker included) with exit code 0, and one-line errors with
exit code 1 for bad input.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from onceflow.client.blocking import Connection
from onceflow.client.cluster import Cluster
from onceflow.client.errors import ClientError
from onceflow.cluster.local import pid_alive
from onceflow.cluster.zk_server import is_serving
from onceflow.protocol.api_versions import ApiKey
from tests.helpers.broker import die_with_parent

START_TIMEOUT_S = 120.0  # ZooKeeper's JVM and three brokers on two shared cores
STOP_TIMEOUT_S = 90.0
# Fewer internal partitions: each broker opens them all at start.
FAST = ["--override", "offsets.topic.num.partitions=2"]
FAST += ["--override", "transaction.state.log.num.partitions=2"]
SESSION_MS = 4000  # a killed broker's registration expires quickly


def launch(data_dir: Path, *args: str, stderr_path: Path) -> subprocess.Popen[bytes]:
    with open(stderr_path, "ab") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "onceflow", "cluster", "--data-dir", str(data_dir), *args],
            stdout=subprocess.PIPE,
            stderr=err,
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )


def read_line(proc: subprocess.Popen[bytes], stderr_path: Path, timeout: float) -> str:
    """The first line on the launcher's stdout; fails if it exits or is silent too long."""
    assert proc.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    buffer = b""
    while b"\n" not in buffer:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(
                f"no bootstrap line in {timeout:.0f} s; stderr:\n{log(stderr_path)}"
            )
        if selector.select(min(left, 1.0)):
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                raise AssertionError(
                    f"stdout closed (exit code {proc.wait(10)}); stderr:\n{log(stderr_path)}"
                )
            buffer += chunk
        elif proc.poll() is not None:
            raise AssertionError(f"exited with {proc.returncode}; stderr:\n{log(stderr_path)}")
    return buffer.split(b"\n", 1)[0].decode()


def log(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else "(none)"


def wait_until(what: str, check: Any, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except ClientError as exc:
            last = exc
        else:
            if last:
                return last
        time.sleep(0.2)
    raise AssertionError(f"{what}: not after {timeout:.0f} s (last: {last!r})")


def api_versions(host: str, port: int) -> dict[int, tuple[int, int]]:
    connection = Connection(host, port, timeout_s=5.0)
    try:
        return connection.versions
    finally:
        connection.close()


def metadata_brokers(bootstrap: str) -> set[int]:
    with Cluster(bootstrap, timeout_s=5.0) as cluster:
        return set(cluster.metadata().brokers)


def read_json(path: Path) -> dict[str, Any]:
    document = json.loads(path.read_text())
    assert isinstance(document, dict)
    return document


def test_a_three_broker_cluster_runs_restarts_a_broker_by_hand_and_stops(tmp_path: Path) -> None:
    data_dir = tmp_path / "cluster"
    stderr_path = tmp_path / "launcher.err"
    session = ["--override", f"zookeeper.session.timeout.ms={SESSION_MS}"]
    launcher = launch(data_dir, "--brokers", "3", *FAST, *session, stderr_path=stderr_path)
    restarted: subprocess.Popen[bytes] | None = None
    try:
        bootstrap = read_line(launcher, stderr_path, START_TIMEOUT_S)
        assert re.fullmatch(r"127\.0\.0\.1:\d+(,127\.0\.0\.1:\d+){2}", bootstrap), bootstrap

        # ---- cluster.json -----------------------------------------------------------------
        doc = read_json(data_dir / "cluster.json")
        assert doc["state"] == "running"
        assert doc["launcher_pid"] == launcher.pid
        assert doc["bootstrap_servers"] == bootstrap
        zk = doc["zookeeper"]
        assert zk["connect"] == f"127.0.0.1:{zk['port']}"
        assert pid_alive(zk["pid"])
        assert is_serving("127.0.0.1", zk["port"])
        assert Path(zk["data_dir"]).is_relative_to(data_dir / "zookeeper")
        assert "org.apache.zookeeper.server.quorum.QuorumPeerMain" in zk["command"]
        brokers = {b["id"]: b for b in doc["brokers"]}
        assert sorted(brokers) == [1, 2, 3]
        assert bootstrap == ",".join(f"127.0.0.1:{brokers[i]['port']}" for i in (1, 2, 3))
        for broker_id, b in brokers.items():
            assert b["host"] == "127.0.0.1"
            assert b["data_dir"] == str(data_dir / f"broker-{broker_id}")
            assert b["log"] == str(data_dir / f"broker-{broker_id}" / "broker.log")
            assert Path(b["log"]).is_file()
            assert pid_alive(b["pid"])
            command = b["command"]
            assert command[:4] == [sys.executable, "-m", "onceflow", "serve"]
            assert f"zookeeper.connect={zk['connect']}" in command
            assert f"127.0.0.1:{b['port']}" in command
            assert ApiKey.METADATA in api_versions("127.0.0.1", b["port"])

        # ---- every broker in the metadata (needs the brokers' ZooKeeper wiring) -----------
        wait_until(
            "Metadata lists brokers 1, 2 and 3", lambda: metadata_brokers(bootstrap) == {1, 2, 3}
        )

        # ---- kill -9 broker 2, start it again by hand from cluster.json -------------------
        victim = brokers[2]
        log_before = Path(victim["log"]).read_bytes()
        os.kill(victim["pid"], signal.SIGKILL)
        wait_until("broker 2 gone", lambda: not pid_alive(victim["pid"]))
        # Its registration lives until its ZooKeeper session expires; a broker started with
        # the same id and address before that waits for it to expire.
        wait_until(
            "Metadata without broker 2",
            lambda: metadata_brokers(bootstrap) == {1, 3},
            timeout=SESSION_MS / 1000 + 30,
        )
        with open(victim["log"], "ab") as log:
            restarted = subprocess.Popen(
                victim["command"],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=die_with_parent,
            )
        wait_until("broker 2 answers again", lambda: api_versions("127.0.0.1", victim["port"]))
        assert Path(victim["log"]).read_bytes().startswith(log_before)  # appended, kept
        # The launcher notices the new process and records its PID; it did not restart one.
        wait_until(
            "cluster.json has broker 2's new PID",
            lambda: read_json(data_dir / "cluster.json")["brokers"][1]["pid"] == restarted.pid,
            timeout=10.0,
        )
        wait_until(
            "Metadata lists brokers 1, 2 and 3 again",
            lambda: metadata_brokers(bootstrap) == {1, 2, 3},
        )

        # ---- SIGTERM: everything stops, exit code 0 ----------------------------------------
        launcher.send_signal(signal.SIGTERM)
        assert launcher.wait(STOP_TIMEOUT_S) == 0, log(stderr_path)
        assert restarted.wait(10) == 0  # stopped by the launcher, not by this test
        pids = [zk["pid"], brokers[1]["pid"], brokers[3]["pid"], victim["pid"], restarted.pid]
        wait_until("every process gone", lambda: not any(pid_alive(p) for p in pids), 10.0)
        final = read_json(data_dir / "cluster.json")
        assert final["state"] == "stopped"
        assert final["zookeeper"]["pid"] is None
        assert all(b["pid"] is None for b in final["brokers"])
    finally:
        for proc in (launcher, restarted):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--brokers", "0"], {}, "--brokers must be at least 1, got 0"),
        (
            ["--brokers", "1"],
            {"ZOOKEEPER_JAR": "/nonexistent/zookeeper.jar"},
            "apt-get install zookeeper",
        ),
        (["--brokers", "1", "--override", "node.id=7"], {}, "node.id is set by onceflow cluster"),
        (["--brokers", "1", "--override", "min.insync.replicas=x"], {}, "min.insync.replicas"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_1(
    tmp_path: Path, args: list[str], env: dict[str, str], message: str
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "onceflow", "cluster", "--data-dir", str(tmp_path / "c"), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    assert not (tmp_path / "c" / "zookeeper").exists()  # nothing was started


def test_a_data_dir_that_cannot_be_created_is_one_line_and_exit_code_1(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    cluster_dir = str(blocker / "cluster")
    result = subprocess.run(
        [sys.executable, "-m", "onceflow", "cluster", "--brokers", "1", "--data-dir", cluster_dir],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"onceflow: error: cannot create data dir {blocker / 'cluster'}: Not a directory"
    )
