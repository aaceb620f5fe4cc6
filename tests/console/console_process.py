"""`onceflow console` in a subprocess, as a user starts it, on a free loopback port."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from tests.helpers.broker import die_with_parent, free_port

START_TIMEOUT_S = 30.0
# Short, so a test sees the error state soon after the broker goes away.
CALL_TIMEOUT_MS = 3000


class ConsoleProcess:
    def __init__(self, bootstrap: str, log_path: Path, extra: Sequence[str] = ()) -> None:
        self.bootstrap = bootstrap
        self.extra = list(extra)  # further options, such as --command-config FILE
        self.port = free_port()
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def url(self, fragment: str = "") -> str:
        return self.base_url + fragment

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def start(self, attempts: int = 3) -> ConsoleProcess:
        cmd = [sys.executable, "-m", "onceflow.cli.main", "console"]
        cmd += ["--bootstrap-server", self.bootstrap, "--listen", f"127.0.0.1:{self.port}"]
        cmd += ["--timeout-ms", str(CALL_TIMEOUT_MS), *self.extra]
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
                preexec_fn=die_with_parent,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                if "address already in use" in self.log() and attempts > 1:
                    # The free port was taken between free_port() and the console's bind
                    # (a broker or a client on the other test worker): another one.
                    self.port = free_port()
                    return self.start(attempts - 1)
                raise AssertionError(
                    f"the console exited with {self.proc.returncode}:\n{self.log()}"
                )
            try:
                with urllib.request.urlopen(self.url("api/health"), timeout=2) as response:
                    if json.load(response).get("ok"):
                        return self
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"the console did not answer in {START_TIMEOUT_S} s:\n{self.log()}")

    def stop(self) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.terminate()
        try:
            return self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None
