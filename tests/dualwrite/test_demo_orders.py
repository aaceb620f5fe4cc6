"""The order-service demo (`make run-orders`) in a reduced form: a few rounds of kills of
the service and one kill -9 of the broker, on SQLite and on the demo's own PostgreSQL
server (which also crashes once); its table must say PASS, with every committed order
having exactly one event."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.dualwrite.conftest import ROOT


def run_demo(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return subprocess.run(
        [sys.executable, "-m", "onceflow.demo.orders", "--seed", "7", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def assert_passed(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("orders with exactly one event") for line in lines)
    assert lines[-1].split()[-1] == "PASS", done.stdout
    assert "kill -9 of the broker x1" in done.stdout


def test_demo_on_sqlite() -> None:
    assert_passed(run_demo("--rounds", "4", "--broker-kill-every", "3", "--database", "sqlite"))


def test_demo_on_postgresql() -> None:
    done = run_demo(
        "--rounds", "3", "--broker-kill-every", "2", "--database", "postgresql",
        "--database-crash-every", "2",
    )  # fmt: skip
    assert_passed(done)
    assert "PostgreSQL crash and restart x2" in done.stdout  # rounds 1 and 3
