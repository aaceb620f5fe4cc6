"""A client's regular expression, matched as Kafka matches it: with RE2.

Clients send patterns: ListTransactions v2 (KIP-1152) filters transactional ids by one, and a
KIP-848 consumer subscribes by one (ConsumerGroupHeartbeat's SubscribedTopicRegex). Python's
`re` backtracks, so a pattern such as `(a+)+$` could hold the event loop for minutes; Kafka
uses RE2/J, which cannot, and so does this module (google-re2, RE2's own Python binding): time
linear in the id's length whatever the pattern, RE2's syntax (Unicode classes included), and
what RE2 refuses (backreferences, lookaround, atomic groups, possessive repeats, a repeat count
above 1000, a program over its memory budget) raises `PatternError`. A pattern matches a
whole name, as Java's `Matcher.matches()` does.
"""

from __future__ import annotations

import re2

# RE2's memory budget for one compiled pattern (its default is 8 MiB): a client's pattern must
# not make the broker allocate much; one over the budget is refused at compile time.
MAX_PATTERN_MEMORY = 1 << 20

_OPTIONS = re2.Options()
_OPTIONS.max_mem = MAX_PATTERN_MEMORY
_OPTIONS.log_errors = False  # a refused pattern is the client's error, answered as such


class PatternError(ValueError):
    """The pattern is not one RE2 accepts (Kafka's INVALID_REGULAR_EXPRESSION)."""


class ClientRegex:
    """A compiled pattern; `matches(text)` is whole-text matching in linear time."""

    def __init__(self, text: str) -> None:
        try:
            self._regex = re2.compile(text, _OPTIONS)
        except re2.error as exc:
            raise PatternError(str(exc)) from exc

    def matches(self, text: str) -> bool:
        return self._regex.fullmatch(text) is not None
