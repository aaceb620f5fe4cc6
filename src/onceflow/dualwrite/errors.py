"""The dual write's own errors: one line each, saying what happened to the unit of work."""

from __future__ import annotations

from onceflow.client.errors import ClientError

__all__ = [
    "DatabaseUnavailable",
    "DualWriteError",
    "Fenced",
    "InDoubt",
    "StateMismatch",
    "TwoPhaseCommitUnavailable",
]


class DualWriteError(ClientError):
    """Any failure of a dual write. Unless said otherwise, neither the rows nor the records
    of the failed unit of work became visible."""


class DatabaseUnavailable(DualWriteError):
    """The database could not be reached or refused the connection."""


class TwoPhaseCommitUnavailable(DualWriteError):
    """The broker does not take part in two-phase commit (KIP-939): it lacks InitProducerId
    v6, its `transaction.two.phase.commit.enable` is off, or TWO_PHASE_COMMIT is not granted
    on the transactional id."""


class Fenced(DualWriteError):
    """A newer writer owns the transactional id (in the broker or in the state table): this
    one may write nothing more. Open a new DualWriter to take over deliberately."""


class InDoubt(DualWriteError):
    """The database did not say whether it committed, and could not be asked yet. The
    records stay prepared (invisible) until recovery reads the answer from the database:
    on the next unit of work, periodically, or when a writer of the id starts."""


class StateMismatch(DualWriteError):
    """The state table holds something this writer cannot reconcile with the broker (a
    row for the id written by a different kind of writer, an unknown status)."""
