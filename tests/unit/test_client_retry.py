"""The client's one retry loop: again while the answer is retriable, up to a deadline."""

from __future__ import annotations

import types

import pytest

from onceflow.client import retry
from onceflow.client.retry import retrying


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Monotonic time that only sleeping advances; the sleeps taken are recorded."""
    slept: list[float] = []
    now = [0.0]

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    monkeypatch.setattr(retry, "time", types.SimpleNamespace(monotonic=lambda: now[0], sleep=sleep))
    return slept


def test_a_settled_answer_is_returned_at_once(clock: list[float]) -> None:
    assert retrying(lambda: "ok", lambda r: r != "ok", timeout_s=5) == "ok"
    assert clock == []


def test_a_retriable_answer_is_asked_again_until_it_settles(clock: list[float]) -> None:
    answers = iter(["loading", "loading", "ok"])
    assert retrying(lambda: next(answers), lambda r: r == "loading", 5, backoff_s=0.5) == "ok"
    assert clock == [0.5, 0.5]


def test_the_last_answer_is_returned_when_the_deadline_passes(clock: list[float]) -> None:
    calls = []

    def attempt() -> str:
        calls.append(1)
        return "loading"

    assert retrying(attempt, lambda r: r == "loading", 1.0, backoff_s=0.25) == "loading"
    assert len(calls) == 5 and sum(clock) == 1.0
