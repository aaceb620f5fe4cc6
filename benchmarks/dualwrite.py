"""Figure 11: units of work per second of the dual write (onceflow.dualwrite), against the
same database transaction alone and against the classic outbox, same run, same database.

Each unit is one order row (SQLite, WAL, synchronous=FULL: a commit is on disk; and, with
PostgreSQL installed, a throwaway server with fsync on, `dualwrite_pg_*`) and, for
the dual write, one record through the two-phase recipe (prepare, state row with the
order, database commit, Kafka commit, completion mark). The classic outbox writes the order
and an outbox row in one transaction while `onceflow outbox relay`'s OutboxRelay publishes
in a thread; its time runs until the last row is published. They run in turn, `repeat`
times.
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from benchmarks.common import OnceflowBroker
from onceflow.bench import create_topic
from onceflow.demo.postgres import PostgresServer, postgres_bin
from onceflow.dualwrite import DualWriter
from onceflow.dualwrite.database import Database
from onceflow.dualwrite.relay import OutboxRelay

__all__ = ["dualwrite_figures"]

TWO_PC = {"transaction.two.phase.commit.enable": "true"}
ORDERS = "CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, note TEXT)"
OUTBOX = "CREATE TABLE IF NOT EXISTS outbox (id {id}, key TEXT, value TEXT)"


def database_only(dsn: str, units: int) -> float:
    db = Database(dsn)
    db.run_alone(ORDERS)
    start = time.perf_counter()
    for i in range(units):
        db.begin()
        db.execute("INSERT INTO orders (id, note) VALUES (?, ?)", (i, "order"))
        db.commit()
    seconds = time.perf_counter() - start
    db.close()
    return seconds


def dual_write(dsn: str, bootstrap: str, topic: str, units: int) -> float:
    setup = Database(dsn)
    setup.run_alone(ORDERS)
    insert = setup.sql("INSERT INTO orders (id, note) VALUES (?, ?)")  # the driver's style
    setup.close()
    with DualWriter(dsn, bootstrap, f"bench-dw-{uuid.uuid4().hex[:8]}") as writer:
        start = time.perf_counter()
        for i in range(units):
            with writer.transaction() as tx:
                tx.execute(insert, (i, "order"))
                tx.produce(topic, f"order {i}", key=str(i))
        return time.perf_counter() - start


def classic_outbox(dsn: str, bootstrap: str, topic: str, units: int) -> float:
    db = Database(dsn)
    db.run_alone(ORDERS)
    serial = "INTEGER PRIMARY KEY AUTOINCREMENT" if db.kind == "sqlite" else "BIGSERIAL PRIMARY KEY"
    db.run_alone(OUTBOX.format(id=serial))
    relay = OutboxRelay(dsn, bootstrap, "outbox", topic, batch_size=1000)
    stop = threading.Event()
    publisher = threading.Thread(target=relay.run, args=(stop,), kwargs={"poll_interval_s": 0.01})
    start = time.perf_counter()
    publisher.start()
    for i in range(units):
        db.begin()
        db.execute("INSERT INTO orders (id, note) VALUES (?, ?)", (i, "order"))
        db.execute("INSERT INTO outbox (key, value) VALUES (?, ?)", (str(i), f"order {i}"))
        db.commit()
    while relay.published < units:
        time.sleep(0.005)
    seconds = time.perf_counter() - start
    stop.set()
    publisher.join()
    relay.close()
    db.close()
    return seconds


def _run_all(
    runs: dict[str, list[float]], dsn_of: Callable[[str, int], str], bootstrap: str,
    units: int, repeat: int, prefix: str,
) -> None:  # fmt: skip
    for i in range(repeat):
        for name in runs:
            dsn = dsn_of(name, i)
            topic = f"dualwrite-{prefix}{name}-{i}"
            create_topic(bootstrap, topic, partitions=3)
            if name == "db_only":
                runs[name].append(database_only(dsn, units))
            elif name == "api":
                runs[name].append(dual_write(dsn, bootstrap, topic, units))
            else:
                runs[name].append(classic_outbox(dsn, bootstrap, topic, units))


def _figures(runs: dict[str, list[float]], units: int, prefix: str) -> dict[str, float]:
    out = {f"dualwrite_{prefix}{n}_unitsps": units / statistics.median(s) for n, s in runs.items()}
    api = out[f"dualwrite_{prefix}api_unitsps"]
    out[f"dualwrite_{prefix}api_ratio_to_db_only"] = api / out[f"dualwrite_{prefix}db_only_unitsps"]
    out[f"dualwrite_{prefix}api_ratio_to_outbox"] = api / out[f"dualwrite_{prefix}outbox_unitsps"]
    return out


def dualwrite_figures(units: int, repeat: int) -> dict[str, float]:
    """SQLite always; PostgreSQL (a throwaway server, `dualwrite_pg_*`) when installed."""
    broker = OnceflowBroker(TWO_PC)
    out: dict[str, float] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="onceflow-bench-dw-") as tmp:
            runs: dict[str, list[float]] = {"db_only": [], "api": [], "outbox": []}
            _run_all(
                runs, lambda n, i: f"sqlite:///{Path(tmp) / f'{n}-{i}.db'}",
                broker.bootstrap, units, repeat, "",
            )  # fmt: skip
            out.update(_figures(runs, units, ""))
        if postgres_bin() is not None:
            server = PostgresServer().start()
            try:
                runs = {"db_only": [], "api": [], "outbox": []}
                _run_all(
                    runs, lambda n, i: _pg_database(server, f"bench_{n}_{i}"),
                    broker.bootstrap, units, repeat, "pg_",
                )  # fmt: skip
                out.update(_figures(runs, units, "pg_"))
            finally:
                server.close()
    finally:
        broker.close()
    return out


def _pg_database(server: PostgresServer, name: str) -> str:
    import psycopg

    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return server.dsn.rsplit("/", 1)[0] + f"/{name}"
