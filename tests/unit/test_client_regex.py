"""ListTransactions' transactional-id patterns (KIP-1152): RE2's syntax and whole-id
matching, in linear time whatever the pattern."""

from __future__ import annotations

import re

import pytest
import re2

from onceflow.client_regex import ClientRegex, PatternError

PATTERNS = [
    "",
    "a*",
    "tx-.*",
    "(a|b)*c",
    "[^a-c]+",
    "\\d{2,3}x",
    "(?i)TX-\\w+",
    "a?b?",
    "(ab|a)(bc|c)?",
    "^a.c$",
    "(a*)*b",
    "x{0,2}y",
    "x{2,}y",
    "a\\b-b",
    "a\\Bb",
    "[a-c\\d]{1,}",
    "(?s)a.b",
    "a.b",
    "(?m)a$\\nb",
    "(?:a|)+",
    "a+?b",
    "(?i:a)B",
    "[\\s_]x",
]
TEXTS = [
    "",
    "a",
    "aa",
    "ab",
    "abc",
    "tx-1",
    "TX-abc",
    "tx-ab c",
    "c",
    "acbc",
    "12x",
    "123x",
    "1234x",
    "y",
    "xy",
    "xxy",
    "xxxy",
    "a-b",
    "a\nb",
    "d",
    "aaab",
    "a b",
    "AB",
    "aB",
    " x",
    "_x",
]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_matches_as_a_whole_match_of_the_same_pattern(pattern: str) -> None:
    compiled = ClientRegex(pattern)
    reference = re.compile(pattern, re.ASCII)
    for text in TEXTS:
        assert compiled.matches(text) == bool(reference.fullmatch(text)), (pattern, text)


@pytest.mark.parametrize(
    "pattern",
    [
        "(unclosed",
        "(a)\\1",  # backreference
        "(?P<x>a)(?P=x)",
        "(?=a)a",  # lookahead
        "(?<!a)b",  # lookbehind
        "(?>a)",  # atomic group
        "a*+",  # possessive
        "(a)?(?(1)b|c)",  # conditional
        "a{1001}",
        "a{2,1001}",
        "((((x{1000}){1000}){1000}){1000})",  # repeats nested past RE2's limit
    ],
)
def test_what_re2_refuses_is_refused(pattern: str) -> None:
    with pytest.raises(PatternError):
        ClientRegex(pattern)


def test_a_pattern_over_the_memory_budget_is_refused() -> None:
    """RE2 with its default budget (8 MiB) compiles it; a client gets 1 MiB."""
    pattern = "\\p{L}{300}"
    assert re2.compile(pattern).fullmatch("a" * 300) is not None
    with pytest.raises(PatternError, match="too large"):
        ClientRegex(pattern)


def test_unicode_classes_are_re2_syntax() -> None:
    assert ClientRegex("\\p{L}+-\\d+").matches("tränsaktion-7")
    assert not ClientRegex("\\p{L}+").matches("tx-7")


def test_a_pattern_that_makes_backtracking_exponential_is_answered() -> None:
    """With a backtracking matcher (Python's re) this takes longer than the universe's age;
    a broker answering it would never answer anything else."""
    pattern = ClientRegex("(a+)+$")
    assert not pattern.matches("a" * 200 + "b")
    assert pattern.matches("a" * 200)
    assert not ClientRegex("(a|a)*c").matches("a" * 200)
