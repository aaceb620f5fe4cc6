"""Kafka's error codes, and the exception that carries one.

Clients act on the numeric code (retriable, fatal, abortable), so the broker always answers
with exactly the code Kafka answers in the same situation. The enum comes from kio, which
generates it from Kafka's own error table, retriable flags included.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "KafkaError", "ProtocolError"]


class KafkaError(Exception):
    """A failure that maps to one Kafka error code in a response."""

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        super().__init__(f"{code.name}: {message}" if message else code.name)
        self.code = code
        self.message = message


class ProtocolError(Exception):
    """A request that cannot be parsed. The connection that sent it is closed."""


def fail_future(fut: asyncio.Future[Any], exc: BaseException) -> None:
    """Fail a future whose waiter may be gone (its client left, or the broker is shutting
    down and its loop stops before done callbacks run): the error is marked seen, so asyncio
    never logs it as lost, and a waiter that is still there gets it all the same."""
    fut.set_exception(exc)
    fut.exception()
