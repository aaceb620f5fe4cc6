"""Every `onceflow` command line of the README's quick start and CLI section runs.

The lines are taken from the sections' `sh` blocks in document order and run one after
the other by bash, as a user pastes them, against one fresh broker process (the quick start
creates `payments`, the CLI section's session its own `orders`): each exits 0, or, where
the line says `# error`, fails with one line on stderr. A client command is pointed at the
test broker by appending `--bootstrap-server` (the last one wins); `onceflow cluster` runs
until it prints its bootstrap line and then stops on SIGTERM with exit code 0.
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.broker import BrokerProcess, die_with_parent

README = Path(__file__).resolve().parents[2] / "README.md"
SECTIONS = ("## Quick start with a real client", "## The CLI")
LINE_TIMEOUT_S = 120.0
CLUSTER_START_S = 180.0  # ZooKeeper's JVM and three brokers on two shared cores
CLUSTER_STOP_S = 90.0
CLIENT_COMMANDS = (
    "topics",
    "produce",
    "consume",
    "groups",
    "configs",
    "delete-records",
    "transactions",
    "acls",
    "users",
    "bench",
)
# `onceflow` as the README's reader has it, aimed at the test's broker.
WRAPPER = f"""
set -o pipefail
onceflow() {{
  case "$1" in
    {"|".join(CLIENT_COMMANDS)})
      "$ONCEFLOW_PYTHON" -m onceflow "$@" --bootstrap-server "$ONCEFLOW_BOOTSTRAP" ;;
    *) "$ONCEFLOW_PYTHON" -m onceflow "$@" ;;
  esac
}}
"""
_INVOCATION = re.compile(r"(^|\|\s*)(\.venv/bin/)?onceflow\b")


def section(text: str, heading: str) -> str:
    start = text.index(heading + "\n")
    end = text.find("\n## ", start + len(heading))
    return text[start : None if end < 0 else end]


def command_lines(text: str) -> list[str]:
    """The `onceflow` lines of the `sh` blocks, continuation lines joined."""
    lines: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            if _INVOCATION.search(line):
                lines.append(line.replace(".venv/bin/onceflow", "onceflow").strip())
    return lines


def readme_lines() -> list[str]:
    text = README.read_text()
    return [line for heading in SECTIONS for line in command_lines(section(text, heading))]


def test_the_readme_has_command_lines() -> None:
    lines = readme_lines()
    assert len(lines) >= 15
    for command in ("topics", "produce", "consume", "groups", "configs", "cluster"):
        assert any(f"onceflow {command} " in line for line in lines), command
    assert any("# error" in line for line in lines)


@pytest.fixture
def bootstrap(shared_broker: BrokerProcess) -> Iterator[str]:
    yield shared_broker.bootstrap


def run_line(line: str, bootstrap: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ONCEFLOW_PYTHON": sys.executable, "ONCEFLOW_BOOTSTRAP": bootstrap}
    return subprocess.run(
        ["bash", "-c", WRAPPER + line],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=LINE_TIMEOUT_S,
        check=False,
    )


def test_every_client_line_runs(bootstrap: str, tmp_path: Path) -> None:
    failures = []
    for line in readme_lines():
        if line.startswith("onceflow cluster"):
            continue  # test_the_cluster_line
        done = run_line(line, bootstrap, tmp_path)
        if "# error" in line:
            good = done.returncode != 0 and done.stderr.count("\n") == 1
            good = good and done.stderr.startswith("onceflow")
        else:
            good = done.returncode == 0 and "Traceback" not in done.stderr
        if not good:
            failures.append(f"{line}\n  exit {done.returncode}: {done.stderr.strip()}")
    assert not failures, "\n".join(failures)


def _first_stdout_line(proc: subprocess.Popen[bytes], timeout: float) -> str:
    assert proc.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    buffer = b""
    while b"\n" not in buffer and proc.poll() is None and time.monotonic() < deadline:
        if selector.select(timeout=1.0):
            buffer += os.read(proc.stdout.fileno(), 4096)
    return buffer.decode().split("\n")[0]


def test_the_cluster_line(tmp_path: Path) -> None:
    [line] = [line for line in readme_lines() if line.startswith("onceflow cluster")]
    argv = line.split()[1:]
    with open(tmp_path / "launcher.err", "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "onceflow", *argv],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=err,
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )
    try:
        first = _first_stdout_line(proc, CLUSTER_START_S)
        log = (tmp_path / "launcher.err").read_text()
        assert re.fullmatch(r"127\.0\.0\.1:\d+(,127\.0\.0\.1:\d+){2}", first), log
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=CLUSTER_STOP_S) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
