"""A local cluster as `onceflow cluster` records it: DIR/cluster.json and its processes.

The launcher (cli/cluster.py) writes cluster.json; what drives a local cluster without
being the CLI (the demo) reads it here, and both find the processes again with psutil: a
broker restarted by hand from its recorded command is known by that exact argv.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

__all__ = ["CLUSTER_FILE", "pid_alive", "processes_running", "read_cluster_file"]

CLUSTER_FILE = "cluster.json"


def read_cluster_file(root: Path) -> dict[str, Any]:
    """ROOT/cluster.json, or {} when there is none or it is unreadable (being replaced, or a
    launcher that never started)."""
    try:
        document = json.loads((root / CLUSTER_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return document if isinstance(document, dict) else {}


def processes_running(argv: Sequence[str]) -> list[int]:
    """PIDs of live processes, this one aside, whose command line is exactly argv. A zombie
    has no command line, so it never matches."""
    wanted = list(argv)
    me = os.getpid()
    return [
        proc.pid
        for proc in psutil.process_iter(["cmdline"])
        if proc.pid != me and proc.info["cmdline"] == wanted
    ]


def pid_alive(pid: int) -> bool:
    """The process exists and is not a zombie waiting for its parent to reap it."""
    try:
        return psutil.Process(pid).status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.NoSuchProcess:  # a ZombieProcess too
        return False
    except psutil.AccessDenied:  # someone else's: it exists
        return True
