"""A column of byte strings in Arrow's binary layout, for encoding records a batch at a time.

`data` holds the strings back to back and string i is `data[offsets[i]:offsets[i + 1]]`,
as in an Arrow binary or string array, so a Spark task hands its Arrow buffers over without
a copy, and a list of Python bytes becomes one with a single join. A null has length 0 and
`valid[i]` False. Every operation here is numpy work over whole arrays, never a loop per
string.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["BinaryColumn", "Bools", "Ints", "runs_mask"]

Ints = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]
Bytes = npt.NDArray[np.uint8]


def runs_mask(total: int, starts: Ints, lengths: Ints) -> Bools:
    """A mask of `total` bytes, True inside the runs [starts[i], starts[i] + lengths[i]).
    The runs must come in order and must not overlap. One np.repeat of alternating
    False/True by the gaps and the runs: a fill per byte, with no cumulative sum over them."""
    n = len(starts)
    ends = starts + lengths
    counts = np.empty(2 * n + 1, np.int64)
    counts[1::2] = lengths
    counts[0] = starts[0] if n else total
    counts[2:-1:2] = starts[1:] - ends[:-1]
    if n:
        counts[-1] = total - ends[-1]
    pattern = np.zeros(2 * n + 1, np.bool_)
    pattern[1::2] = True
    return np.repeat(pattern, counts)


@dataclass(frozen=True, slots=True)
class BinaryColumn:
    """n byte strings (or nulls): `data` uint8, `offsets` int64 of n + 1 entries, `valid`
    bool of n entries or None when nothing is null. A null's range is empty."""

    data: Bytes
    offsets: Ints
    valid: Bools | None = None

    @classmethod
    def of(cls, items: Sequence[bytes | None]) -> BinaryColumn:
        """From Python bytes (None for null): one join, lengths read by C-level map."""
        n = len(items)
        valid: Bools | None = None
        present: Iterable[bytes] = items  # type: ignore[assignment]
        count = n
        if None in items:  # C-level scans: no Python loop per item
            valid = np.fromiter(map(operator.is_not, items, repeat(None)), np.bool_, n)
            present = list(compress(items, valid.tolist()))  # type: ignore[arg-type]
            count = int(valid.sum())
        sizes = np.zeros(n, np.int64)
        found = np.fromiter(map(len, present), np.int64, count)
        if valid is None:
            sizes[:] = found
        else:
            sizes[valid] = found
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(sizes, out=offsets[1:])
        data = np.frombuffer(b"".join(present), np.uint8)
        return cls(data, offsets, valid)

    @classmethod
    def from_buffers(
        cls, data: Bytes, offsets: npt.NDArray[np.integer[Any]], valid: Bools | None
    ) -> BinaryColumn:
        """From an Arrow array's buffers (offsets of any integer width, possibly not starting
        at 0). Nulls whose range is not empty (Arrow allows it) are dropped from the data."""
        if valid is not None and valid.all():
            valid = None
        column = cls(data, offsets.astype(np.int64, copy=False), valid)
        if valid is not None and (column.lengths()[~valid] != 0).any():
            column = column.take(np.arange(len(column), dtype=np.int64))
        return column

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def nbytes(self) -> int:
        return int(self.offsets[-1] - self.offsets[0])

    def sizes(self) -> Ints:
        """Each string's length (0 for a null)."""
        return np.diff(self.offsets)

    def lengths(self) -> Ints:
        """Each string's length as Kafka writes it: -1 for a null."""
        sizes = self.sizes()
        if self.valid is not None:
            sizes[~self.valid] = -1
        return sizes

    def stream(self) -> Bytes:
        """The strings' bytes back to back (nulls contribute none): a view, no copy."""
        return self.data[int(self.offsets[0]) : int(self.offsets[-1])]

    def slice(self, start: int, stop: int) -> BinaryColumn:
        """Strings [start, stop), sharing this column's buffers."""
        valid = None if self.valid is None else self.valid[start:stop]
        return BinaryColumn(self.data, self.offsets[start : stop + 1], valid)

    def take(self, indices: Ints) -> BinaryColumn:
        """The strings at `indices`, in that order, copied into a new buffer; null ranges
        become empty."""
        sizes = self.sizes()[indices]
        valid = None
        if self.valid is not None:
            valid = self.valid[indices]
            sizes[~valid] = 0
            if valid.all():
                valid = None
        offsets = np.zeros(len(indices) + 1, np.int64)
        np.cumsum(sizes, out=offsets[1:])
        total = int(offsets[-1])
        source = np.repeat(self.offsets[:-1][indices] - offsets[:-1], sizes)
        source += np.arange(total, dtype=np.int64)
        return BinaryColumn(self.data[source], offsets, valid)

    @staticmethod
    def concat(columns: Sequence[BinaryColumn]) -> BinaryColumn:
        """The columns one after the other, in one new buffer."""
        if len(columns) == 1:
            return columns[0]
        data = np.concatenate([c.stream() for c in columns])
        sizes = np.concatenate([c.sizes() for c in columns])
        offsets = np.zeros(len(sizes) + 1, np.int64)
        np.cumsum(sizes, out=offsets[1:])
        valid = None
        if any(c.valid is not None for c in columns):
            valid = np.concatenate(
                [np.ones(len(c), np.bool_) if c.valid is None else c.valid for c in columns]
            )
        return BinaryColumn(data, offsets, valid)
