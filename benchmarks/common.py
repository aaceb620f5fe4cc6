"""What every part of the suite shares: broker processes and the mock cluster.

The client workloads (producers, consumers, topics, medians) live in `onceflow.bench`, so
`onceflow bench` measures a user's own broker with exactly the same code.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

from confluent_kafka.admin import AdminClient


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def metadata_answered(port: int, timeout: float = 0.5) -> bool:
    """Whether a Metadata v0 request (all topics) to 127.0.0.1:`port` is answered."""
    client_id = b"bench"
    body = struct.pack(">hhih", 3, 0, 1, len(client_id)) + client_id + struct.pack(">i", 0)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(struct.pack(">i", len(body)) + body)
            head = s.recv(8, socket.MSG_WAITALL)
            if len(head) < 8:
                return False
            _size, correlation = struct.unpack(">ii", head)
            return correlation == 1
    except OSError:
        return False


# `--broker-src DIR`: run the broker from another checkout's src/ (before/after figures).
BROKER_SRC_ENV = "ONCEFLOW_BENCH_BROKER_SRC"


class OnceflowBroker:
    """A broker subprocess on a free port, by default with a fresh temporary data dir.

    With a `listeners` override (named listeners: SASL_SSL://...), `port` must be its
    PLAINTEXT listener's: the readiness check speaks plain Kafka protocol."""

    def __init__(
        self,
        overrides: dict[str, str] | None = None,
        start: bool = True,
        port: int | None = None,
    ) -> None:
        self.dir = tempfile.mkdtemp(prefix="onceflow-bench-")
        self.port = port or free_port()
        self.overrides = dict(overrides or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = os.path.join(self.dir, "broker.log")
        if start:
            self.start()

    def start(self, deadline_s: float = 600.0) -> float:
        """Start the process; return the seconds until it answered a Metadata request."""
        args = [
            sys.executable,
            "-m",
            "onceflow",
            "serve",
            "--data-dir",
            os.path.join(self.dir, "data"),
        ]
        if "listeners" not in self.overrides:  # --listener would win over the override
            args += ["--listener", f"127.0.0.1:{self.port}"]
        for key, value in self.overrides.items():
            args += ["--override", f"{key}={value}"]
        env = dict(os.environ)
        if os.environ.get(BROKER_SRC_ENV):
            env["PYTHONPATH"] = os.path.join(os.environ[BROKER_SRC_ENV], "src")
        with open(self.log_path, "ab") as log:
            started = time.perf_counter()
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = started + deadline_s
        while time.perf_counter() < deadline:
            if metadata_answered(self.port):
                return time.perf_counter() - started
            if self.proc.poll() is not None:
                break
            time.sleep(0.01)
        raise RuntimeError(f"the broker did not start; see {self.log_path}")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def data_dir(self) -> str:
        return os.path.join(self.dir, "data")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def rss_bytes(self) -> int:
        """The broker process's resident set size (VmRSS in /proc/<pid>/status)."""
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        shutil.rmtree(self.dir, ignore_errors=True)


def mock_cluster() -> tuple[AdminClient, str]:
    admin = AdminClient({"test.mock.num.brokers": "1", "log_level": 0})
    brokers = admin.list_topics(timeout=10).brokers
    broker = next(iter(brokers.values()))
    return admin, f"{broker.host}:{broker.port}"
