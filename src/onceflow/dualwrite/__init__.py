"""One transaction across a database and the log (KIP-939's dual write): see writer.py."""

from onceflow.dualwrite.errors import (
    DatabaseUnavailable,
    DualWriteError,
    Fenced,
    InDoubt,
    StateMismatch,
    TwoPhaseCommitUnavailable,
)
from onceflow.dualwrite.transaction import Transaction
from onceflow.dualwrite.writer import DualWriter, Outcome, recover_abandoned

__all__ = [
    "DatabaseUnavailable",
    "DualWriteError",
    "DualWriter",
    "Fenced",
    "InDoubt",
    "Outcome",
    "StateMismatch",
    "Transaction",
    "TwoPhaseCommitUnavailable",
    "recover_abandoned",
]
