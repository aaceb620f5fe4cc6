"""Sparse indexes of a segment. All are derived data: recovery rebuilds them from the .log."""

from onceflow.storage.indexes.offset import OffsetIndex
from onceflow.storage.indexes.time import TimeIndex
from onceflow.storage.indexes.txn import AbortedTxn, TxnIndex

__all__ = ["AbortedTxn", "OffsetIndex", "TimeIndex", "TxnIndex"]
