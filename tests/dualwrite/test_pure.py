"""The dual write's pure parts, without a broker: DSNs, identifiers, and the decision
recovery takes from a state row."""

from __future__ import annotations

import pytest

from onceflow.client.errors import ConfigError
from onceflow.dualwrite.database import _parse, check_identifier
from onceflow.dualwrite.state import Decision, LastTransaction


def test_dsns() -> None:
    assert _parse("sqlite:///var/lib/app.db") == ("sqlite", "/var/lib/app.db")
    assert _parse("sqlite:app.db") == ("sqlite", "app.db")
    assert _parse("postgresql://u@h:5/db") == ("postgresql", "postgresql://u@h:5/db")
    assert _parse("postgres://u@h/db")[0] == "postgresql"
    assert _parse("host=h dbname=db")[0] == "postgresql"
    for bad in ("mysql://h/db", "app.db", "sqlite:"):
        with pytest.raises(ConfigError):
            _parse(bad)


def test_identifiers() -> None:
    assert check_identifier("onceflow_dualwrite", "t") == "onceflow_dualwrite"
    for bad in ("", "1x", "a b", "x;drop", 'x"', "a.b", "x" * 64):
        with pytest.raises(ConfigError):
            check_identifier(bad, "t")


def test_the_decision() -> None:
    prepared = Decision(7, 3, "prepared")
    assert prepared.commits((7, 3))
    assert not prepared.commits((7, 4))  # another transaction of the id: never committed
    assert not prepared.commits((8, 3))
    assert not Decision(7, 3, "completed").commits((7, 3))  # the next unit at the same epoch


def test_an_abort_behind_the_databases_back() -> None:
    prepared = Decision(7, 3, "prepared")
    assert prepared.aborted_behind_our_back(LastTransaction("CompleteAbort", 7, 4))
    assert prepared.aborted_behind_our_back(LastTransaction("PrepareAbort", 7, 3))
    assert not prepared.aborted_behind_our_back(LastTransaction("CompleteCommit", 7, 3))
    assert not prepared.aborted_behind_our_back(LastTransaction("CompleteAbort", 7, 2))
    assert not prepared.aborted_behind_our_back(LastTransaction("CompleteAbort", 9, 5))
    assert not prepared.aborted_behind_our_back(None)
    assert not Decision(7, 3, "completed").aborted_behind_our_back(
        LastTransaction("CompleteAbort", 7, 3)
    )
