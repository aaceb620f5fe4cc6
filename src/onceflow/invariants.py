"""invariant(): an assertion that survives `python -O`.

A failed invariant is a bug in Onceflow, never a user error, so nothing catches it.
"""

from __future__ import annotations


class InvariantViolation(AssertionError):
    """Raised when the broker's own bookkeeping is inconsistent."""


def invariant(condition: bool, message: str) -> None:
    if not condition:
        raise InvariantViolation(message)
