"""A real Onceflow broker in a subprocess, on a free loopback port, for integration tests.

The broker's stdout and stderr go to a log file next to (not inside) its data dir, so a
chatty broker can never block on a full pipe, and a test failure can show what it said.
`restart()` keeps the data dir and the port, so clients reconnect to the same address.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

__all__ = [
    "SMALL_DISK_FOOTPRINT",
    "TEST_DEFAULT_OVERRIDES",
    "BrokerProcess",
    "BrokerStartError",
    "broker_command",
    "die_with_parent",
]

# Applied to every test broker unless a test overrides them: no 3 s wait before the first
# rebalance of a new group (Kafka's default would slow every group test down), a 64 MiB
# free-space threshold instead of 1 GiB, so a CI machine short of disk still runs the suite
# (the tests write far less; the disk-full tests set their own), and a 64 KiB ballast: the
# default 16 MiB, in each of the suite's thousand-odd data dirs, filled a shared disk.
TEST_MIN_FREE_BYTES = 64 << 20
TEST_BALLAST_BYTES = 64 << 10
TEST_DEFAULT_OVERRIDES: dict[str, str] = {
    "group.initial.rebalance.delay.ms": "0",
    "onceflow.log.dir.min.free.bytes": str(TEST_MIN_FREE_BYTES),
    "onceflow.log.dir.ballast.bytes": str(TEST_BALLAST_BYTES),
}
# The same disk settings as BrokerConfig fields, for the unit tests' in-process brokers.
SMALL_DISK_FOOTPRINT: dict[str, int] = {
    "onceflow_log_dir_min_free_bytes": TEST_MIN_FREE_BYTES,
    "onceflow_log_dir_ballast_bytes": TEST_BALLAST_BYTES,
}

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0
LOG_TAIL_CHARS = 6000


def broker_command(data_dir: str, listener: str, overrides: Mapping[str, str]) -> list[str]:
    """The one place that knows how to start a broker process: `onceflow serve`."""
    cmd = [sys.executable, "-m", "onceflow.cli.main", "serve", "--data-dir", data_dir]
    if "listeners" not in overrides:  # named listeners (SASL_SSL://...) come as an override
        cmd += ["--listener", listener]
    for key, value in overrides.items():
        cmd += ["--override", f"{key}={value}"]
    return cmd


def die_with_parent() -> None:
    """In the child before exec: SIGKILL it when the test process dies, so a crashed or
    killed test run never leaves brokers behind (Linux only; elsewhere a no-op)."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None).prctl(pr_set_pdeathsig, signal.SIGKILL)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class BrokerStartError(AssertionError):
    """The broker did not start listening in time (the message carries its log)."""


class BrokerProcess:
    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        overrides: Mapping[str, str] | None = None,
        port: int | None = None,
        start_timeout: float = START_TIMEOUT_S,
    ) -> None:
        if data_dir is None:
            self._own_tmp: tempfile.TemporaryDirectory[str] | None = tempfile.TemporaryDirectory(
                prefix="onceflow-test-"
            )
            base = Path(self._own_tmp.name)
        else:
            self._own_tmp = None
            base = Path(data_dir).parent
        self.data_dir = str(Path(data_dir) if data_dir is not None else base / "data")
        self.log_path = str(Path(self.data_dir).parent / (Path(self.data_dir).name + ".broker.log"))
        self.overrides = {**TEST_DEFAULT_OVERRIDES, **(overrides or {})}
        self.port = port or free_port()
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        # Extra environment of the next start (fail points, say); clear it to start plain.
        self.env: dict[str, str] = {}
        self.starts = 0
        # Log bytes before this are not searched for internal errors (a lost port race).
        self.errors_ignored_before = 0

    # ---- properties ------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def log(self) -> str:
        """Everything the broker printed, over all its starts."""
        try:
            return Path(self.log_path).read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_size(self) -> int:
        """A mark for `internal_errors(since=...)`."""
        try:
            return os.path.getsize(self.log_path)
        except FileNotFoundError:
            return 0

    def internal_errors(self, since: int = 0) -> list[str]:
        """ERROR lines and tracebacks the broker logged after byte `since`: each is a bug
        (a handler crash, a failed periodic task), even when clients did not notice."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(since, self.errors_ignored_before))
                text = f.read().decode(errors="replace")
        except FileNotFoundError:
            return []
        lines = text.splitlines()
        found = []
        for i, line in enumerate(lines):
            if " ERROR " in line or line.startswith(("ERROR", "Traceback")):
                found.append("\n".join(lines[i : i + 25]))
        return found

    def log_tail(self, chars: int = LOG_TAIL_CHARS) -> str:
        text = self.log
        return text if len(text) <= chars else "...\n" + text[-chars:]

    # ---- lifecycle -------------------------------------------------------------------

    def start(self) -> BrokerProcess:
        if self.running:
            raise RuntimeError("broker already running")
        os.makedirs(self.data_dir, exist_ok=True)
        for attempt in range(3):
            self._spawn()
            try:
                self._wait_ready()
                return self
            except BrokerStartError:
                # Another process may have grabbed our port between free_port() and bind.
                # Only a first start may move; a restart must keep its address.
                if self.starts == 1 and attempt < 2 and "address already in use" in self.log:
                    self.kill()
                    self.errors_ignored_before = self.log_size()
                    self.port = free_port()
                    self.starts = 0
                    continue
                self.kill()
                raise
        raise AssertionError("unreachable")

    def _spawn(self) -> None:
        cmd = broker_command(self.data_dir, self.bootstrap, self.overrides)
        env = dict(os.environ, PYTHONUNBUFFERED="1", **self.env)
        self.starts += 1
        with open(self.log_path, "ab") as out:
            out.write(f"\n=== start #{self.starts}: {' '.join(cmd[:3])} ... ===\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                preexec_fn=die_with_parent,
            )

    def _wait_ready(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None:
                raise BrokerStartError(
                    f"broker exited with code {code} before listening on {self.bootstrap}; "
                    f"its log:\n{self.log_tail()}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise BrokerStartError(
            f"broker did not listen on {self.bootstrap} within {self.start_timeout:.0f} s; "
            f"its log:\n{self.log_tail()}"
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
                self.proc.kill()
                self.proc.wait(10)
                raise AssertionError(
                    f"broker ignored SIGTERM for {timeout:.0f} s and was killed; its log:\n"
                    f"{self.log_tail()}"
                ) from None
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL: a crash, nothing flushed or closed."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def pause(self) -> None:
        """SIGSTOP: the process freezes with its sockets open."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def restart(self, *, kill: bool = False) -> BrokerProcess:
        """Stop (or kill) and start again on the same data dir and port."""
        if kill:
            self.kill()
        else:
            self.stop()
        # The old listening socket may linger briefly; the broker binds with SO_REUSEADDR.
        return self.start()

    def close(self) -> None:
        """Stop if running and remove a temporary dir this object made itself."""
        with contextlib.suppress(Exception):
            self.stop()
        self.kill()
        if self._own_tmp is not None:
            self._own_tmp.cleanup()
            self._own_tmp = None

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"BrokerProcess({self.bootstrap}, {self.data_dir}, {state})"
