"""The participant client's columnar half: records given as columns (`BinaryColumn`s, e.g. a
Spark task's Arrow buffers) rather than one `produce` call each.

A `Chunk` is some records of one partition, in order; open batches hold chunks and are
encoded whole by `onceflow.records.columnar` when sealed. Partitions are chosen for a whole
column at once: Kafka's murmur2 of every key computed as numpy arrays (`murmur2_column`),
and the records of each partition gathered with one take per column.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from onceflow.client.errors import ConfigError
from onceflow.records.column import BinaryColumn, Ints
from onceflow.records.columnar import header_sections
from onceflow.records.record import Header

__all__ = [
    "BinaryColumn",
    "Chunk",
    "by_partition",
    "header_sections",
    "murmur2_column",
    "partition_target",
    "partitions_of",
    "split_at_size",
]

RECORD_OVERHEAD = 24  # a record's varints and attributes, roughly: for batch.size only
_M = np.uint32(0x5BD1E995)
_SEED = 0x9747B28C
U32 = npt.NDArray[np.uint32]


@dataclass(frozen=True, slots=True)
class Chunk:
    """Consecutive records of one partition: values, keys (None: all null), header
    sections (None: no headers) and timestamps (ms)."""

    values: BinaryColumn
    keys: BinaryColumn | None
    headers: BinaryColumn | None
    timestamps: Ints

    @classmethod
    def checked(
        cls,
        values: BinaryColumn,
        keys: BinaryColumn | None,
        headers: BinaryColumn | None,
        timestamp_ms: int,
    ) -> Chunk:
        """`produce_columns`'s records, all at `timestamp_ms`; columns of unequal lengths
        raise ConfigError."""
        n = len(values)
        for name, column in (("keys", keys), ("headers", headers)):
            if column is not None and len(column) != n:
                raise ConfigError(f"{len(column)} {name} for {n} values")
        return cls(values, keys, headers, np.full(n, timestamp_ms, np.int64))

    @classmethod
    def of_rows(
        cls,
        keys: list[bytes | None],
        values: list[bytes | None],
        headers: Sequence[Sequence[Header]] | None,
        timestamps: list[int],
    ) -> Chunk:
        return cls(
            BinaryColumn.of(values),
            None if keys.count(None) == len(keys) else BinaryColumn.of(keys),
            None if headers is None else header_sections(headers),
            np.array(timestamps, np.int64),
        )

    def __len__(self) -> int:
        return len(self.values)

    def record_sizes(self) -> Ints:
        """Each record's bytes, roughly (for batch.size)."""
        sizes = self.values.sizes() + RECORD_OVERHEAD
        if self.keys is not None:
            sizes += self.keys.sizes()
        if self.headers is not None:
            sizes += self.headers.sizes()
        return sizes

    def slice(self, start: int, stop: int) -> Chunk:
        return Chunk(
            self.values.slice(start, stop),
            None if self.keys is None else self.keys.slice(start, stop),
            None if self.headers is None else self.headers.slice(start, stop),
            self.timestamps[start:stop],
        )

    def take(self, indices: Ints) -> Chunk:
        return Chunk(
            self.values.take(indices),
            None if self.keys is None else self.keys.take(indices),
            None if self.headers is None else self.headers.take(indices),
            self.timestamps[indices],
        )

    @staticmethod
    def concat(chunks: list[Chunk]) -> Chunk:
        """The chunks one after the other (keys and headers null or empty where absent)."""
        if len(chunks) == 1:
            return chunks[0]

        def column(parts: list[BinaryColumn | None], null: bool) -> BinaryColumn | None:
            if all(p is None for p in parts):
                return None
            filled = [
                p if p is not None else _empty(len(c), null)
                for p, c in zip(parts, chunks, strict=True)
            ]
            return BinaryColumn.concat(filled)

        return Chunk(
            BinaryColumn.concat([c.values for c in chunks]),
            column([c.keys for c in chunks], null=True),
            column([c.headers for c in chunks], null=False),
            np.concatenate([c.timestamps for c in chunks]),
        )


def _empty(n: int, null: bool) -> BinaryColumn:
    """n null keys, or n headers sections of zero headers (the byte 0)."""
    if null:
        return BinaryColumn(np.zeros(0, np.uint8), np.zeros(n + 1, np.int64), np.zeros(n, np.bool_))
    return BinaryColumn(np.zeros(n, np.uint8), np.arange(n + 1, dtype=np.int64))


