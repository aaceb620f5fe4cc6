"""The check-back (RocketMQ's name for it): prepared transactions whose writer never came
back are completed from what the database says.

A writer recovers its own id when it starts; one that never starts again would leave its
prepared transaction open for ever, holding back read_committed readers. `recover_abandoned`
asks every broker for the open two-phase commit transactions (ListTransactions and
DescribeTransactions, as `onceflow transactions list --two-phase`), keeps those of ids in
the state table that are older than `older_than_s`, and recovers each as a new writer of
the id would: fencing the old one, committing what the database committed, aborting the
rest. A writer still alive but stuck for that long is fenced by it, as RocketMQ's check-back
overrides a producer that did not answer.
"""

from __future__ import annotations

import logging
from typing import Any

from onceflow.client.cluster import Cluster
from onceflow.client.txn_admin import (
    millis,
    now_ms,
    two_phase_in_flight,
)
from onceflow.dualwrite.database import Database
from onceflow.dualwrite.state import DEFAULT_STATE_TABLE, StateTable
from onceflow.dualwrite.writer import DualWriter, Outcome

__all__ = ["open_two_phase_transactions", "recover_abandoned"]

log = logging.getLogger(__name__)


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


def recover_abandoned(
    dsn: str,
    bootstrap_servers: str,
    *,
    older_than_s: float = 60.0,
    state_table: str = DEFAULT_STATE_TABLE,
    skip: frozenset[str] = frozenset(),
    **producer_settings: Any,
) -> dict[str, Outcome]:
    """Recover every id of the state table whose two-phase transaction has been open longer
    than `older_than_s` (except those in `skip`); what recovery did to each."""
    db = Database(dsn)
    try:
        state = StateTable(db, state_table)
        state.create()
        known = set(state.ids())
    finally:
        db.close()
    open_ages = open_two_phase_transactions(bootstrap_servers)
    outcomes: dict[str, Outcome] = {}
    for transactional_id, age_ms in sorted(open_ages.items()):
        if transactional_id not in known or transactional_id in skip:
            continue
        if age_ms < older_than_s * 1000:
            continue
        writer = DualWriter(
            dsn,
            bootstrap_servers,
            transactional_id,
            state_table=state_table,
            recovery_interval_s=None,
            **producer_settings,
        )
        outcomes[transactional_id] = writer.last_recovery
        writer.close()
        log.info(
            "check-back: %s open %d ms: %s", transactional_id, age_ms, outcomes[transactional_id]
        )
    return outcomes
