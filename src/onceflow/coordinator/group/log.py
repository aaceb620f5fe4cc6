"""The coordinator's only view of storage: append batches to, and read, `__consumer_offsets`.

The broker supplies an OffsetsLog backed by the real partition logs; tests and simulations
use InMemoryOffsetsLog. Going through this seam keeps the coordinator free of storage and
broker imports, and makes append failures easy to inject.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable, Iterator, Sequence
from typing import Protocol

from onceflow.records.builder import build_batch
from onceflow.records.record import decode_records

# (key, value) of one record; a None value is a tombstone.
KeyValue = tuple[bytes, bytes | None]


class OffsetsLog(Protocol):
    def append(self, partition: int, batch: bytes) -> Awaitable[object]:
        """Append one record batch to __consumer_offsets-<partition> (an async def will do).

        The awaitable finishes once the batch is durable, and raises on failure (nothing was
        appended). Appends must be applied in the order they were called.
        """
        ...

    def read(self, partition: int) -> Iterable[tuple[bytes | None, bytes | None]]:
        """(key, value) of every record in the partition, oldest first, for loading."""
        ...


def encode_batch(records: Sequence[KeyValue], timestamp_ms: int) -> bytes:
    """The one place the coordinator builds a record batch."""
    return build_batch([(key, value, ()) for key, value in records], timestamp_ms=timestamp_ms)


class InMemoryOffsetsLog:
    """An OffsetsLog that keeps batches in memory: for tests and simulations.

    Set `fail_with` to make every append raise it (nothing is stored), to exercise the
    coordinator's error paths. `compact()` does what the log cleaner would.
    """

    def __init__(self) -> None:
        self.batches: dict[int, list[bytes]] = {}
        self.fail_with: BaseException | None = None

    async def append(self, partition: int, batch: bytes) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        self.batches.setdefault(partition, []).append(batch)

    def read(self, partition: int) -> Iterator[tuple[bytes | None, bytes | None]]:
        for batch in self.batches.get(partition, []):
            for record in decode_records(batch):
                yield record.key, record.value

    def records(self, partition: int) -> list[tuple[bytes | None, bytes | None]]:
        return list(self.read(partition))

    def compact(self, partition: int, timestamp_ms: int = 0) -> None:
        """Keep only the newest record per key and drop tombstones, as a cleaner would."""
        latest: dict[bytes | None, bytes | None] = {}
        for key, value in self.read(partition):
            latest.pop(key, None)  # re-insert so order follows the newest write
            latest[key] = value
        kept = [(k, v) for k, v in latest.items() if k is not None and v is not None]
        self.batches[partition] = [encode_batch(kept, timestamp_ms)] if kept else []
