"""A database commit whose answer is lost: the writer asks the database (through recovery)
what happened and makes the records match: committed when the commit went through,
aborted when it did not, InDoubt while the database cannot be asked (recovery settles it
later). Also PostgreSQL crashing in the middle of a unit, after the Kafka prepare."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from onceflow import failpoints
from onceflow.dualwrite import DatabaseUnavailable, DualWriteError, DualWriter, InDoubt
from onceflow.dualwrite.database import Database
from tests.dualwrite.conftest import new_database, query, read_committed
from tests.dualwrite.postgres import PostgresServer
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import create_topic


def mark(dsn: str) -> str:
    return "?" if dsn.startswith("sqlite:") else "%s"


@pytest.fixture
def writer(broker: BrokerProcess, dsn: str) -> Iterator[tuple[DualWriter, str, str]]:
    db = Database(dsn)
    db.run_alone("CREATE TABLE orders (id BIGINT PRIMARY KEY)")
    db.close()
    topic = create_topic(broker.bootstrap)
    w = DualWriter(dsn, broker.bootstrap, f"d-{uuid.uuid4().hex[:8]}", recovery_interval_s=None)
    yield w, dsn, topic
    w.close()


def unit(w: DualWriter, dsn: str, topic: str, i: int) -> None:
    with w.transaction() as tx:
        tx.execute(f"INSERT INTO orders (id) VALUES ({mark(dsn)})", (i,))
        tx.produce(topic, str(i))


def commit_then(w: DualWriter, really: bool, after: Callable[[], None] = lambda: None) -> Any:
    """The unit's commit raises as if its answer were lost, after committing or rolling
    back; later commits (recovery's) are the real ones."""
    real = w.db.commit
    fired: list[bool] = []

    def lost_answer() -> None:
        if fired:
            return real()
        fired.append(True)
        real() if really else w.db.rollback()
        after()
        if w.db.kind == "sqlite":
            raise sqlite3.OperationalError("disk I/O error")
        import psycopg

        raise psycopg.OperationalError("server closed the connection during COMMIT")

    return lost_answer


def matching(broker: BrokerProcess, dsn: str, topic: str) -> list[int]:
    rows = sorted(int(r[0]) for r in query(dsn, "SELECT id FROM orders"))
    assert sorted(int(v) for v in read_committed(broker.bootstrap, topic, 1)) == rows
    return rows


def test_lost_answer_of_a_commit_that_went_through(
    broker: BrokerProcess, writer: tuple[DualWriter, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    w, dsn, topic = writer
    monkeypatch.setattr(w.db, "commit", commit_then(w, really=True))
    unit(w, dsn, topic, 1)  # returns: the database committed, so did recovery
    monkeypatch.undo()
    assert w.last_recovery == "committed"
    unit(w, dsn, topic, 2)
    assert matching(broker, dsn, topic) == [1, 2]


def test_lost_answer_of_a_commit_that_did_not(
    broker: BrokerProcess, writer: tuple[DualWriter, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    w, dsn, topic = writer
    monkeypatch.setattr(w.db, "commit", commit_then(w, really=False))
    with pytest.raises(DualWriteError, match="the records were aborted"):
        unit(w, dsn, topic, 1)
    monkeypatch.undo()
    assert w.last_recovery == "aborted"
    unit(w, dsn, topic, 2)
    assert matching(broker, dsn, topic) == [2]


def test_in_doubt_until_the_database_is_back(
    broker: BrokerProcess, postgres: PostgresServer, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    dsn = new_database("postgresql", postgres, tmp_path)
    Database(dsn).run_alone("CREATE TABLE orders (id BIGINT PRIMARY KEY)")
    topic = create_topic(broker.bootstrap)
    w = DualWriter(dsn, broker.bootstrap, f"d-{uuid.uuid4().hex[:8]}", recovery_interval_s=None)
    try:
        monkeypatch.setattr(
            w.db, "commit", commit_then(w, really=True, after=lambda: postgres.stop("immediate"))
        )
        try:
            with pytest.raises(InDoubt, match="recovery will commit or abort"):
                unit(w, dsn, topic, 1)
        finally:
            monkeypatch.undo()
            postgres.start()
        unit(w, dsn, topic, 2)  # recovery first: the database committed unit 1
        assert w.last_recovery == "committed"
        assert matching(broker, dsn, topic) == [1, 2]
    finally:
        w.close()


def test_postgres_crash_after_the_kafka_prepare(
    broker: BrokerProcess, postgres: PostgresServer, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    dsn = new_database("postgresql", postgres, tmp_path)
    Database(dsn).run_alone("CREATE TABLE orders (id BIGINT PRIMARY KEY)")
    topic = create_topic(broker.bootstrap)
    w = DualWriter(dsn, broker.bootstrap, f"d-{uuid.uuid4().hex[:8]}", recovery_interval_s=None)
    try:
        unit(w, dsn, topic, 1)

        def crash(name: str) -> None:
            if name == "dualwrite.after_prepare":
                postgres.stop("immediate")

        monkeypatch.setattr(failpoints, "failpoint", crash)
        try:
            with pytest.raises(DatabaseUnavailable):
                unit(w, dsn, topic, 2)
        finally:
            monkeypatch.undo()
            postgres.start()
        unit(w, dsn, topic, 3)  # recovery aborts unit 2's prepared records
        assert w.last_recovery == "aborted"
        assert matching(broker, dsn, topic) == [1, 3]
    finally:
        w.close()
