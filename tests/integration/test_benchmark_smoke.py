"""The benchmark suite runs (tiny sizes), so it cannot rot. No timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_benchmark_suite_smoke_run_prints_and_writes_figures() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--smoke"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "produce_1024B_ratio_to_mock" in done.stdout
    results = json.loads((ROOT / "benchmarks" / "results" / "smoke.json").read_text())
    figures = results["figures"]
    assert results["cores"] >= 1
    for name in ("produce_1024B_onceflow_MBps", "consume_read_committed_MBps"):
        assert figures[name] > 0
