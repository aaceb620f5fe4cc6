"""The blocking client's "again while the answer is retriable" loop: a coordinator still
loading or being elected, or a request sent to a broker that no longer coordinates. One
use of the project's retry helper, with the client's backoff."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from onceflow.retry import Backoff, retry

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
    return retry(
        attempt,
        Backoff(backoff_s),
        retry_if=again,
        deadline_s=timeout_s,
        clock=time.monotonic,
        sleep=time.sleep,
    )
