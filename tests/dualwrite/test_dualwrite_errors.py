"""Bad input and bad luck for the dual write, against a real broker and real databases: a
database that is down, a broker without two-phase commit, a writer fenced by a newer one
(before and in the middle of a unit), an exception inside the unit, a broker that dies
after the database commit (the periodic recovery completes the unit); never half a unit."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from onceflow import failpoints
from onceflow.client.errors import ConfigError
from onceflow.client.participant import PreparedTransaction, complete
from onceflow.dualwrite import (
    DatabaseUnavailable,
    DualWriter,
    Fenced,
    StateMismatch,
    TwoPhaseCommitUnavailable,
)
from onceflow.dualwrite.state import StateTable
from tests.dualwrite.conftest import query, read_committed, run_app
from tests.dualwrite.postgres import PostgresServer
from tests.helpers.broker import BrokerProcess, free_port
from tests.helpers.clients import create_topic

FAST = {"delivery.timeout.ms": 5000, "request.timeout.ms": 3000}


def mark(dsn: str) -> str:
    return "?" if dsn.startswith("sqlite:") else "%s"


def write_unit(writer: DualWriter, dsn: str, topic: str, i: int) -> None:
    with writer.transaction() as tx:
        tx.execute(f"INSERT INTO orders (id) VALUES ({mark(dsn)})", (i,))
        tx.produce(topic, str(i), key=str(i))


def make_orders(dsn: str) -> None:
    from onceflow.dualwrite.database import Database

    db = Database(dsn)
    db.run_alone("CREATE TABLE IF NOT EXISTS orders (id BIGINT PRIMARY KEY)")
    db.close()


def rows_and_records(broker: BrokerProcess, dsn: str, topic: str) -> tuple[list[int], list[int]]:
    rows = sorted(int(r[0]) for r in query(dsn, "SELECT id FROM orders"))
    return rows, sorted(int(v) for v in read_committed(broker.bootstrap, topic, 1))


@pytest.fixture
def setup(broker: BrokerProcess, dsn: str) -> Iterator[tuple[str, str, str]]:
    make_orders(dsn)
    yield dsn, create_topic(broker.bootstrap), f"w-{uuid.uuid4().hex[:8]}"


def test_bad_dsn_and_names() -> None:
    with pytest.raises(ConfigError, match="unknown database DSN"):
        DualWriter("mysql://x", "127.0.0.1:1", "t")
    with pytest.raises(ConfigError, match="plain SQL identifier"):
        DualWriter("sqlite:///tmp/x.db", "127.0.0.1:1", "t", state_table="x; DROP TABLE y")


def test_database_down_at_start() -> None:
    dsn = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"
    with pytest.raises(DatabaseUnavailable, match="cannot open the database"):
        DualWriter(dsn, "127.0.0.1:1", "t")


def test_database_down_between_units(
    broker: BrokerProcess, postgres: PostgresServer, tmp_path: Any
) -> None:
    from tests.dualwrite.conftest import new_database

    dsn = new_database("postgresql", postgres, tmp_path)
    make_orders(dsn)
    topic = create_topic(broker.bootstrap)
    with DualWriter(dsn, broker.bootstrap, "pg-down", recovery_interval_s=None) as writer:
        write_unit(writer, dsn, topic, 1)
        postgres.stop("immediate")
        try:
            with pytest.raises(DatabaseUnavailable):
                write_unit(writer, dsn, topic, 2)
        finally:
            postgres.start()
        write_unit(writer, dsn, topic, 3)  # reconnects and recovers first
    assert rows_and_records(broker, dsn, topic) == ([1, 3], [1, 3])


def test_broker_without_two_phase_commit(tmp_path: Any) -> None:
    plain = BrokerProcess().start()  # transaction.two.phase.commit.enable=false, as Kafka
    try:
        dsn = f"sqlite:///{tmp_path / 'x.db'}"
        with pytest.raises(TwoPhaseCommitUnavailable, match=r"two\.phase\.commit\.enable"):
            DualWriter(dsn, plain.bootstrap, "no-2pc")
        assert query(dsn, "SELECT COUNT(*) FROM onceflow_dualwrite") == [(0,)]
    finally:
        plain.stop()


def test_exception_in_the_unit_rolls_both_back(
    broker: BrokerProcess, setup: tuple[str, str, str]
) -> None:
    dsn, topic, tid = setup
    with DualWriter(dsn, broker.bootstrap, tid, recovery_interval_s=None) as writer:
        with pytest.raises(ZeroDivisionError), writer.transaction() as tx:
            tx.execute(f"INSERT INTO orders (id) VALUES ({mark(dsn)})", (1,))
            tx.produce(topic, "1")
            _ = 1 / 0
        write_unit(writer, dsn, topic, 2)
    assert rows_and_records(broker, dsn, topic) == ([2], [2])


def test_newer_writer_fences_the_older(broker: BrokerProcess, setup: tuple[str, str, str]) -> None:
    dsn, topic, tid = setup
    old = DualWriter(dsn, broker.bootstrap, tid, recovery_interval_s=None)
    write_unit(old, dsn, topic, 1)
    with DualWriter(dsn, broker.bootstrap, tid, recovery_interval_s=None) as new:
        with pytest.raises(Fenced):
            write_unit(old, dsn, topic, 2)
        with pytest.raises(Fenced):  # and for good
            write_unit(old, dsn, topic, 3)
        write_unit(new, dsn, topic, 4)
    old.close()
    assert rows_and_records(broker, dsn, topic) == ([1, 4], [1, 4])


def test_takeover_in_the_middle_of_a_unit(
    broker: BrokerProcess, setup: tuple[str, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old writer has prepared Kafka when a new one starts and recovers. PostgreSQL:
    the new one's claim comes first, the old one's database write is refused (Fenced) and
    its records aborted. SQLite: the old one holds the write lock, so the new one's claim
    waits for its commit, then finds the unit in the database and commits its records."""
    dsn, topic, tid = setup
    old = DualWriter(dsn, broker.bootstrap, tid, recovery_interval_s=None)
    new: list[DualWriter] = []
    takeover = threading.Thread(
        target=lambda: new.append(DualWriter(dsn, broker.bootstrap, tid, recovery_interval_s=None))
    )

    sqlite = dsn.startswith("sqlite:")
    claiming = threading.Event()
    real_claim = StateTable.claim

    def claim(self: StateTable, *args: Any, **kwargs: Any) -> Any:
        if threading.current_thread() is takeover:
            claiming.set()  # the new writer has fenced the old one in the broker
        return real_claim(self, *args, **kwargs)

    def pause_here(name: str) -> None:
        if name == "dualwrite.after_prepare":
            takeover.start()
            if sqlite:  # its claim waits behind this unit's write lock: let it get there
                assert claiming.wait(60)
                time.sleep(0.5)
            else:
                takeover.join(60)

    monkeypatch.setattr(StateTable, "claim", claim)
    monkeypatch.setattr(failpoints, "failpoint", pause_here)
    if sqlite:
        write_unit(old, dsn, topic, 1)  # committed: the new owner completes it
    else:
        with pytest.raises(Fenced):
            write_unit(old, dsn, topic, 1)
    takeover.join()
    (writer,) = new
    assert writer.last_recovery == ("committed" if sqlite else "aborted")
    monkeypatch.undo()
    write_unit(writer, dsn, topic, 2)
    writer.close()
    old.close()
    expected = [1, 2] if sqlite else [2]
    assert rows_and_records(broker, dsn, topic) == (expected, expected)


