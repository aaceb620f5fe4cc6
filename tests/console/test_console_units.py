"""The console's pure pieces: how records are shown, and which transactions are near
their timeout."""

from __future__ import annotations

import datetime
from types import SimpleNamespace

from onceflow.console.records_view import render
from onceflow.console.txn_view import _transaction


def test_render_as_text_json_and_hex() -> None:
    assert render(None, "text") is None
    assert render(b"caf\xc3\xa9", "text") == "café"
    assert render(b'{"a":[1,2]}', "json") == '{\n  "a": [\n    1,\n    2\n  ]\n}'
    assert render(b"not json", "json") == "not json"
    assert render(b"\x00\xffA", "hex") == "00 ff 41"


def _state(state: str, start_ms: int, timeout_ms: int) -> SimpleNamespace:
    topic = SimpleNamespace(topic="t", partitions=(1, 0))
    return SimpleNamespace(
        transactional_id="app",
        transaction_state=state,
        producer_id=7,
        producer_epoch=2,
        transaction_start_time=start_ms,
        transaction_timeout=datetime.timedelta(milliseconds=timeout_ms),
        topics=(topic,),
    )


def test_an_open_transaction_past_80_percent_of_its_timeout_is_near_it() -> None:
    now = 1_000_000
    young = _transaction(_state("Ongoing", now - 40_000, 60_000), 0, now)
    old = _transaction(_state("Ongoing", now - 50_000, 60_000), 0, now)
    done = _transaction(_state("CompleteCommit", now - 50_000, 10_000), 0, now)
    assert (young["near_timeout"], old["near_timeout"], done["near_timeout"]) == (
        False,
        True,
        False,
    )
    assert young["age_ms"] == 40_000 and done["age_ms"] is None
    assert young["partitions"] == ["t-0", "t-1"]
    assert young["timeout_ms"] == 60_000


def test_a_two_phase_commit_transaction_shows_its_age_and_no_timeout() -> None:
    """KIP-939: described with Kafka's largest timeout, which no transaction reaches; it is
    shown as two-phase commit, with its age, and never as near a timeout."""
    now = 100 * 86_400_000
    row = _transaction(_state("Ongoing", now - 30 * 86_400_000, 2**31 - 1), 0, now)
    assert row["two_phase"] is True
    assert row["timeout_ms"] is None and row["near_timeout"] is False
    assert row["age_ms"] == 30 * 86_400_000
    plain = _transaction(_state("Ongoing", now - 1_000, 60_000), 0, now)
    assert plain["two_phase"] is False and plain["timeout_ms"] == 60_000
