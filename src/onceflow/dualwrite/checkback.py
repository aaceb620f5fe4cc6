"""The check-back (RocketMQ's name for it): prepared transactions whose writer never came
back are completed from what the database says.

A writer recovers its own id when it starts; one that never starts again would leave its
prepared transaction open for ever, holding back read_committed readers. `abandoned`
asks every broker for the open two-phase commit transactions (ListTransactions and
DescribeTransactions, as `onceflow transactions list --two-phase`), keeps those of ids in
the state table that are older than `older_than_s`; writer.py's `recover_abandoned` recovers
each as a new writer of the id would: fencing the old one, committing what the database
committed, aborting the rest. A writer still alive but stuck for that long is fenced by it,
as RocketMQ's check-back overrides a producer that did not answer.
"""

from __future__ import annotations

from onceflow.client.cluster import Cluster
from onceflow.client.txn_admin import (
    millis,
    now_ms,
    two_phase_in_flight,
)
from onceflow.dualwrite.database import Database
from onceflow.dualwrite.state import DEFAULT_STATE_TABLE, StateTable

__all__ = ["abandoned", "open_two_phase_transactions"]


def open_two_phase_transactions(bootstrap_servers: str, timeout_s: float = 30.0) -> dict[str, int]:
    """Transactional id -> age in ms of every open two-phase commit transaction."""
    cluster = Cluster(bootstrap_servers, timeout_s)
    found: dict[str, int] = {}
    now = now_ms()
    try:
        for _, state in two_phase_in_flight(cluster):
            start = millis(state.transaction_start_time)
            found[str(state.transactional_id)] = now - start if start >= 0 else 0
    finally:
        cluster.close()
    return found


def abandoned(
    dsn: str,
    bootstrap_servers: str,
    older_than_s: float,
    state_table: str = DEFAULT_STATE_TABLE,
    skip: frozenset[str] = frozenset(),
) -> list[tuple[str, int]]:
    """The ids of the state table (except those in `skip`) whose two-phase transaction has
    been open longer than `older_than_s`, each with its age in ms, in id order."""
    db = Database(dsn)
    try:
        state = StateTable(db, state_table)
        state.create()
        known = set(state.ids())
    finally:
        db.close()
    return [
        (transactional_id, age_ms)
        for transactional_id, age_ms in sorted(
            open_two_phase_transactions(bootstrap_servers).items()
        )
        if transactional_id in known
        and transactional_id not in skip
        and age_ms >= older_than_s * 1000
    ]
