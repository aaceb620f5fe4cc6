"""Several prepared transactions completed as one decision, through Onceflow's
CompleteTransactions (protocol/onceflow_apis.py says why): a reader never sees some of them
committed and others not, on a broker, even if the caller dies halfway.

The transactional ids must share a `__transaction_state` partition, so that one
coordinator holds them all; `colocated_id` picks such ids::

    ids = colocated_ids(["job-7-0", "job-7-1", "job-7-2"], partitions=50)
    ... each writer: TwoPhaseProducer(bootstrap, ids[i]) ... prepare() ...
    complete_together(prepared, commit=True, bootstrap_servers=bootstrap)
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from onceflow.client.participant_link import (
    Link,
    complete_transactions,
    offers_complete_transactions,
    transaction_log_partitions,
)
from onceflow.client.participant_state import (
    PreparedTransaction,
    ProducerSettings,
    StalePreparedTransaction,
)
from onceflow.errors import ErrorCode
from onceflow.protocol.coordinator_key import coordinator_partition

__all__ = [
    "colocated_ids",
    "complete_together",
    "supports_complete_together",
    "transaction_log_partition_count",
]

_SALT_SEPARATOR = "~"


def colocated_ids(names: Sequence[str], partitions: int, anchor: str | None = None) -> list[str]:
    """One transactional id per name, all on the `__transaction_state` partition of
    `anchor` (default: the first name): the name itself if it maps there, else the name
    with the smallest `~<n>` suffix that does. The same names give the same ids."""
    if not names:
        return []
    target = coordinator_partition(anchor if anchor is not None else names[0], partitions)
    out = []
    for name in names:
        candidates = itertools.chain(
            (name,), (f"{name}{_SALT_SEPARATOR}{n}" for n in itertools.count())
        )
        out.append(next(c for c in candidates if coordinator_partition(c, partitions) == target))
    return out


def transaction_log_partition_count(bootstrap_servers: str, **settings: Any) -> int:
    link = Link(bootstrap_servers, ProducerSettings.of(settings))
    try:
        return transaction_log_partitions(link)
    finally:
        link.close()


def supports_complete_together(
    bootstrap_servers: str, transactional_id: str, **settings: Any
) -> bool:
    """Whether the coordinator of `transactional_id` serves CompleteTransactions (Apache
    Kafka does not: its KIP-939 completes one transaction at a time)."""
    link = Link(bootstrap_servers, ProducerSettings.of(settings))
    try:
        return offers_complete_transactions(link, transactional_id)
    finally:
        link.close()


def complete_together(
    prepared: Sequence[PreparedTransaction],
    commit: bool,
    bootstrap_servers: str,
    **settings: Any,
) -> list[PreparedTransaction]:
    """Commit or abort `prepared` as one decision; the transactions that were not open.

    A commit is all or nothing: when one of them is no longer open (aborted by a newer
    instance, or never prepared at that epoch) nothing is committed and
    StalePreparedTransaction names it. A commit already done by an earlier call is done
    (a retry is safe). An abort ends those still open and returns the others."""
    if not prepared:
        return []
    options = ProducerSettings.of(settings)
    link = Link(bootstrap_servers, options)
    members = [(t.transactional_id, t.producer_id, t.producer_epoch) for t in prepared]
    try:
        answers = complete_transactions(link, members, commit, options.delivery_timeout_ms / 1000)
    finally:
        link.close()
    not_open = [t for t in prepared if answers.get(t.transactional_id) != ErrorCode.none]
    if commit and not_open:
        unknown = ErrorCode.unknown_server_error
        named = ", ".join(
            f"{t.transactional_id} (producer {t.producer_id} epoch {t.producer_epoch}: "
            f"{ErrorCode(answers.get(t.transactional_id, unknown)).name.upper()})"
            for t in not_open
        )
        raise StalePreparedTransaction(
            f"nothing committed: not every transaction of the decision is open: {named}"
        )
    return not_open
