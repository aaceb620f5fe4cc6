"""Trying an operation again after a wait: the one retry loop of the code base.

Each caller says what counts as a failure, how long to wait and when to give up; the loop,
the growing wait and the limits are written once, here, instead of in every caller.

After a failed attempt (an exception of `retry_on`, or a result `retry_if` refuses) the
limits are checked: past `attempts`, or `deadline_s` after the first attempt began, the last
exception propagates, or the last result is returned for the caller to judge. Otherwise the
next wait is slept, and then `keep_going()` (when given) is asked: false ends the retries the
same way. It is asked after the wait because the wait is when the world changes (a
partition unloaded, a stop requested). `retry_async` is the same on the event loop, with
`asyncio.sleep` and the loop's clock.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

__all__ = ["Backoff", "retry", "retry_async"]

T = TypeVar("T")

Exceptions = type[BaseException] | tuple[type[BaseException], ...]


@dataclass(frozen=True, slots=True)
class Backoff:
    """The waits between attempts: `first_s`, then each `factor` times the one before, never
    more than `max_s` (the default factor 1 waits the same every time)."""

    first_s: float
    factor: float = 1.0
    max_s: float = math.inf

    def waits(self) -> Iterator[float]:
        wait = min(self.first_s, self.max_s)
        while True:
            yield wait
            wait = min(wait * self.factor, self.max_s)


class _Tries:
    """What is left of the limits, and the next wait."""

    def __init__(
        self,
        backoff: Backoff,
        attempts: int | None,
        deadline_s: float | None,
        keep_going: Callable[[], bool] | None,
        clock: Callable[[], float],
    ) -> None:
        if attempts is not None and attempts < 1:
            raise ValueError(f"attempts must be at least 1, not {attempts}")
        self._waits = backoff.waits()
        self._left = attempts
        self._deadline = None if deadline_s is None else clock() + deadline_s
        self._keep_going = keep_going
        self._clock = clock

    def next_wait(self) -> float | None:
        """After a failed attempt: the wait before the next one, or None past the limits."""
        if self._left is not None:
            self._left -= 1
            if self._left <= 0:
                return None
        if self._deadline is not None and self._clock() >= self._deadline:
            return None
        return next(self._waits)

    def keep_going(self) -> bool:
        return self._keep_going is None or self._keep_going()

    def pause(self, sleep: Callable[[float], object]) -> bool:
        """Wait before the next attempt; False (at once, or after the wait) when there is
        to be none."""
        wait = self.next_wait()
        if wait is None:
            return False
        sleep(wait)
        return self.keep_going()

    async def pause_async(self, sleep: Callable[[float], Awaitable[object]]) -> bool:
        wait = self.next_wait()
        if wait is None:
            return False
        await sleep(wait)
        return self.keep_going()


def retry(
    attempt: Callable[[], T],
    backoff: Backoff,
    *,
    retry_on: Exceptions = (),
    retry_if: Callable[[T], bool] | None = None,
    attempts: int | None = None,
    deadline_s: float | None = None,
    keep_going: Callable[[], bool] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], object] = time.sleep,
) -> T:
    """`attempt()` until it returns a result `retry_if` accepts (any, without `retry_if`)
    and raises nothing of `retry_on`, or until a limit ends the retries (see the module)."""
    tries = _Tries(backoff, attempts, deadline_s, keep_going, clock)
    while True:
        try:
            result = attempt()
        except retry_on:
            if tries.pause(sleep):
                continue
            raise
        if retry_if is None or not retry_if(result) or not tries.pause(sleep):
            return result


async def retry_async(
    attempt: Callable[[], Awaitable[T]],
    backoff: Backoff,
    *,
    retry_on: Exceptions = (),
    retry_if: Callable[[T], bool] | None = None,
    attempts: int | None = None,
    deadline_s: float | None = None,
    keep_going: Callable[[], bool] | None = None,
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
) -> T:
    """`retry` for a coroutine: the waits free the loop; the clock is the loop's."""
    now = clock if clock is not None else asyncio.get_running_loop().time
    tries = _Tries(backoff, attempts, deadline_s, keep_going, now)
    while True:
        try:
            result = await attempt()
        except retry_on:
            if await tries.pause_async(sleep):
                continue
            raise
        if retry_if is None or not retry_if(result) or not await tries.pause_async(sleep):
            return result
