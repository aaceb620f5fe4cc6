"""The participant client's pure half: choosing a partition, and gathering records into one
open batch per partition that is sealed into v2 record-batch bytes (with its sequence)
only when it is sent. Records come one by one (`append`) or as columns (`append_chunk`);
either way a batch is encoded whole, from columns, by `onceflow.records.columnar`.

Sequences are given at sealing, as Kafka's producer gives them when it drains a batch, so
an abort that drops unsent records leaves no gap; a sealed batch keeps its bytes and its
sequence through every retry (a retry is never re-sequenced). The producer's thread opens
and seals batches, the sending thread takes sealed ones: a lock guards the sealed queues.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from onceflow.client.participant_columns import RECORD_OVERHEAD, Chunk, split_at_size
from onceflow.records.builder import RecordInput
from onceflow.records.columnar import build_column_batch
from onceflow.records.compression import Compression
from onceflow.records.record import Header

__all__ = [
    "Accumulator",
    "OpenBatch",
    "SealedBatch",
    "TopicPartition",
    "kafka_partition",
    "murmur2",
]

TopicPartition = tuple[str, int]

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF
_SEED = 0x9747B28C


def murmur2(data: bytes) -> int:
    """MurmurHash2 (32 bits, seed 0x9747b28c) as Kafka's default partitioner computes it,
    as a signed 32-bit int like Java's."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    body = length - length % 4
    for i in range(0, body, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = data[body:]
    if len(tail) == 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h ^= tail[0]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def kafka_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a non-null key."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


@dataclass(slots=True)
class OpenBatch:
    """Records of one partition not yet sealed: chunks given as columns, then the records
    appended one by one since (kept as columns of Python values until sealed or until a
    chunk follows them); `size` estimates the batch's bytes."""

    created: float
    chunks: list[Chunk] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    headers: list[Sequence[Header]] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    with_headers: bool = False
    size: int = 0
    count: int = 0
    closed: bool = False  # takes no more records: the next did not fit

    def rows_to_chunk(self) -> None:
        if self.values:
            headers = self.headers if self.with_headers else None
            self.chunks.append(Chunk.of_rows(self.keys, self.values, headers, self.timestamps))
            self.keys, self.values, self.headers, self.timestamps = [], [], [], []
            self.with_headers = False

    def chunk(self) -> Chunk:
        """All the batch's records as one chunk."""
        self.rows_to_chunk()
        return Chunk.concat(self.chunks)


@dataclass(frozen=True, slots=True)
class SealedBatch:
    """A batch's final bytes: what is sent, and sent again on a retry."""

    tp: TopicPartition
    base_sequence: int
    count: int
    data: bytes | memoryview  # an uncompressed batch is a view of its encoding buffer


class Accumulator:
    """Open batches per partition, the sealed ones waiting to be sent, and the next
    sequence of each partition at the producer's epoch."""

    def __init__(self, batch_size: int, linger_s: float, compression: Compression) -> None:
        self.batch_size = batch_size
        self.linger_s = linger_s
        self.compression = compression
        self.open: dict[TopicPartition, OpenBatch] = {}
        self.sealed: dict[TopicPartition, deque[SealedBatch]] = {}
        self.next_sequence: dict[TopicPartition, int] = {}
        self.sealed_bytes = 0
        self._lock = threading.Lock()

    def append(self, tp: TopicPartition, record: RecordInput, timestamp_ms: int) -> bool:
        """Add a record; whether its partition's batch is now full."""
        batch = self._open(tp)
        key, value, headers = record
        batch.keys.append(key)
        batch.values.append(value)
        batch.headers.append(headers)
        batch.timestamps.append(timestamp_ms)
        batch.count += 1
        batch.size += RECORD_OVERHEAD + len(key or b"") + len(value or b"")
        if headers:
            batch.with_headers = True
            batch.size += sum(len(k) + len(v or b"") for k, v in headers)
        return batch.size >= self.batch_size

    def room(self, tp: TopicPartition) -> int:
        """Bytes the open batch of `tp` may still take."""
        batch = self.open.get(tp)
        return self.batch_size - (batch.size if batch else 0)

    def append_chunk(self, tp: TopicPartition, chunk: Chunk) -> Iterator[None]:
        """Add records given as columns, in pieces that fill batches to `batch_size`;
        yields whenever the open batch is full, to be sealed before the next piece."""
        sizes = chunk.record_sizes()
        cuts = split_at_size(sizes, self.room(tp), self.batch_size).tolist()
        start = 0
        for i, stop in enumerate(cuts):
            batch = self._open(tp)
            if stop > start:
                batch.rows_to_chunk()
                batch.chunks.append(chunk.slice(start, stop))
                batch.count += stop - start
                batch.size += int(sizes[start:stop].sum())
            if i < len(cuts) - 1:
                batch.closed = True  # the next piece starts a batch of its own
            if batch.closed or batch.size >= self.batch_size:
                yield
            start = stop

    def close(self, tp: TopicPartition) -> None:
        """The open batch of `tp` is sealed at the next `seal`, full or not."""
        batch = self.open.get(tp)
        if batch is not None:
            batch.closed = True

    def _open(self, tp: TopicPartition) -> OpenBatch:
        batch = self.open.get(tp)
        if batch is None:
            batch = self.open[tp] = OpenBatch(time.monotonic())
        return batch

    def seal(self, producer_id: int, epoch: int, *, everything: bool) -> None:
        """Seal the open batches that are full or have lingered (all with `everything`):
        each gets its partition's next sequence and becomes bytes."""
        now = time.monotonic()
        for tp, batch in list(self.open.items()):
            if not (
                everything
                or batch.closed
                or batch.size >= self.batch_size
                or now - batch.created >= self.linger_s
            ):
                continue
            del self.open[tp]
            sequence = self.next_sequence.get(tp, 0)
            records = batch.chunk()
            data = build_column_batch(
                records.values,
                records.keys,
                timestamps=records.timestamps,
                headers=records.headers,
                producer_id=producer_id,
                producer_epoch=epoch,
                base_sequence=sequence,
                transactional=True,
                compression=self.compression,
            )
            count = len(records)
            self.next_sequence[tp] = (sequence + count) & 0x7FFFFFFF
            with self._lock:
                self.sealed.setdefault(tp, deque()).append(SealedBatch(tp, sequence, count, data))
                self.sealed_bytes += len(data)

    def lingering(self) -> bool:
        """Whether an open batch has waited `linger_s`."""
        now = time.monotonic()
        return any(now - b.created >= self.linger_s for b in self.open.values())

    def heads(self) -> list[SealedBatch]:
        """The oldest sealed batch of every partition: one Produce request may carry one
        batch per partition, and a partition's batches go in order."""
        with self._lock:
            return [queue[0] for queue in self.sealed.values() if queue]

    def sent(self, batch: SealedBatch) -> None:
        """The broker has `batch` (acknowledged, or a duplicate of one it has)."""
        with self._lock:
            queue = self.sealed[batch.tp]
            assert queue[0] is batch, "batches of a partition are acknowledged in order"
            queue.popleft()
            self.sealed_bytes -= len(batch.data)
            if not queue:
                del self.sealed[batch.tp]

    def has_sealed(self) -> bool:
        with self._lock:
            return bool(self.sealed)

    def pending(self) -> bool:
        return bool(self.open) or self.has_sealed()

    def drop_open(self) -> None:
        """An abort: records never sealed are dropped (they took no sequence)."""
        self.open.clear()

    def reset(self) -> None:
        """A new producer id or epoch: everything unsent goes, sequences start at 0."""
        self.open.clear()
        with self._lock:
            self.sealed.clear()
            self.sealed_bytes = 0
        self.next_sequence.clear()
