"""A client's regular expression matched in linear time, as Kafka matches it with RE2/J.

ListTransactions v2 (KIP-1152) filters transactional ids by a pattern a client sends. Python's
`re` backtracks, so a pattern such as `(a+)+$` could hold the event loop for minutes; Kafka
uses RE2/J, which cannot. Here the pattern is parsed by Python's own parser and run as a
Thompson NFA, its state sets cached as a lazy DFA (RE2's method): time linear in the id's
length whatever the pattern.

What RE2 refuses is refused (`PatternError`): backreferences, lookaround, atomic groups and
possessive repeats, a repeat count above 1000; so is a program over `MAX_PROGRAM` steps.
`\\d`, `\\w`, `\\s` and `\\b` are ASCII, as in RE2. A pattern matches a whole id, as Java's
`Matcher.matches()` does. Unlike RE2, Unicode classes (`\\p{L}`) are refused: Python's parser
has none.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

_parser: Any = importlib.import_module("re._parser")
_c: Any = importlib.import_module("re._constants")

MAX_REPEAT = 1000  # RE2's limit on {n,m}
MAX_PROGRAM = 2000  # NFA steps: what each character may cost; RE2 bounds its programs too
# The lazy DFA's cache starts over past this many NFA steps held in its state sets, so a
# pattern whose sets are large and many stays within tens of megabytes.
_MAX_CACHED_STEPS = 1_000_000

_IGNORECASE = 2
_MULTILINE = 8
_DOTALL = 16

_WORD = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_DIGIT = frozenset("0123456789")
_SPACE = frozenset("\t\n\v\f\r ")
_CATEGORIES: dict[Any, Callable[[str], bool]] = {
    _c.CATEGORY_DIGIT: lambda ch: ch in _DIGIT,
    _c.CATEGORY_NOT_DIGIT: lambda ch: ch not in _DIGIT,
    _c.CATEGORY_WORD: lambda ch: ch in _WORD,
    _c.CATEGORY_NOT_WORD: lambda ch: ch not in _WORD,
    _c.CATEGORY_SPACE: lambda ch: ch in _SPACE,
    _c.CATEGORY_NOT_SPACE: lambda ch: ch not in _SPACE,
}
_REFUSED = {
    _c.GROUPREF: "backreferences",
    _c.GROUPREF_EXISTS: "conditional groups",
    _c.ASSERT: "lookaround",
    _c.ASSERT_NOT: "lookaround",
    _c.ATOMIC_GROUP: "atomic groups",
    _c.POSSESSIVE_REPEAT: "possessive repeats",
}

# Program steps: (kind, argument, next). "split" has two nexts as its argument and next.
_CHAR, _SPLIT, _ASSERT, _MATCH = "char", "split", "assert", "match"
Step = tuple[str, Any, int]
# Where an assertion is checked: at start, at end, after a newline, before a newline,
# after a word character, before a word character.
Context = tuple[bool, bool, bool, bool, bool, bool]


class PatternError(ValueError):
    """The pattern is not one RE2 would accept (Kafka's INVALID_REGULAR_EXPRESSION)."""


class IdPattern:
    """A compiled pattern; `matches(text)` is whole-text matching in linear time."""

    def __init__(self, text: str) -> None:
        try:
            parsed = _parser.parse(text, 0)
        except (_c.error, RecursionError, OverflowError) as exc:
            raise PatternError(str(exc)) from exc
        self._program: list[Step] = [(_MATCH, None, -1)]
        try:
            self._start = self._compile(list(parsed), parsed.state.flags, 0)
        except RecursionError as exc:
            raise PatternError("the pattern nests too deeply") from exc
        self._closures: dict[tuple[frozenset[int], Context], frozenset[int]] = {}
        self._moves: dict[tuple[frozenset[int], str, Context], frozenset[int]] = {}
        self._cached_steps = 0

    def matches(self, text: str) -> bool:
        states = self._closure(frozenset((self._start,)), _context(text, 0))
        for pos, ch in enumerate(text):
            if not states:
                return False
            states = self._move(states, ch, _context(text, pos + 1))
        return 0 in states  # step 0 is the match

    # ---- running ------------------------------------------------------------------------

    def _move(self, states: frozenset[int], ch: str, after: Context) -> frozenset[int]:
        key = (states, ch, after)
        found = self._moves.get(key)
        if found is None:
            stepped = frozenset(
                self._program[s][2]
                for s in states
                if self._program[s][0] == _CHAR and self._program[s][1](ch)
            )
            found = self._closure(stepped, after)
            self._remember()
            self._moves[key] = found
        return found

    def _remember(self) -> None:
        """Room for one more cached state set: start over when the cache holds too much."""
        if self._cached_steps >= _MAX_CACHED_STEPS:
            self._moves.clear()
            self._closures.clear()
            self._cached_steps = 0
        self._cached_steps += len(self._program)  # a set holds at most every step

    def _closure(self, states: frozenset[int], where: Context) -> frozenset[int]:
        """The steps reachable without reading a character; only those that read one (and
        the match) are kept."""
        key = (states, where)
        found = self._closures.get(key)
        if found is not None:
            return found
        seen: set[int] = set()
        kept: set[int] = set()
        todo = list(states)
        while todo:
            step = todo.pop()
            if step in seen:
                continue
            seen.add(step)
            kind, arg, nxt = self._program[step]
            if kind == _SPLIT:
                todo += (arg, nxt)
            elif kind == _ASSERT:
                if arg(where):
                    todo.append(nxt)
            else:
                kept.add(step)
        found = frozenset(kept)
        self._remember()
        self._closures[key] = found
        return found

    # ---- compiling ----------------------------------------------------------------------

    def _emit(self, step: Step) -> int:
        if len(self._program) >= MAX_PROGRAM:
            raise PatternError(f"the pattern is too large (over {MAX_PROGRAM} steps)")
        self._program.append(step)
        return len(self._program) - 1

    def _compile(self, items: list[Any], flags: int, nxt: int) -> int:
        """The steps of a sequence, built from its end: each item gets its continuation."""
        for op, arg in reversed(items):
            nxt = self._compile_item(op, arg, flags, nxt)
        return nxt

    def _compile_item(self, op: Any, arg: Any, flags: int, nxt: int) -> int:
        if op in _REFUSED:
            raise PatternError(f"{_REFUSED[op]} are not supported (RE2 syntax)")
        if op in (_c.LITERAL, _c.NOT_LITERAL, _c.ANY, _c.IN):
            return self._emit((_CHAR, _char_test(op, arg, flags), nxt))
        if op is _c.AT:
            return self._emit((_ASSERT, _assertion(arg, flags), nxt))
        if op is _c.SUBPATTERN:
            _group, add, remove, body = arg
            return self._compile(list(body), (flags | add) & ~remove, nxt)
        if op is _c.BRANCH:
            branches = [self._compile(list(b), flags, nxt) for b in arg[1]]
            start = branches[-1]
            for branch in reversed(branches[:-1]):
                start = self._emit((_SPLIT, branch, start))
            return start
        if op in (_c.MAX_REPEAT, _c.MIN_REPEAT):
            return self._repeat(arg, flags, nxt)
        raise PatternError(f"unsupported pattern element {op}")

    def _repeat(self, arg: Any, flags: int, nxt: int) -> int:
        low, high, body = arg
        unbounded = high == _c.MAXREPEAT
        if low > MAX_REPEAT or (not unbounded and high > MAX_REPEAT):
            raise PatternError(f"bad repetition operator: counts above {MAX_REPEAT}")
        items = list(body)
        if unbounded:
            loop = self._emit((_SPLIT, -1, nxt))  # its first branch is set below
            self._program[loop] = (_SPLIT, self._compile(items, flags, loop), nxt)
            tail = loop
        else:
            tail = nxt
            for _ in range(high - low):
                tail = self._emit((_SPLIT, self._compile(items, flags, tail), nxt))
        for _ in range(low):
            tail = self._compile(items, flags, tail)
        return tail


def _char_test(op: Any, arg: Any, flags: int) -> Callable[[str], bool]:
    if op is _c.ANY:
        return (lambda ch: True) if flags & _DOTALL else (lambda ch: ch != "\n")
    if op is _c.IN:
        test = _set_test(arg)
    else:
        wanted = chr(arg)
        test = (lambda ch: ch == wanted) if op is _c.LITERAL else (lambda ch: ch != wanted)
    if not flags & _IGNORECASE:
        return test
    return lambda ch: test(ch) or test(ch.lower()) or test(ch.upper())


def _set_test(items: list[tuple[Any, Any]]) -> Callable[[str], bool]:
    negate = False
    literals: set[str] = set()
    ranges: list[tuple[int, int]] = []
    categories: list[Callable[[str], bool]] = []
    for op, arg in items:
        if op is _c.NEGATE:
            negate = True
        elif op is _c.LITERAL:
            literals.add(chr(arg))
        elif op is _c.RANGE:
            ranges.append(arg)
        elif op is _c.CATEGORY and arg in _CATEGORIES:
            categories.append(_CATEGORIES[arg])
        else:
            raise PatternError(f"unsupported character class element {op} {arg}")

    def test(ch: str) -> bool:
        found = (
            ch in literals
            or any(lo <= ord(ch) <= hi for lo, hi in ranges)
            or any(c(ch) for c in categories)
        )
        return found != negate

    return test


def _assertion(code: Any, flags: int) -> Callable[[Context], bool]:
    multiline = bool(flags & _MULTILINE)
    tests: dict[Any, Callable[[Context], bool]] = {
        _c.AT_BEGINNING: lambda w: w[0] or (multiline and w[2]),
        _c.AT_BEGINNING_STRING: lambda w: w[0],
        _c.AT_END: lambda w: w[1] or (multiline and w[3]),
        _c.AT_END_STRING: lambda w: w[1],
        _c.AT_BOUNDARY: lambda w: w[4] != w[5],
        _c.AT_NON_BOUNDARY: lambda w: w[4] == w[5],
    }
    if code not in tests:
        raise PatternError(f"unsupported assertion {code}")
    return tests[code]


def _context(text: str, pos: int) -> Context:
    before = text[pos - 1] if pos > 0 else ""
    after = text[pos] if pos < len(text) else ""
    return (
        pos == 0,
        pos == len(text),
        before == "\n",
        after == "\n",
        before in _WORD,
        after in _WORD,
    )
