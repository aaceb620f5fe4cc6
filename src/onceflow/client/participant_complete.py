"""Completing a prepared two-phase transaction (KIP-939) from any process: `complete`."""

from __future__ import annotations

from typing import Any

from onceflow.client.participant_link import Link, end_txn, init_producer_id
from onceflow.client.participant_state import (
    PreparedTransaction,
    ProducerSettings,
    StalePreparedTransaction,
)

__all__ = ["complete"]


def complete(
    prepared: PreparedTransaction, commit: bool, bootstrap_servers: str, **settings: Any
) -> bool:
    """Commit or abort a prepared transaction, from any process; whether it was ended here.

    A new instance of the id inits with keepPreparedTxn, which fences the preparing one
    and reports the open transaction. If that is `prepared`, it is ended at the new epoch.
    If not (it was completed already, or a newer instance aborted it), a commit raises
    StalePreparedTransaction and an abort does nothing (False), as Kafka's
    completeTransaction.
    """
    options = ProducerSettings.of(settings)
    link = Link(bootstrap_servers, options)
    try:
        kept = init_producer_id(link, prepared.transactional_id, options, keep=True)
        ongoing = (kept.ongoing_producer_id, kept.ongoing_epoch)
        if ongoing != (prepared.producer_id, prepared.producer_epoch):
            if commit:
                held = (
                    "none" if ongoing == (-1, -1) else f"producer {ongoing[0]} epoch {ongoing[1]}"
                )
                raise StalePreparedTransaction(
                    f"cannot commit {prepared.transactional_id}'s transaction of producer "
                    f"{prepared.producer_id} epoch {prepared.producer_epoch}: the open "
                    f"transaction is {held} (completed already, or aborted by a newer instance)"
                )
            return False
        end_txn(
            link,
            prepared.transactional_id,
            (kept.producer_id, kept.epoch),
            commit,
            options.delivery_timeout_ms / 1000,
        )
        return True
    finally:
        link.close()
