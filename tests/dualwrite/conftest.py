"""Fixtures of the dual-write tests: a broker with two-phase commit on, a throwaway
PostgreSQL server, and a fresh database (SQLite file or PostgreSQL database) per test."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition

from tests.dualwrite.postgres import PostgresServer
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import consumer

TWO_PC = {"transaction.two.phase.commit.enable": "true"}
ROOT = Path(__file__).resolve().parents[2]
DATABASES = ["sqlite", "postgresql"]


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    b = BrokerProcess(overrides=TWO_PC).start()
    yield b
    b.stop()


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    server = PostgresServer().start()
    yield server
    server.close()


def new_database(kind: str, postgres: PostgresServer | None, tmp_path: Path) -> str:
    """A DSN of an empty database."""
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'app.db'}"
    assert postgres is not None
    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return postgres.dsn.rsplit("/", 1)[0] + f"/{name}"


@pytest.fixture(params=DATABASES)
def dsn(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    server = request.getfixturevalue("postgres") if request.param == "postgresql" else None
    return new_database(request.param, server, tmp_path)


def query(dsn: str, sql: str) -> list[tuple[object, ...]]:
    from onceflow.dualwrite.database import Database

    db = Database(dsn)
    try:
        db.begin()
        rows = [tuple(r) for r in db.execute(sql).fetchall()]
        db.commit()
        return rows
    finally:
        db.close()


def read_committed(bootstrap: str, topic: str, partitions: int, timeout: float = 30.0) -> list[str]:
    """Every committed value of `topic`, read read_committed up to the high watermark: an
    open transaction holds the reader back and fails the call."""
    import time

    probe = consumer(bootstrap, **{"isolation.level": "read_uncommitted"})
    reader = consumer(bootstrap, **{"isolation.level": "read_committed"})
    try:
        ends = {
            p: probe.get_watermark_offsets(TopicPartition(topic, p), 10)[1]
            for p in range(partitions)
        }
        reader.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        values: list[str] = []
        deadline = time.monotonic() + timeout
        while True:
            positions = {
                tp.partition: tp.offset
                for tp in reader.position([TopicPartition(topic, p) for p in range(partitions)])
            }
            if all(ends[p] == 0 or positions.get(p, -1) >= ends[p] for p in ends):
                return values
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{topic}: read_committed stuck at {positions} below {ends} "
                    "(a transaction left open?)"
                )
            msg = reader.poll(0.2)
            if msg is not None and msg.error() is None:
                values.append(msg.value().decode())
    finally:
        probe.close()
        reader.close()


def run_app(
    dsn: str, bootstrap: str, txn_id: str, topic: str, first: int, count: int, failpoint: str = ""
) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(ROOT / "src") + ":" + str(ROOT)}
    import os

    env = dict(os.environ, **env)
    if failpoint:
        env["ONCEFLOW_FAILPOINTS"] = f"{failpoint}=kill"
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.dualwrite.app",
            dsn,
            bootstrap,
            txn_id,
            topic,
            str(first),
            str(count),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
