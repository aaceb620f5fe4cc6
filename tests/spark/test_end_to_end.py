"""End to end: the payments demo with its Spark driver SIGKILLed twice mid-micro-batch.

The demo itself checks, with read_committed consumers, that every committed payment appears
exactly once, no aborted payment appears anywhere and the balances equal sums computed
independently from the input; it exits non-zero otherwise. This test runs it as a user would
(`python -m onceflow.demo`) and checks the exit status and the report's verdict.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_pipeline_is_exactly_once_across_two_driver_kills(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "onceflow.demo",
            "--payments",
            "1500",
            "--kills",
            "2",
            "--workdir",
            str(tmp_path),
            "--timeout",
            "420",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    job_log = (
        (tmp_path / "job.log").read_text(errors="replace")[-4000:]
        if (tmp_path / "job.log").exists()
        else ""
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:] + job_log
    assert "SIGKILLed the driver in the middle of micro-batch" in done.stdout
    assert done.stdout.count("restarted the job from its checkpoints") == 2
    assert "overall" in done.stdout and "PASS" in done.stdout.split("overall", 1)[1]
    # The sink committed per micro-batch, and a reader never saw part of one.
    rows = {
        line.rsplit(None, 3)[0].strip(): line.split()[-3:]
        for line in done.stdout.splitlines()
        if line.endswith((" ok", " FAIL"))
    }
    assert rows["clean sink commits per micro-batch"] == ["yes", "yes", "ok"], rows
    assert rows["micro-batches seen in part by a reader"] == ["0", "0", "ok"], rows
