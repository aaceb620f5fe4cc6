"""The demo's order service (`make run-orders`): each unit of work inserts one order row and
produces its "order created" event through a DualWriter, until it is killed.

    python -m onceflow.demo.orders_service DSN BOOTSTRAP TRANSACTIONAL_ID TOPIC

ONCEFLOW_DEMO_FAILPOINT=name:N arms fail point `name` (kill -9 at that step) after N units,
so the supervisor can crash it at an exact step of a unit in the middle of its work. A
broker that is away is waited for: each failed unit is rolled back, and the next one
starts with recovery.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from typing import Any

from onceflow import failpoints
from onceflow.client.errors import ClientError
from onceflow.dualwrite import DualWriter, Fenced

FAILPOINT_ENV = "ONCEFLOW_DEMO_FAILPOINT"
SETTINGS: dict[str, Any] = {"delivery.timeout.ms": 10_000, "request.timeout.ms": 5_000}


def create_orders(dsn: str) -> None:
    from onceflow.dualwrite.database import Database

    db = Database(dsn)
    try:
        db.run_alone(
            "CREATE TABLE IF NOT EXISTS orders ("
            " id TEXT PRIMARY KEY, customer TEXT NOT NULL, amount_cents BIGINT NOT NULL)"
        )
    finally:
        db.close()


def open_writer(dsn: str, bootstrap: str, txn_id: str) -> DualWriter:
    while True:
        try:
            writer = DualWriter(dsn, bootstrap, txn_id, recovery_interval_s=2.0, **SETTINGS)
            print(f"recovered: {writer.last_recovery}", flush=True)
            return writer
        except Fenced:
            raise
        except ClientError as exc:
            print(f"waiting: {exc}", file=sys.stderr, flush=True)
            time.sleep(0.5)


def arm_later() -> tuple[str, int] | None:
    spec = os.environ.get(FAILPOINT_ENV, "")
    if not spec:
        return None
    name, _, after = spec.partition(":")
    return name, int(after or 0)


def main(argv: list[str]) -> int:
    dsn, bootstrap, txn_id, topic = argv
    create_orders(dsn)
    mark = "?" if dsn.startswith("sqlite:") else "%s"
    insert = f"INSERT INTO orders (id, customer, amount_cents) VALUES ({mark}, {mark}, {mark})"
    later = arm_later()
    writer = open_writer(dsn, bootstrap, txn_id)
    units = 0
    while True:
        if later is not None and units == later[1]:
            os.environ[failpoints.FAILPOINTS_ENV] = f"{later[0]}=kill"
            failpoints.arm_from_environment()
        order_id = uuid.uuid4().hex
        customer = f"c-{units % 17}"
        event = json.dumps({"order": order_id, "customer": customer, "type": "created"})
        try:
            with writer.transaction() as tx:
                tx.execute(insert, (order_id, customer, 100 + units % 900))
                tx.produce(topic, event, key=customer)
        except Fenced as exc:
            print(f"fenced: {exc}", file=sys.stderr, flush=True)
            return 3
        except ClientError as exc:  # the broker or the database is away: rolled back
            print(f"unit failed: {exc}", file=sys.stderr, flush=True)
            time.sleep(0.3)
            continue
        units += 1
        if units % 50 == 0:
            print(f"units {units}", flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
