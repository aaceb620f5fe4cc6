"""Fail points: the spec a test arms them with, and a bad spec refused at start."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from onceflow import failpoints
from onceflow.failpoints import FAILPOINTS_ENV, parse


def test_a_spec_arms_named_points_with_kill_or_pause() -> None:
    assert parse("") == {}
    assert parse("txn.after_prepare=kill, txn.before_complete=pause") == {
        "txn.after_prepare": signal.SIGKILL,
        "txn.before_complete": signal.SIGSTOP,
    }


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("txn.after_commit=kill", "unknown fail point 'txn.after_commit'"),
        ("txn.after_prepare", "needs =kill or =pause"),
        ("txn.after_prepare=crash", "needs =kill or =pause, not 'crash'"),
    ],
)
def test_a_bad_spec_names_what_is_wrong(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse(spec)


def test_an_unarmed_point_does_nothing_and_an_armed_one_fires_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fired: list[tuple[int, int]] = []
    monkeypatch.setattr(failpoints.os, "kill", lambda pid, sig: fired.append((pid, sig)))
    monkeypatch.setenv(FAILPOINTS_ENV, "txn.between_markers=pause")
    failpoints.arm_from_environment()
    try:
        failpoints.failpoint("txn.after_prepare")
        assert fired == []
        failpoints.failpoint("txn.between_markers")
        failpoints.failpoint("txn.between_markers")
        assert fired == [(os.getpid(), signal.SIGSTOP)]
    finally:
        monkeypatch.delenv(FAILPOINTS_ENV)
        failpoints.arm_from_environment()


def test_serve_refuses_a_bad_spec_with_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "onceflow.cli.main", "serve", "--data-dir", str(tmp_path)],
        env={**os.environ, FAILPOINTS_ENV: "txn.nowhere=kill"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "unknown fail point 'txn.nowhere'" in done.stderr
    assert "Traceback" not in done.stderr
