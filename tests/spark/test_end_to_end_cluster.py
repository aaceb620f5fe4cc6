"""End to end on a cluster: the payments demo on three brokers (ZooKeeper, replication
factor 3), with the broker that coordinates the sink's transactions killed with kill -9 in
the middle of a micro-batch and restarted, and the Spark driver SIGKILLed once.

Like test_end_to_end, it runs the demo as a user would (`python -m onceflow.demo --brokers
3`) and checks the exit status, the report's verdict and that both kills happened. About
two minutes on two cores.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def _tail(path: Path, chars: int = 3000) -> str:
    return f"\n--- {path}\n" + path.read_text(errors="replace")[-chars:] if path.exists() else ""


def test_pipeline_is_exactly_once_across_a_coordinator_broker_kill(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "onceflow.demo",
            "--brokers",
            "3",
            "--payments",
            "1500",
            "--kills",
            "1",
            "--workdir",
            str(tmp_path),
            "--timeout",
            "240",
        ],
        capture_output=True,
        text=True,
        timeout=290,
    )
    logs = _tail(tmp_path / "job.log") + _tail(tmp_path / "cluster" / "launcher.log")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:] + logs
    out = done.stdout
    assert "transaction coordinator of payments-clean-0" in out
    assert "event: broker " in out and "killed with kill -9 in micro-batch" in out, out
    assert "serving at never" not in out, out
    assert "SIGKILLed the driver in the middle of micro-batch" in out
    assert out.count("restarted the job from its checkpoints") == 1
    assert "partitions with a replica out of sync" in out
    assert "overall" in out and "PASS" in out.split("overall", 1)[1]
