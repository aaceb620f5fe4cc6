"""The retry helper: what is retried, the waits between attempts, and each way it gives up,
on a fake clock whose sleeps only move the time."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from onceflow.retry import Backoff, retry, retry_async


class FakeTime:
    """A clock and a sleep that advances it, recording each wait."""

    def __init__(self) -> None:
        self.now = 100.0
        self.waits: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds

    async def sleep_async(self, seconds: float) -> None:
        self.sleep(seconds)


def failing(failures: int, result: str = "done") -> tuple[Callable[[], str], list[int]]:
    """An operation that raises ConnectionError `failures` times, then returns `result`."""
    calls: list[int] = []

    def attempt() -> str:
        calls.append(len(calls) + 1)
        if len(calls) <= failures:
            raise ConnectionError(f"failure {len(calls)}")
        return result

    return attempt, calls


def test_waits_grow_by_the_factor_up_to_the_maximum() -> None:
    waits = Backoff(0.2, factor=2, max_s=1.0).waits()
    assert [next(waits) for _ in range(6)] == [0.2, 0.4, 0.8, 1.0, 1.0, 1.0]
    constant = Backoff(0.5).waits()
    assert [next(constant) for _ in range(3)] == [0.5, 0.5, 0.5]
    assert next(Backoff(3.0, max_s=1.0).waits()) == 1.0


def test_an_exception_it_retries_is_retried_after_each_wait() -> None:
    t = FakeTime()
    attempt, calls = failing(3)
    backoff = Backoff(0.1, factor=2)
    got = retry(attempt, backoff, retry_on=ConnectionError, clock=t.clock, sleep=t.sleep)
    assert got == "done"
    assert calls == [1, 2, 3, 4]
    assert t.waits == [0.1, 0.2, 0.4]


def test_any_other_exception_propagates_at_once() -> None:
    t = FakeTime()
    attempt, calls = failing(2)
    with pytest.raises(ConnectionError):
        retry(attempt, Backoff(0.1), retry_on=(TimeoutError,), clock=t.clock, sleep=t.sleep)
    with pytest.raises(ConnectionError):
        retry(attempt, Backoff(0.1), clock=t.clock, sleep=t.sleep)  # nothing is retried
    assert len(calls) == 2 and t.waits == []


def test_out_of_attempts_the_last_exception_propagates() -> None:
    t = FakeTime()
    attempt, calls = failing(10)
    with pytest.raises(ConnectionError, match="failure 3"):
        retry(
            attempt, Backoff(1), retry_on=ConnectionError, attempts=3, clock=t.clock, sleep=t.sleep
        )
    assert calls == [1, 2, 3]
    assert t.waits == [1, 1]  # no wait after the last attempt


def test_past_the_deadline_there_is_no_further_attempt() -> None:
    t = FakeTime()
    attempt, calls = failing(10)
    with pytest.raises(ConnectionError, match="failure 4"):
        retry(
            attempt,
            Backoff(1),
            retry_on=ConnectionError,
            deadline_s=3.0,
            clock=t.clock,
            sleep=t.sleep,
        )
    # Attempts at 0, 1, 2 and 3 s: the one that fails at the deadline is the last.
    assert calls == [1, 2, 3, 4]
    assert t.now == 103.0


def test_a_refused_result_is_retried_and_the_last_one_returned_when_out_of_time() -> None:
    t = FakeTime()
    answers = iter(["loading", "loading", "ok"])
    got = retry(
        lambda: next(answers),
        Backoff(0.5),
        retry_if=lambda answer: answer == "loading",
        clock=t.clock,
        sleep=t.sleep,
    )
    assert got == "ok" and t.waits == [0.5, 0.5]
    always = retry(
        lambda: "loading",
        Backoff(0.5),
        retry_if=lambda answer: answer == "loading",
        deadline_s=1.0,
        clock=t.clock,
        sleep=t.sleep,
    )
    assert always == "loading"  # the caller judges the last answer


def test_keep_going_is_asked_after_each_wait() -> None:
    t = FakeTime()
    attempt, calls = failing(10)
    asked: list[float] = []

    def keep_going() -> bool:
        asked.append(t.now)
        return len(asked) < 2

    with pytest.raises(ConnectionError, match="failure 2"):
        retry(
            attempt,
            Backoff(1),
            retry_on=ConnectionError,
            keep_going=keep_going,
            clock=t.clock,
            sleep=t.sleep,
        )
    assert calls == [1, 2]
    assert asked == [101.0, 102.0]  # never before the first attempt; after each wait


def test_attempts_below_one_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        retry(lambda: 1, Backoff(1), attempts=0)


def test_the_async_form_waits_on_the_loop_and_keeps_the_same_rules() -> None:
    t = FakeTime()
    attempt, calls = failing(2)

    async def attempt_async() -> str:
        return attempt()

    async def scenario() -> tuple[str, bool]:
        got = await retry_async(
            attempt_async, Backoff(0.25, factor=2), retry_on=ConnectionError, sleep=t.sleep_async
        )
        # The default sleep and clock are asyncio's and the loop's.
        flips = iter([False, True])

        async def flip() -> bool:
            return next(flips)

        start = asyncio.get_running_loop().time()
        ok = await retry_async(flip, Backoff(0.01), retry_if=lambda ok: not ok, deadline_s=5)
        assert asyncio.get_running_loop().time() - start >= 0.01
        return got, ok

    assert asyncio.run(scenario()) == ("done", True)
    assert calls == [1, 2, 3] and t.waits == [0.25, 0.5]


def test_the_async_form_gives_up_as_the_sync_one() -> None:
    t = FakeTime()

    async def refused() -> int:
        return 0

    async def broken() -> int:
        raise ConnectionError("down")

    async def scenario() -> None:
        assert (
            await retry_async(
                refused,
                Backoff(1),
                retry_if=lambda n: n == 0,
                attempts=3,
                clock=t.clock,
                sleep=t.sleep_async,
            )
            == 0
        )
        with pytest.raises(ConnectionError):
            await retry_async(
                broken,
                Backoff(1),
                retry_on=ConnectionError,
                keep_going=lambda: False,
                clock=t.clock,
                sleep=t.sleep_async,
            )

    asyncio.run(scenario())
    assert t.waits == [1, 1, 1]  # two between three attempts, one before keep_going said no
