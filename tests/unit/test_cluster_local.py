"""cluster.json read back, and the processes of a local cluster found by command line."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

from onceflow.cluster.local import (
    CLUSTER_FILE,
    pid_alive,
    processes_running,
    read_cluster_file,
)


def test_cluster_json_is_read_back_and_anything_else_is_empty(tmp_path: Path) -> None:
    assert read_cluster_file(tmp_path) == {}
    (tmp_path / CLUSTER_FILE).write_text("{not json")
    assert read_cluster_file(tmp_path) == {}
    (tmp_path / CLUSTER_FILE).write_text("[1]")
    assert read_cluster_file(tmp_path) == {}
    (tmp_path / CLUSTER_FILE).write_text('{"state": "running"}')
    assert read_cluster_file(tmp_path) == {"state": "running"}


def test_a_process_is_found_by_its_exact_argv_until_it_is_a_zombie() -> None:
    tag = uuid.uuid4().hex
    argv = [sys.executable, "-c", "import time; time.sleep(60)", tag]
    proc = subprocess.Popen(argv)
    try:
        assert processes_running(argv) == [proc.pid]
        assert processes_running([*argv, "more"]) == []
        assert processes_running(argv[:-1]) == []
        assert pid_alive(proc.pid)
        proc.kill()
        # Not reaped yet: a zombie, which is neither alive nor found.
        deadline = time.monotonic() + 10
        while processes_running(argv) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert processes_running(argv) == []
        assert not pid_alive(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert not pid_alive(proc.pid)
