"""Onceflow's processes (a broker, a CLI command, a Spark worker) do not import hypothesis,
which kio's types import whenever it is installed (0.2 s of a 0.45 s start); a process that
imported hypothesis first keeps kio's strategies."""

from __future__ import annotations

import subprocess
import sys


def _run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout.strip()


def test_importing_onceflow_does_not_import_hypothesis() -> None:
    code = (
        "import sys, onceflow.broker.server, onceflow.cli, onceflow.spark.writer\n"
        "print('kio.static.primitive' in sys.modules, 'hypothesis' in sys.modules)\n"
        "import hypothesis.strategies\n"  # still importable afterwards
    )
    assert _run(code) == "True False"


def test_a_process_that_imported_hypothesis_first_keeps_kios_strategies() -> None:
    code = (
        "import hypothesis.strategies as st\n"
        "import onceflow.errors\n"
        "from kio.static.primitive import i16\n"
        "print(repr(st.from_type(i16)))\n"
    )
    # kio registered its bounded strategy (hidden, from_type would be unresolved)
    assert _run(code) == "integers(min_value=-32768, max_value=32767)"
