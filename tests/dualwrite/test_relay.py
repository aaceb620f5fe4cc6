"""`onceflow outbox relay` against a real broker and real SQLite and PostgreSQL: every row
published exactly once and in order per key, across a kill -9 of the relay at every step
of its unit, two relays racing on one table, and a burst of 100,000 rows."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import defaultdict

import pytest
from confluent_kafka import TopicPartition

from tests.dualwrite.conftest import ROOT, query
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import consumer, create_topic

PARTITIONS = 3
KEYS = 13
POINTS = [
    "dualwrite.after_prepare",
    "dualwrite.after_db_commit",
    "dualwrite.after_kafka_commit",
    "dualwrite.after_complete",
]


def fill_outbox(dsn: str, first: int, count: int) -> None:
    """`count` rows into `outbox` (created when missing), the way an application would."""
    from onceflow.dualwrite.database import Database

    db = Database(dsn)
    try:
        if db.kind == "sqlite":
            ddl = "id INTEGER PRIMARY KEY AUTOINCREMENT"
        else:
            ddl = "id BIGSERIAL PRIMARY KEY"
        db.run_alone(f"CREATE TABLE IF NOT EXISTS outbox ({ddl}, key TEXT, value TEXT)")
        db.begin()
        db.executemany(
            "INSERT INTO outbox (key, value) VALUES (?, ?)",
            [(f"k{i % KEYS}", f"v{i}") for i in range(first, first + count)],
        )
        db.commit()
    finally:
        db.close()


def relay_command(dsn: str, bootstrap: str, topic: str, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "onceflow.cli.main", "outbox", "relay",
        "--dsn", dsn, "--bootstrap-server", bootstrap, "--table", "outbox", "--topic", topic,
        *extra,
    ]  # fmt: skip


def relay(
    dsn: str, bootstrap: str, topic: str, *extra: str, failpoint: str = ""
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    if failpoint:
        env["ONCEFLOW_FAILPOINTS"] = f"{failpoint}=kill"
    return subprocess.run(
        relay_command(dsn, bootstrap, topic, "--until-empty", *extra),
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def published(
    bootstrap: str, topic: str, expected: int, timeout: float = 120.0
) -> dict[int, list[tuple[str, str]]]:
    """(key, value) per partition in offset order, read_committed, once `expected` arrived
    and nothing more comes within a second."""
    reader = consumer(
        bootstrap, **{"isolation.level": "read_committed", "fetch.max.bytes": 8 << 20}
    )
    reader.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    out: dict[int, list[tuple[str, str]]] = defaultdict(list)
    count, quiet_since = 0, time.monotonic()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            for msg in reader.consume(10_000, 0.2):
                if msg.error() is None:
                    out[msg.partition()].append((msg.key().decode(), msg.value().decode()))
                    count += 1
                    quiet_since = time.monotonic()
            if count >= expected and time.monotonic() - quiet_since > 1.0:
                return out
        raise AssertionError(f"{topic}: {count} of {expected} records arrived")
    finally:
        reader.close()


def assert_exactly_once_in_order(dsn: str, bootstrap: str, topic: str) -> None:
    # value -> id (ids are not dense: a PostgreSQL crash skips sequence values)
    rows = {str(value): int(i) for i, value in query(dsn, "SELECT id, value FROM outbox")}
    by_partition = published(bootstrap, topic, len(rows))
    values = [v for records in by_partition.values() for _, v in records]
    assert len(values) == len(set(values)), "a row was published twice"
    missing, extra = set(rows) - set(values), set(values) - set(rows)
    assert not missing and not extra, f"missing {sorted(missing)[:20]}, extra {sorted(extra)[:20]}"
    for records in by_partition.values():
        last: dict[str, int] = {}
        for key, value in records:
            assert rows[value] > last.get(key, -1), f"{key} out of order at {value}"
            last[key] = rows[value]


def published_rows(dsn: str) -> int:
    try:
        return int(query(dsn, "SELECT COUNT(*) FROM onceflow_outbox_published")[0][0])
    except Exception:  # not created yet
        return 0


def test_relay_publishes_each_row_once_in_order(broker: BrokerProcess, dsn: str) -> None:
    topic = create_topic(broker.bootstrap, partitions=PARTITIONS)
    fill_outbox(dsn, 0, 500)
    done = relay(dsn, broker.bootstrap, topic, "--batch-size", "64")
    assert done.returncode == 0, done.stderr
    assert "published 500 rows" in done.stdout
    fill_outbox(dsn, 500, 100)  # more rows later: only those go out
    again = relay(dsn, broker.bootstrap, topic)
    assert "published 100 rows" in again.stdout, again.stderr
    assert_exactly_once_in_order(dsn, broker.bootstrap, topic)


@pytest.mark.parametrize("point", POINTS)
def test_relay_killed_at_every_step(broker: BrokerProcess, dsn: str, point: str) -> None:
    topic = create_topic(broker.bootstrap, partitions=PARTITIONS)
    fill_outbox(dsn, 0, 300)
    dead = relay(dsn, broker.bootstrap, topic, "--batch-size", "50", failpoint=point)
    assert dead.returncode == -9, (dead.returncode, dead.stderr)
    done = relay(dsn, broker.bootstrap, topic, "--batch-size", "50")
    assert done.returncode == 0, done.stderr
    # The killed unit's 50 rows went out before the kill (after the database commit) or
    # go out now; either way once.
    assert_exactly_once_in_order(dsn, broker.bootstrap, topic)


def test_two_relays_racing(broker: BrokerProcess, dsn: str) -> None:
    topic = create_topic(broker.bootstrap, partitions=PARTITIONS)
    fill_outbox(dsn, 0, 6000)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    args = ("--until-empty", "--batch-size", "10")
    command = relay_command(dsn, broker.bootstrap, topic, *args)
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    first = subprocess.Popen(command, env=env, **pipes)  # type: ignore[call-overload]
    deadline = time.monotonic() + 120
    while published_rows(dsn) < 100:  # the first is publishing when the second starts
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.05)
    second = subprocess.Popen(command, env=env, **pipes)  # type: ignore[call-overload]
    outs = [p.communicate(timeout=300) for p in (first, second)]
    codes = [first.returncode, second.returncode]
    # The newer relay fences the older (exit 3) in the middle of its work: usually the
    # second fences the first; if the first was slower to start, the other way round.
    assert sorted(codes) == [0, 3], outs
    fenced = codes.index(3)
    assert "fenced" in outs[fenced][1]
    assert "published" in outs[1 - fenced][0]
    assert_exactly_once_in_order(dsn, broker.bootstrap, topic)


def test_burst_of_100000_rows(broker: BrokerProcess, dsn: str) -> None:
    topic = create_topic(broker.bootstrap, partitions=PARTITIONS)
    fill_outbox(dsn, 0, 100_000)
    done = relay(dsn, broker.bootstrap, topic, "--batch-size", "5000")
    assert done.returncode == 0, done.stderr
    assert "published 100000 rows" in done.stdout
    assert_exactly_once_in_order(dsn, broker.bootstrap, topic)


def test_relay_bad_input(broker: BrokerProcess, dsn: str) -> None:
    """A missing table, a name that is not an identifier, an unknown DSN: one line each,
    exit 1, nothing published."""
    topic = create_topic(broker.bootstrap, partitions=PARTITIONS)
    missing = relay(dsn, broker.bootstrap, topic)
    assert missing.returncode == 1
    assert "has no table outbox" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
    bad = relay(dsn, broker.bootstrap, topic, "--key-column", "key; DROP TABLE x")
    assert bad.returncode == 1 and "plain SQL identifier" in bad.stderr
    unknown = relay("mysql://h/db", broker.bootstrap, topic)
    assert unknown.returncode == 1 and "unknown database DSN" in unknown.stderr


def test_row_that_commits_after_a_higher_id_is_published(
    broker: BrokerProcess, postgres: object, tmp_path: object
) -> None:
    """PostgreSQL takes an id before its transaction commits: row N can become visible after
    row N+1 was published. A high-water id would skip it; the relay's ledger publishes it
    on its next sweep, once."""
    import psycopg

    from onceflow.dualwrite.relay import OutboxRelay
    from tests.dualwrite.conftest import new_database

    dsn = new_database("postgresql", postgres, tmp_path)  # type: ignore[arg-type]
    fill_outbox(dsn, 0, 0)
    topic = create_topic(broker.bootstrap, partitions=PARTITIONS)
    slow = psycopg.connect(dsn)  # takes its id first, commits last
    slow.execute("INSERT INTO outbox (key, value) VALUES ('k0', 'v0')")
    fill_outbox(dsn, 1, 1)  # id 2, committed
    with OutboxRelay(dsn, broker.bootstrap, "outbox", topic) as relay:
        assert relay.run(until_empty=True) == 1
        slow.commit()
        assert relay.run(until_empty=True) == 2
    slow.close()
    assert_exactly_once_in_order(dsn, broker.bootstrap, topic)


def test_relay_survives_broker_kill_and_database_crash(
    broker: BrokerProcess, dsn: str, request: pytest.FixtureRequest
) -> None:
    """A relay left running while rows keep coming: the broker is killed -9 and restarted
    under it, and PostgreSQL crashes and restarts; it goes on, and every row is published
    once."""
    topic = create_topic(broker.bootstrap, partitions=PARTITIONS)
    fill_outbox(dsn, 0, 1000)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    command = relay_command(dsn, broker.bootstrap, topic, "--batch-size", "20")
    running = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_published(dsn, 200, running)
        broker.restart(kill=True)
        fill_outbox(dsn, 1000, 500)
        wait_published(dsn, 1100, running)
        if not dsn.startswith("sqlite:"):
            request.getfixturevalue("postgres").restart("immediate")
        fill_outbox(dsn, 1500, 500)
        wait_published(dsn, 2000, running)
    finally:
        running.terminate()
        _, err = running.communicate(timeout=60)
    assert running.returncode == 0, err
    assert_exactly_once_in_order(dsn, broker.bootstrap, topic)


def wait_published(dsn: str, count: int, relay: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 120
    while published_rows(dsn) < count:
        assert relay.poll() is None, relay.communicate()
        assert time.monotonic() < deadline, f"{published_rows(dsn)} of {count} published"
        time.sleep(0.1)
