"""Figure 11: units of work per second of the dual write (onceflow.dualwrite), against the
same database transaction alone and against the classic outbox, same run, same database.

Each unit is one order row (SQLite, WAL, synchronous=FULL: a commit is on disk) and, for
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
from pathlib import Path

from benchmarks.common import OnceflowBroker
from onceflow.bench import create_topic
from onceflow.dualwrite import DualWriter
from onceflow.dualwrite.database import Database
from onceflow.dualwrite.relay import OutboxRelay

__all__ = ["dualwrite_figures"]

TWO_PC = {"transaction.two.phase.commit.enable": "true"}
ORDERS = "CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, note TEXT)"
OUTBOX = (
    "CREATE TABLE IF NOT EXISTS outbox (id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT, value TEXT)"
)


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
    Database(dsn).run_alone(ORDERS)
    with DualWriter(dsn, bootstrap, f"bench-dw-{uuid.uuid4().hex[:8]}") as writer:
        start = time.perf_counter()
        for i in range(units):
            with writer.transaction() as tx:
                tx.execute("INSERT INTO orders (id, note) VALUES (?, ?)", (i, "order"))
                tx.produce(topic, f"order {i}", key=str(i))
        return time.perf_counter() - start


def classic_outbox(dsn: str, bootstrap: str, topic: str, units: int) -> float:
    db = Database(dsn)
    db.run_alone(ORDERS)
    db.run_alone(OUTBOX)
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


def dualwrite_figures(units: int, repeat: int) -> dict[str, float]:
    broker = OnceflowBroker(TWO_PC)
    runs: dict[str, list[float]] = {"db_only": [], "api": [], "outbox": []}
    try:
        with tempfile.TemporaryDirectory(prefix="onceflow-bench-dw-") as tmp:
            for i in range(repeat):
                for name in runs:
                    dsn = f"sqlite:///{Path(tmp) / f'{name}-{i}.db'}"
                    topic = f"dualwrite-{name}-{i}"
                    create_topic(broker.bootstrap, topic, partitions=3)
                    if name == "db_only":
                        runs[name].append(database_only(dsn, units))
                    elif name == "api":
                        runs[name].append(dual_write(dsn, broker.bootstrap, topic, units))
                    else:
                        runs[name].append(classic_outbox(dsn, broker.bootstrap, topic, units))
    finally:
        broker.close()
    out = {f"dualwrite_{name}_unitsps": units / statistics.median(s) for name, s in runs.items()}
    out["dualwrite_api_ratio_to_db_only"] = (
        out["dualwrite_api_unitsps"] / out["dualwrite_db_only_unitsps"]
    )
    out["dualwrite_api_ratio_to_outbox"] = (
        out["dualwrite_api_unitsps"] / out["dualwrite_outbox_unitsps"]
    )
    return out
