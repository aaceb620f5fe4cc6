"""The coordinator's only view of storage: append batches to, and read, `__consumer_offsets`.

The broker supplies an OffsetsLog backed by the real partition logs; tests and simulations
use InMemoryOffsetsLog. Going through this seam keeps the coordinator free of storage and
broker imports, and makes append failures easy to inject.

Transactional offset commits (TxnOffsetCommit) are ordinary offset records in a transactional
batch; the transaction's COMMIT or ABORT marker in the same partition decides their fate. So
loading needs more than keys and values: `read` yields LogEntry values that say which
producer wrote a record, whether it was transactional, and which records are markers.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Awaitable, Iterable, Iterator, Sequence
from typing import NamedTuple, Protocol

from onceflow.protocol.txn_support import TxnSupport
from onceflow.records.batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, parse_header
from onceflow.records.builder import build_batch
from onceflow.records.control import ControlType, build_control_batch, parse_control_record
from onceflow.records.record import decode_records

# (key, value) of one record; a None value is a tombstone.
KeyValue = tuple[bytes, bytes | None]


class LogEntry(NamedTuple):
    """One record of `__consumer_offsets` as loading sees it.

    `control` is the marker type (ControlType: 0 ABORT, 1 COMMIT) of a control record, whose
    key and value are then the raw control key and value; it is None for data records.
    """

    offset: int
    key: bytes | None
    value: bytes | None
    producer_id: int
    transactional: bool
    control: int | None


class OffsetsLog(Protocol):
    def append(
        self,
        partition: int,
        batch: bytes,
        transactional_id: str | None = None,
        support: TxnSupport = TxnSupport.DEFAULT_ERROR,
    ) -> Awaitable[object]:
        """Append one record batch to __consumer_offsets-<partition> (an async def will do).

        The awaitable finishes once the batch is durable, and raises on failure (nothing was
        appended): a KafkaError carries the code the client should see. Appends must reach the
        log in the order they were called, because the coordinator orders commits by it.

        A transactional batch comes with the producer's `transactional_id`: the log must
        accept it only if this partition is part of that producer's ongoing transaction at
        the batch's epoch (KIP-890), and otherwise raise KafkaError (INVALID_PRODUCER_EPOCH,
        INVALID_TXN_STATE, ...), so a late TxnOffsetCommit cannot open a hanging transaction.
        """
        ...

    def read(self, partition: int) -> Iterable[LogEntry] | AsyncIterable[LogEntry]:
        """Every record of the partition, markers included, oldest first, for loading.

        An async iterable lets a load wait for the log; the partition's groups answer
        COORDINATOR_LOAD_IN_PROGRESS meanwhile. A plain iterable is read in one go."""
        ...


def encode_batch(
    records: Sequence[KeyValue],
    timestamp_ms: int,
    *,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
) -> bytes:
    """The one place the coordinator builds a record batch.

    With a producer id the batch is transactional: Kafka writes TxnOffsetCommit records
    without a sequence (-1), since the coordinator, not the client, builds them.
    """
    return build_batch(
        [(key, value, ()) for key, value in records],
        timestamp_ms=timestamp_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=producer_id != NO_PRODUCER_ID,
    )


def decode_entries(batch: bytes | bytearray | memoryview) -> Iterator[LogEntry]:
    """The LogEntry values of one stored batch (its base offset already assigned).

    The broker's `read` can be this applied to every batch of the partition in order.
    """
    header = parse_header(batch)
    if header.is_control:
        control_type, _ = parse_control_record(batch)
        for record in decode_records(batch):
            yield LogEntry(
                record.offset,
                record.key,
                record.value,
                header.producer_id,
                header.is_transactional,
                int(control_type),
            )
        return
    for record in decode_records(batch):
        yield LogEntry(
            record.offset,
            record.key,
            record.value,
            header.producer_id,
            header.is_transactional,
            None,
        )


class InMemoryOffsetsLog:
    """An OffsetsLog that keeps batches in memory: for tests and simulations.

    Batches get real, consecutive offsets. Set `fail_with` to make every append raise it
    (nothing is stored), to exercise the coordinator's error paths; `appends` records each
    append's (partition, transactional id). `write_marker` stands in for the transaction
    coordinator, and `compact()` does what the log cleaner would.
    """

    def __init__(self) -> None:
        self.batches: dict[int, list[bytes]] = {}
        self.fail_with: BaseException | None = None
        self.appends: list[tuple[int, str | None]] = []
        self._next_offset: dict[int, int] = {}

    async def append(
        self,
        partition: int,
        batch: bytes,
        transactional_id: str | None = None,
        support: TxnSupport = TxnSupport.DEFAULT_ERROR,
    ) -> int:
        if self.fail_with is not None:
            raise self.fail_with
        return self._store(partition, batch, transactional_id)

    def _store(self, partition: int, batch: bytes, transactional_id: str | None = None) -> int:
        base = self._next_offset.get(partition, 0)
        header = parse_header(batch)
        # baseOffset lies outside the CRC, so it may be rewritten as the broker does.
        stored = base.to_bytes(8, "big", signed=True) + batch[8:]
        self.batches.setdefault(partition, []).append(stored)
        self._next_offset[partition] = base + header.last_offset_delta + 1
        self.appends.append((partition, transactional_id))
        return base

    def write_marker(
        self, partition: int, producer_id: int, *, commit: bool, producer_epoch: int = 0
    ) -> int:
        """Append a COMMIT or ABORT marker, as the transaction coordinator would."""
        marker = build_control_batch(
            ControlType.COMMIT if commit else ControlType.ABORT,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            coordinator_epoch=0,
            timestamp_ms=0,
        )
        return self._store(partition, marker)

    def read(self, partition: int) -> Iterator[LogEntry]:
        for batch in self.batches.get(partition, []):
            yield from decode_entries(batch)

    def records(self, partition: int) -> list[tuple[bytes | None, bytes | None]]:
        """(key, value) of every data record, markers left out."""
        return [(e.key, e.value) for e in self.read(partition) if e.control is None]

    def compact(self, partition: int, timestamp_ms: int = 0) -> None:
        """Keep only the newest record per key and drop tombstones, as a cleaner would.

        Like Kafka's cleaner it stops at the first transaction still open (the last stable
        offset): that record and everything after it stay as they are. Before it, aborted
        records and markers go, and committed transactional records are kept at their own
        offsets as plain records, so positions, and thus which commit is newer, never change.
        """
        entries = list(self.read(partition))
        outcome: dict[int, bool] = {}  # offset of a transactional record -> committed?
        open_txn: dict[int, list[int]] = {}  # producer id -> offsets awaiting a marker
        for entry in entries:
            if entry.control is not None:
                for offset in open_txn.pop(entry.producer_id, []):
                    outcome[offset] = entry.control == ControlType.COMMIT
            elif entry.transactional:
                open_txn.setdefault(entry.producer_id, []).append(entry.offset)
        unstable = min((min(offsets) for offsets in open_txn.values()), default=None)
        latest: dict[bytes | None, LogEntry] = {}
        tail: list[bytes] = []
        for batch in self.batches.get(partition, []):
            if unstable is not None and parse_header(batch).last_offset >= unstable:
                tail.append(batch)
        for entry in entries:
            if unstable is not None and entry.offset >= unstable:
                break
            if entry.control is not None or not outcome.get(entry.offset, True):
                continue
            latest.pop(entry.key, None)
            latest[entry.key] = entry
        kept = sorted(
            (e for k, e in latest.items() if k is not None and e.value is not None),
            key=lambda e: e.offset,
        )
        self.batches[partition] = [
            e.offset.to_bytes(8, "big", signed=True)
            + build_batch([(e.key, e.value, ())], timestamp_ms=timestamp_ms)[8:]
            for e in kept
        ] + tail
