"""Where each transaction of a CompleteTransactions request stands, and what the request
does with the group (protocol/onceflow_apis.py says why the request exists).

A member names a transactional id, its producer id and the epoch its prepared records
carry. The group's commit is all or nothing: it goes ahead only when every member is open
(or decided by an earlier call of the same group: a retry), else nothing is done and the
answer says which members stood in the way. An abort ends the open members and leaves the
rest, as `complete(..., commit=False)` of a transaction no longer open does nothing.
"""

from __future__ import annotations

from enum import Enum

from onceflow.coordinator.transaction.metadata import TransactionMetadata
from onceflow.coordinator.transaction.state import TxnState
from onceflow.errors import ErrorCode


class Standing(Enum):
    OPEN = "open"  # Ongoing, two-phase, at the prepared epoch: this call may end it
    ENDING = "ending"  # ended by an earlier call as asked; its markers are being written
    DONE = "done"  # ended by an earlier call as asked
    BUSY = "busy"  # a state change of it is being logged: ask again
    GONE = "gone"  # not the prepared transaction any more (aborted, a newer one, no id)


# The member's answer when the group goes ahead.
ANSWER = {
    Standing.OPEN: ErrorCode.none,
    Standing.DONE: ErrorCode.none,
    Standing.ENDING: ErrorCode.none,
    Standing.BUSY: ErrorCode.concurrent_transactions,
    Standing.GONE: ErrorCode.invalid_txn_state,
}
_ENDED = {
    (TxnState.PREPARE_COMMIT, True): Standing.ENDING,
    (TxnState.COMPLETE_COMMIT, True): Standing.DONE,
    (TxnState.PREPARE_ABORT, False): Standing.ENDING,
    (TxnState.COMPLETE_ABORT, False): Standing.DONE,
}


def standing(
    meta: TransactionMetadata | None, producer_id: int, epoch: int, commit: bool
) -> Standing:
    if meta is None or meta.producer_id != producer_id:
        return Standing.GONE
    if meta.pending is not None:
        return Standing.BUSY
    if meta.state == TxnState.ONGOING:
        carried = meta.kept_epoch if meta.kept else meta.producer_epoch
        return Standing.OPEN if meta.two_phase and carried == epoch else Standing.GONE
    # An end by this request logs the prepared epoch as the last one; a fence does not.
    if meta.last_producer_epoch == epoch:
        return _ENDED.get((meta.state, commit), Standing.GONE)
    return Standing.GONE


def refusal(standings: dict[str, Standing], commit: bool) -> dict[str, ErrorCode] | None:
    """Each member's answer when the group must not go ahead, else None."""
    blocking = {Standing.BUSY} | ({Standing.GONE} if commit else set())
    if not any(s in blocking for s in standings.values()):
        return None
    return {
        txn_id: ANSWER[s] if s in blocking else ErrorCode.operation_not_attempted
        for txn_id, s in standings.items()
    }
