"""Crash points of a dual write, against a real broker and real SQLite and PostgreSQL: the
application (a child process) is killed with SIGKILL by a fail point after the Kafka
prepare, after the database commit (before the Kafka commit), after the Kafka commit and
after the unit is marked completed; in two cases the broker is killed -9 and PostgreSQL
crashes (stop -m immediate) before recovery too. Each time, a new writer of the id
recovers, and the rows and the committed records match one to one."""

from __future__ import annotations

import uuid

import pytest

from onceflow.dualwrite import DualWriter
from tests.dualwrite.conftest import query, read_committed, run_app
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import create_topic

PARTITIONS = 3
# fail point -> (what recovery does to the open transaction, whether the unit is committed)
POINTS = {
    "dualwrite.after_prepare": ("aborted", False),
    "dualwrite.after_db_commit": ("committed", True),
    "dualwrite.after_kafka_commit": ("none", True),
    "dualwrite.after_complete": ("none", True),
}


def crash_then_recover(
    broker: BrokerProcess, dsn: str, point: str, between: object = None
) -> tuple[str, str, str]:
    """Three clean units, a fourth killed at `point`, `between()`, then a new writer's
    recovery and one more unit; the topic, the id and the recovery's outcome."""
    topic = create_topic(broker.bootstrap, partitions=PARTITIONS)
    txn_id = f"orders-{uuid.uuid4().hex[:8]}"
    clean = run_app(dsn, broker.bootstrap, txn_id, topic, 0, 3)
    assert clean.returncode == 0, clean.stderr
    dead = run_app(dsn, broker.bootstrap, txn_id, topic, 3, 1, failpoint=point)
    assert dead.returncode == -9, (dead.returncode, dead.stdout, dead.stderr)
    assert "unit 3" not in dead.stdout
    if callable(between):
        between()
    mark = "?" if dsn.startswith("sqlite:") else "%s"
    with DualWriter(dsn, broker.bootstrap, txn_id, recovery_interval_s=None) as writer:
        outcome = writer.last_recovery
        with writer.transaction() as tx:
            tx.execute(f"INSERT INTO orders (id, note) VALUES ({mark}, {mark})", (100, "after"))
            tx.produce(topic, "100", key="2")
    return topic, txn_id, outcome


def assert_one_to_one(broker: BrokerProcess, dsn: str, topic: str, committed: bool) -> None:
    rows = sorted(int(r[0]) for r in query(dsn, "SELECT id FROM orders"))
    records = sorted(int(v) for v in read_committed(broker.bootstrap, topic, PARTITIONS))
    expected = [0, 1, 2, *([3] if committed else []), 100]
    assert rows == expected
    assert records == expected  # each committed row has exactly one record, and no more


@pytest.mark.parametrize("point", list(POINTS))
def test_kill_of_the_application(broker: BrokerProcess, dsn: str, point: str) -> None:
    outcome, committed = POINTS[point]
    topic, txn_id, recovered = crash_then_recover(broker, dsn, point)
    assert recovered == outcome
    assert_one_to_one(broker, dsn, topic, committed)
    state = query(
        dsn, f"SELECT status, units FROM onceflow_dualwrite WHERE transactional_id = '{txn_id}'"
    )
    assert state == [("completed", 5 if committed else 4)]


@pytest.mark.parametrize("point", ["dualwrite.after_prepare", "dualwrite.after_db_commit"])
def test_kill_with_broker_kill_and_database_crash(
    broker: BrokerProcess, dsn: str, point: str, request: pytest.FixtureRequest
) -> None:
    outcome, committed = POINTS[point]

    def crash_everything() -> None:
        broker.restart(kill=True)
        if not dsn.startswith("sqlite:"):
            request.getfixturevalue("postgres").restart("immediate")

    topic, _, recovered = crash_then_recover(broker, dsn, point, crash_everything)
    assert recovered == outcome
    assert_one_to_one(broker, dsn, topic, committed)