def split_at_size(sizes: Ints, room: int, batch_size: int) -> Ints:
    """Where to cut records of `sizes` into batches: the first takes what fits in `room`
    (none if nothing does and `room` < batch_size, since the open batch is then sealed
    first), the others `batch_size` each; a record bigger than a batch goes alone."""
    cuts = []
    ends = np.cumsum(sizes)
    start, base, limit = 0, 0, room
    n = len(sizes)
    while start < n:
        stop = int(np.searchsorted(ends, base + limit, side="right"))
        if stop == start and limit == batch_size:
            stop = start + 1  # one record larger than a batch: alone
        cuts.append(stop)
        base = int(ends[stop - 1]) if stop else 0
        start, limit = stop, batch_size
    return np.array(cuts, np.int64)


def murmur2_column(keys: BinaryColumn) -> U32:
    """MurmurHash2 (seed 0x9747b28c) of every key, as Kafka's default partitioner, as
    unsigned 32-bit values: 4-byte blocks of all keys mixed one block position at a time."""
    n = len(keys)
    sizes = keys.sizes()
    width = int(-(-int(sizes.max(initial=0)) // 4) * 4) or 4
    padded = np.zeros((n, width), np.uint8)
    padded[np.arange(width) < sizes[:, None]] = keys.stream()
    words = padded.view("<u4")
    h = np.full(n, _SEED, np.uint32) ^ sizes.astype(np.uint32)
    blocks = sizes // 4
    with np.errstate(over="ignore"):
        for j in range(width // 4):
            k = words[:, j] * _M
            k ^= k >> np.uint32(24)
            k *= _M
            mixed = (h * _M) ^ k
            h = np.where(blocks > j, mixed, h)
        tail = sizes % 4
        rows = np.arange(n)
        base = (blocks * 4).astype(np.int64)
        for extra, shift in ((3, 16), (2, 8)):
            at = tail >= extra
            h[at] ^= padded[rows[at], base[at] + extra - 1].astype(np.uint32) << np.uint32(shift)
        at = tail >= 1
        h[at] ^= padded[rows[at], base[at]].astype(np.uint32)
        h[at] *= _M
        h ^= h >> np.uint32(13)
        h *= _M
        h ^= h >> np.uint32(15)
    return h


def partition_target(
    partition: int | Ints | None, n: int, count: int, topic: str
) -> int | Ints | None:
    """`produce_columns`'s partition argument for n records, checked against the topic's
    `count` partitions: one for all, one per record (-1: none), or None."""
    if partition is None:
        return None
    wanted = np.asarray(partition, np.int64)
    if wanted.ndim and len(wanted) != n:
        raise ConfigError(f"{len(wanted)} partitions for {n} values")
    if (wanted >= count).any() or (not wanted.ndim and wanted < 0):
        raise ConfigError(f"{topic} has {count} partitions; asked for {partition}")
    return int(wanted) if not wanted.ndim else wanted


def partitions_of(keys: BinaryColumn, count: int, keyless: int) -> Ints:
    """Each record's partition of `count`: by its key's murmur2 as Kafka's default
    partitioner, `keyless` for a null key."""
    parts = ((murmur2_column(keys) & np.uint32(0x7FFFFFFF)) % np.uint32(count)).astype(np.int64)
    if keys.valid is not None:
        parts[~keys.valid] = keyless
    return parts


def by_partition(
    chunk: Chunk, count: int, partition: int | Ints | None, keyless: int
) -> Iterator[tuple[int, Chunk]]:
    """The chunk's records of each partition, in their order: all to `partition`, or each to
    its own (an array, -1 for none), else by key; records without either go to `keyless`."""
    if isinstance(partition, int):
        yield partition, chunk
        return
    if partition is None:
        if chunk.keys is None or (chunk.keys.valid is not None and not chunk.keys.valid.any()):
            yield keyless, chunk
            return
        parts = partitions_of(chunk.keys, count, keyless)
    else:
        parts = np.asarray(partition, np.int64)
        unset = parts < 0
        if unset.any():
            default = np.full(len(parts), keyless, np.int64)
            if chunk.keys is not None:
                default = partitions_of(chunk.keys, count, keyless)
            parts = np.where(unset, default, parts)
    found = np.unique(parts)
    if len(found) == 1:
        yield int(found[0]), chunk
        return
    order = np.argsort(parts, kind="stable")
    bounds = np.searchsorted(parts[order], found)
    for number, start, stop in zip(found, bounds, [*bounds[1:], len(order)], strict=True):
        yield int(number), chunk.take(order[start:stop])
