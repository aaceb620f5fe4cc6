"""The application of the crash-point tests, run as a child process: it writes `count`
units of work, each one row of `orders` and one record of `topic` with the same id, through
a DualWriter; ONCEFLOW_FAILPOINTS in its environment kills it (kill -9) at that step.

    python -m tests.dualwrite.app DSN BOOTSTRAP TXN_ID TOPIC FIRST COUNT
"""

from __future__ import annotations

import sys

from onceflow.dualwrite import DualWriter


def create_orders(dsn: str) -> None:
    from onceflow.dualwrite.database import Database

    db = Database(dsn)
    try:
        db.run_alone("CREATE TABLE IF NOT EXISTS orders (id BIGINT PRIMARY KEY, note TEXT)")
    finally:
        db.close()


def main(argv: list[str]) -> int:
    dsn, bootstrap, txn_id, topic, first, count = argv
    create_orders(dsn)
    mark = "?" if dsn.startswith("sqlite:") else "%s"
    with DualWriter(dsn, bootstrap, txn_id, recovery_interval_s=None) as writer:
        print(f"recovered: {writer.last_recovery}", flush=True)
        for i in range(int(first), int(first) + int(count)):
            with writer.transaction() as tx:
                tx.execute(f"INSERT INTO orders (id, note) VALUES ({mark}, {mark})", (i, "x"))
                tx.produce(topic, str(i), key=str(i % 7))
            print(f"unit {i}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
