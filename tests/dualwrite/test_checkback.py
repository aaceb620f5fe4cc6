"""The check-back: prepared transactions of writers that never come back (killed after the
Kafka prepare, and after the database commit) are completed as their database says, by
`recover_abandoned` and by a live writer's periodic check-back; a young transaction is left
alone."""

from __future__ import annotations

import time
import uuid

import pytest

from onceflow.dualwrite import DualWriter, recover_abandoned
from onceflow.dualwrite.checkback import open_two_phase_transactions
from tests.dualwrite.conftest import query, read_committed, run_app
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import create_topic

PARTITIONS = 3
EXPECTED = [0, 1, 2, 10, 11, 12, 13]  # the second writer's unit 13 was committed in the database


def abandon_two_writers(broker: BrokerProcess, dsn: str) -> tuple[str, str, str]:
    """Two writers of their own ids, each killed in its fourth unit: the first after the
    Kafka prepare, the second after the database commit; neither starts again."""
    topic = create_topic(broker.bootstrap, partitions=PARTITIONS)
    ids = f"a-{uuid.uuid4().hex[:6]}", f"b-{uuid.uuid4().hex[:6]}"
    for txn_id, first, point in (
        (ids[0], 0, "dualwrite.after_prepare"),
        (ids[1], 10, "dualwrite.after_db_commit"),
    ):
        assert run_app(dsn, broker.bootstrap, txn_id, topic, first, 3).returncode == 0
        dead = run_app(dsn, broker.bootstrap, txn_id, topic, first + 3, 1, failpoint=point)
        assert dead.returncode == -9, dead.stderr
    return topic, ids[0], ids[1]


def assert_matching(broker: BrokerProcess, dsn: str, topic: str) -> None:
    rows = sorted(int(r[0]) for r in query(dsn, "SELECT id FROM orders"))
    records = sorted(int(v) for v in read_committed(broker.bootstrap, topic, PARTITIONS))
    assert rows == EXPECTED
    assert records == EXPECTED


def test_recover_abandoned(broker: BrokerProcess, dsn: str) -> None:
    topic, aborted, committed = abandon_two_writers(broker, dsn)
    assert {aborted, committed} <= set(open_two_phase_transactions(broker.bootstrap))
    assert recover_abandoned(dsn, broker.bootstrap, older_than_s=3600) == {}  # too young
    outcomes = recover_abandoned(dsn, broker.bootstrap, older_than_s=0)
    assert outcomes == {aborted: "aborted", committed: "committed"}
    assert_matching(broker, dsn, topic)
    assert recover_abandoned(dsn, broker.bootstrap, older_than_s=0) == {}


def test_periodic_check_back_of_a_live_writer(broker: BrokerProcess, dsn: str) -> None:
    topic, aborted, committed = abandon_two_writers(broker, dsn)
    with DualWriter(
        dsn, broker.bootstrap, f"live-{uuid.uuid4().hex[:6]}",
        recovery_interval_s=0.3, check_back_after_s=0,
    ):  # fmt: skip
        deadline = time.monotonic() + 60
        while {aborted, committed} & set(open_two_phase_transactions(broker.bootstrap)):
            if time.monotonic() > deadline:
                pytest.fail("the check-back did not complete the abandoned transactions")
            time.sleep(0.3)
    assert_matching(broker, dsn, topic)


def test_cli_dualwrite_recover(
    broker: BrokerProcess, dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from onceflow.cli.main import main

    topic, aborted, committed = abandon_two_writers(broker, dsn)
    base = ["dualwrite", "recover", "--dsn", dsn, "--bootstrap-server", broker.bootstrap]
    assert main([*base, "--transactional-id", committed]) == 0
    assert capsys.readouterr().out == f"{committed}\tcommitted\n"
    assert main([*base, "--older-than-ms", "0"]) == 0
    assert capsys.readouterr().out == f"{aborted}\taborted\n"
    assert main([*base, "--older-than-ms", "0"]) == 0
    assert capsys.readouterr().out == "nothing to recover\n"
    assert_matching(broker, dsn, topic)
