"""Run KafkaJS (tests/node/node_modules, set up by `make kafkajs`) against a broker through
tests/node/kafkajs_steps.js: a list of steps in, one result per step out, each either
{"ok": value} or {"error": ...} as KafkaJS reported it."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

NODE_DIR = Path(__file__).resolve().parent
SCRIPT = NODE_DIR / "kafkajs_steps.js"
RUN_TIMEOUT_S = 120.0


def require_kafkajs() -> str:
    """The node binary; fails the test when Node.js or KafkaJS is missing (`make test`
    sets both up), since a skipped client test would prove nothing."""
    node = shutil.which("node")
    if node is None or not (NODE_DIR / "node_modules" / "kafkajs" / "package.json").exists():
        pytest.fail(
            "the KafkaJS tests need Node.js and KafkaJS in tests/node/node_modules: run "
            "`make kafkajs` (`make test` does), which needs node and npm (Debian's 'nodejs' "
            "and 'npm' packages)",
            pytrace=False,
        )
    return node


def run_steps(node: str, bootstrap: str, steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    spec = json.dumps({"brokers": [bootstrap], "steps": steps})
    try:
        done = subprocess.run(
            [node, str(SCRIPT), spec],
            cwd=NODE_DIR,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"KafkaJS steps still running after {RUN_TIMEOUT_S} s") from exc
    assert done.returncode == 0, f"KafkaJS exited {done.returncode}: {done.stderr}"
    results: list[dict[str, Any]] = json.loads(done.stdout)["results"]
    assert len(results) == len(steps)
    return results


def step(op: str, args: Any) -> dict[str, Any]:
    return {"op": op, "args": args}


def ok(result: dict[str, Any]) -> Any:
    assert "ok" in result, f"KafkaJS failed: {json.dumps(result['error'], indent=1)}"
    return result["ok"]


def protocol_error(result: dict[str, Any]) -> tuple[str, int]:
    """(type, code) of the Kafka error KafkaJS reported, from wherever it nests it: the
    error itself, its cause, or the one failed group or partition."""
    assert "error" in result, f"KafkaJS succeeded: {result['ok']}"
    error = result["error"]
    while "code" not in error or error["code"] is None:
        nested = error.get("groups") or error.get("partitions")
        if nested:
            assert len(nested) == 1, nested
            error = nested[0]["error"]
        elif error.get("cause"):
            error = error["cause"]
        else:
            raise AssertionError(f"no Kafka error code in {json.dumps(result['error'])}")
    assert error["name"] == "KafkaJSProtocolError", error
    return error["type"], error["code"]
