"""The one "again while the answer is retriable" loop of the blocking client: a coordinator
still loading or being elected, or a request sent to a broker that no longer coordinates."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["RETRY_BACKOFF_S", "retrying"]

RETRY_BACKOFF_S = 0.2
T = TypeVar("T")


def retrying(
    attempt: Callable[[], T],
    again: Callable[[T], bool],
    timeout_s: float,
    backoff_s: float = RETRY_BACKOFF_S,
) -> T:
    """`attempt()` until `again(result)` is false or `timeout_s` has passed since the first
    attempt, sleeping `backoff_s` in between; the last result either way."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = attempt()
        if not again(result) or time.monotonic() >= deadline:
            return result
        time.sleep(backoff_s)
