"""TransactionMetadata: one transactional id's state, changed only in two steps.

`prepare()` checks the state table and records a pending transition; the caller appends the
returned `TxnTransit` to the transaction log; `complete()` applies it only after the append
succeeded (`abandon()` drops it if the append failed). A crash between the steps leaves the
log as the only truth, and loading the log rebuilds the state.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from onceflow.coordinator.transaction.state import TxnState, check_transition
from onceflow.invariants import invariant

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = (1 << 15) - 1
# The timeout of a two-phase commit transaction (KIP-939): none, shown as Kafka shows it.
NO_TIMEOUT_MS = (1 << 31) - 1

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class TxnTransit:
    """A transactional id's state as one transaction-log record holds it."""

    transactional_id: str
    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    start_ms: int  # when the current transaction began (-1: none)
    update_ms: int
    # Transaction version 2 (KIP-890 part 2): the client's transaction version (0 or 2)
    # for the current transaction, and the producer id it rolls to when its epoch is
    # exhausted (set in the Prepare state, taken on in the Complete state; -1: none).
    client_version: int = 0
    next_producer_id: int = NO_PRODUCER_ID
    # Two-phase commit (KIP-939): the id's transactions are completed by an external
    # coordinator, so no timeout aborts them; and, once an InitProducerId with
    # keepPreparedTxn moved the client past the open transaction's epoch, the epoch its
    # records carry (-1: the current one), which every later such init reports.
    two_phase: bool = False
    kept_epoch: int = NO_PRODUCER_EPOCH


class TransactionMetadata:
    def __init__(self, transit: TxnTransit) -> None:
        self.pending: TxnState | None = None
        self._set(transit)

    def _set(self, transit: TxnTransit) -> None:
        self.transactional_id = transit.transactional_id
        self.producer_id = transit.producer_id
        self.last_producer_id = transit.last_producer_id
        self.producer_epoch = transit.producer_epoch
        self.last_producer_epoch = transit.last_producer_epoch
        self.timeout_ms = transit.timeout_ms
        self.state = transit.state
        self.partitions = set(transit.partitions)
        self.start_ms = transit.start_ms
        self.update_ms = transit.update_ms
        self.client_version = transit.client_version
        self.next_producer_id = transit.next_producer_id
        self.two_phase = transit.two_phase
        self.kept_epoch = transit.kept_epoch

    def current(self) -> TxnTransit:
        return TxnTransit(
            self.transactional_id,
            self.producer_id,
            self.last_producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.timeout_ms,
            self.state,
            frozenset(self.partitions),
            self.start_ms,
            self.update_ms,
            self.client_version,
            self.next_producer_id,
            self.two_phase,
            self.kept_epoch,
        )

    @property
    def kept(self) -> bool:
        """An open transaction kept for a new instance, which may only complete it."""
        return self.kept_epoch != NO_PRODUCER_EPOCH

    @property
    def epoch_exhausted(self) -> bool:
        # One epoch is kept in reserve for the coordinator's own fencing bump.
        return self.producer_epoch >= MAX_EPOCH - 1

    def prepare(self, state: TxnState, **changes: object) -> TxnTransit:
        """Step one: check the table, note the pending state, return what to log."""
        invariant(
            self.pending is None,
            f"{self.transactional_id}: transition to {state.display} while "
            f"{self.pending.display if self.pending else ''} is pending",
        )
        check_transition(self.state, state)
        transit = dataclasses.replace(self.current(), state=state, **changes)  # type: ignore[arg-type]
        self.pending = state
        return transit

    def complete(self, transit: TxnTransit) -> None:
        """Step two, after the transaction log append succeeded."""
        invariant(
            self.pending == transit.state,
            f"{self.transactional_id}: completing {transit.state.display}, pending "
            f"{self.pending.display if self.pending else None}",
        )
        self._set(transit)
        self.pending = None

    def abandon(self) -> None:
        self.pending = None
