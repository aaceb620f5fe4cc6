"""A group consumer in its own process, so a test can SIGKILL it (no LeaveGroup is sent).

Run as `python -m tests.helpers.child_consumer BOOTSTRAP TOPIC GROUP SESSION_MS [PROTOCOL]`
(PROTOCOL `consumer`: KIP-848's group.protocol, whose session timeout is the broker's). It prints
one line `ASSIGNED p,p,...` each time its assignment changes, and `RECORD p offset` for each
record it receives, and flushes after every line. `ChildConsumer` drives it from a test.
"""

from __future__ import annotations

import logging
import os
import selectors
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers.broker import die_with_parent

REPO_ROOT = Path(__file__).resolve().parents[2]


def _main(bootstrap: str, topic: str, group: str, session_ms: str, protocol: str) -> None:
    from confluent_kafka import Consumer

    quiet = logging.getLogger("child")
    quiet.setLevel(logging.CRITICAL + 1)
    timing: dict[str, object] = {
        "session.timeout.ms": int(session_ms),
        "heartbeat.interval.ms": 500,
    }
    if protocol == "consumer":
        timing = {"group.protocol": "consumer"}
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            **timing,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "logger": quiet,
        }
    )
    c.subscribe([topic])
    last: list[int] | None = None
    while True:
        msg = c.poll(0.1)
        parts = sorted(tp.partition for tp in c.assignment())
        if parts != last:
            print("ASSIGNED " + ",".join(map(str, parts)), flush=True)
            last = parts
        if msg is not None and msg.error() is None:
            print(f"RECORD {msg.partition()} {msg.offset()}", flush=True)


class ChildConsumer:
    def __init__(
        self,
        bootstrap: str,
        topic: str,
        group: str,
        session_ms: int = 6000,
        protocol: str = "classic",
    ) -> None:
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
        )
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.helpers.child_consumer",
                bootstrap,
                topic,
                group,
                str(session_ms),
                protocol,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            cwd=str(REPO_ROOT),
            env=env,
            preexec_fn=die_with_parent,
        )
        assert self.proc.stdout is not None
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.proc.stdout, selectors.EVENT_READ)
        self._buf = b""
        self.assignment: list[int] | None = None
        self.records: list[tuple[int, int]] = []

    def pump(self, timeout: float = 0.0) -> None:
        """Read whatever the child printed, waiting at most `timeout` for the first line."""
        assert self.proc.stdout is not None
        while self._sel.select(timeout):
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                break
            self._buf += chunk
            timeout = 0
        *lines, self._buf = self._buf.split(b"\n")
        for raw in lines:
            line = raw.decode()
            if line.startswith("ASSIGNED"):
                rest = line[len("ASSIGNED") :].strip()
                self.assignment = [int(x) for x in rest.split(",")] if rest else []
            elif line.startswith("RECORD"):
                _, p, o = line.split()
                self.records.append((int(p), int(o)))

    def stderr(self) -> str:
        assert self.proc.stderr is not None
        if self.proc.poll() is None:
            return "(still running)"
        return self.proc.stderr.read().decode(errors="replace")[-3000:]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)

    def close(self) -> None:
        self.kill()
        self._sel.close()


def wait_for(predicate, timeout: float, step, what: str) -> None:  # type: ignore[no-untyped-def]
    """Call step() until predicate() holds; fail after timeout naming what was awaited."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        step()


if __name__ == "__main__":
    _main(*sys.argv[1:5], sys.argv[5] if len(sys.argv) > 5 else "classic")
