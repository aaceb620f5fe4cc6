"""Sparse indexes of a segment. All are derived data: recovery rebuilds them from the .log."""

from onceflow.storage.indexes.offset import OffsetIndex
from onceflow.storage.indexes.time import TimeIndex

__all__ = ["OffsetIndex", "TimeIndex"]