def test_periodic_recovery_completes_after_the_broker_returns(
    broker: BrokerProcess, setup: tuple[str, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    dsn, topic, tid = setup
    writer = DualWriter(dsn, broker.bootstrap, tid, recovery_interval_s=0.5, **FAST)
    write_unit(writer, dsn, topic, 1)

    def broker_dies(name: str) -> None:
        if name == "dualwrite.after_db_commit":
            broker.kill()

    monkeypatch.setattr(failpoints, "failpoint", broker_dies)
    write_unit(writer, dsn, topic, 2)  # committed: the database decided; Kafka's is deferred
    monkeypatch.undo()
    broker.start()
    try:
        # No further unit: the periodic recovery commits unit 2's records.
        assert rows_and_records(broker, dsn, topic) == ([1, 2], [1, 2])
    finally:
        writer.close()


def test_prepared_state_aborted_from_outside(broker: BrokerProcess, dsn: str) -> None:
    """The database committed a unit, then an operator aborted its prepared transaction:
    the prepared state no longer matches the broker, and recovery says so (every time,
    changing nothing) until the rows are reconciled and the id acknowledged."""
    topic = create_topic(broker.bootstrap, partitions=3)
    tid = f"x-{uuid.uuid4().hex[:8]}"
    assert run_app(dsn, broker.bootstrap, tid, topic, 0, 3).returncode == 0
    dead = run_app(dsn, broker.bootstrap, tid, topic, 3, 1, "dualwrite.after_db_commit")
    assert dead.returncode == -9, dead.stderr
    state = f"FROM onceflow_dualwrite WHERE transactional_id = '{tid}'"
    ((pid, epoch),) = query(dsn, f"SELECT producer_id, producer_epoch {state}")
    prepared = PreparedTransaction(tid, int(pid), int(epoch))
    assert complete(prepared, commit=False, bootstrap_servers=broker.bootstrap)  # the mistake
    for _ in range(2):
        with pytest.raises(StateMismatch, match="the broker aborted that transaction"):
            DualWriter(dsn, broker.bootstrap, tid, recovery_interval_s=None)
    assert query(dsn, f"SELECT status {state}") == [("lost",)]
    from onceflow.dualwrite.database import Database

    db = Database(dsn)  # the operator's reconciliation
    db.run_alone("DELETE FROM orders WHERE id = 3")
    db.run_alone(
        f"UPDATE onceflow_dualwrite SET status = 'completed' WHERE transactional_id = '{tid}'"
    )
    db.close()
    with DualWriter(dsn, broker.bootstrap, tid, recovery_interval_s=None) as writer:
        assert writer.last_recovery == "none"
        with writer.transaction() as tx:
            tx.execute(f"INSERT INTO orders (id, note) VALUES ({mark(dsn)}, 'y')", (100,))
            tx.produce(topic, "100")
    rows = sorted(int(r[0]) for r in query(dsn, "SELECT id FROM orders"))
    assert rows == [0, 1, 2, 100]
    assert sorted(int(v) for v in read_committed(broker.bootstrap, topic, 3)) == rows
