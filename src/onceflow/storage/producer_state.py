"""Per-partition producer state: what makes idempotent (and transactional) appends exact.

For each producer id the partition remembers the epoch, the metadata of its last five
batches (sequences, offsets, timestamp) and the first offset of its open transaction. Every
produced batch with a producer id is validated against it before it is appended:

- an older epoch is fenced (INVALID_PRODUCER_EPOCH);
- a batch equal to one of the last five is a retry: the client gets the offsets it got the
  first time and nothing is appended. Only batches of the producer's current transaction
  count: one written before its last COMMIT or ABORT marker here belongs to a transaction
  that has ended, so the same sequences again are new records of a later transaction, not
  a retry, and are refused as out of order (Kafka answers them as duplicates and drops them:
  see `ProducerEntry.find_duplicate`);
- within an epoch, sequences must follow on (OUT_OF_ORDER_SEQUENCE_NUMBER otherwise), and a
  new epoch starts at sequence 0;
- an unknown producer with a sequence above 0 had its state removed (UNKNOWN_PRODUCER_ID).

The state is derived data: snapshots (`<offset>.snapshot`) are written at every segment roll
and at clean shutdown, and recovery loads the newest usable one and replays the log after
it. A snapshot is only ever an optimisation; a corrupt one is skipped.
"""

from __future__ import annotations

import logging
import os
import struct
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

import crc32c as _crc32c

from onceflow.errors import ErrorCode, KafkaError
from onceflow.records.batch import NO_SEQUENCE, BatchHeader
from onceflow.storage.fs import FileSystem

log = logging.getLogger(__name__)

MAX_BATCHES_PER_PRODUCER = 5
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOTS_KEPT = 2
NO_TXN = -1
SEQUENCE_MODULUS = 1 << 31

# Snapshot layout (big-endian), all covered by the CRC-32C after the version:
#   version i16 | crc u32 | producer count i32 | producers...
#   producer: id i64, epoch i16, coordinator epoch i32, last timestamp i64,
#             txn first offset i64 (-1: none), last marker offset i64 (-1: none; not in
#             version 1), batch count i8, batches...
#   batch: first seq i32, last seq i32, last offset i64, offset delta i32, timestamp i64
SNAPSHOT_VERSION = 2
_PREFIX = struct.Struct(">hI")
_COUNT = struct.Struct(">i")
_PRODUCER = {1: struct.Struct(">qhiqqb"), 2: struct.Struct(">qhiqqqb")}
NO_MARKER = -1
_BATCH = struct.Struct(">iiqiq")


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    epoch: int
    batches: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=MAX_BATCHES_PER_PRODUCER)
    )
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    txn_first_offset: int = NO_TXN
    last_marker_offset: int = NO_MARKER  # this producer's newest COMMIT/ABORT marker here

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        """The remembered batch `header` retries, if any. Batches before the producer's last
        marker are left out: a client never retries a batch once its transaction has ended,
        but librdkafka (2.16) hands the sequences of records it purged at an abort to the
        next transaction, even when a lost response hid that the broker had written them.
        Matching those would acknowledge the new transaction's records without writing
        them, and its commit would lose them; refused as out of order instead, they fail
        the transaction, which the client aborts with an epoch bump and retries."""
        if header.producer_epoch != self.epoch:
            return None
        for batch in self.batches:
            if (
                batch.first_seq == header.base_sequence
                and batch.last_seq == header.last_sequence
                and batch.last_offset > self.last_marker_offset
            ):
                return batch
        return None

    def copy(self) -> ProducerEntry:
        return ProducerEntry(
            self.producer_id,
            self.epoch,
            deque(self.batches, maxlen=MAX_BATCHES_PER_PRODUCER),
            self.coordinator_epoch,
            self.last_timestamp,
            self.txn_first_offset,
            self.last_marker_offset,
        )


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == (last_seq + 1) % SEQUENCE_MODULUS


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker ended on this partition."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    aborted: bool


class AppendPlan:
    """Producer state changes of one append, checked against the state but not yet applied.

    Batches of one request are checked in order, each against the state the earlier ones
    leave, so nothing is applied if any of them fails.
    """

    def __init__(self, manager: ProducerStateManager) -> None:
        self._manager = manager
        self.updated: dict[int, ProducerEntry] = {}

    def _entry(self, producer_id: int) -> ProducerEntry | None:
        entry = self.updated.get(producer_id)
        if entry is None:
            entry = self._manager.producers.get(producer_id)
        return entry

    def duplicate_of(self, header: BatchHeader) -> BatchMetadata | None:
        # Only the stored state holds duplicates, as in Kafka. A batch planned earlier in
        # the same request has no offsets yet: matching it answered "duplicate" with offsets
        # that were never written (and dropped the request). A copy within one request is
        # now out of order at check().
        entry = self._manager.producers.get(header.producer_id)
        return entry.find_duplicate(header) if entry is not None else None

    def check(self, header: BatchHeader) -> None:
        """Raise Kafka's error if a client's batch may not be appended."""
        entry = self._entry(header.producer_id)
        if entry is None:
            if header.base_sequence != 0:
                raise KafkaError(
                    ErrorCode.unknown_producer_id,
                    f"producer {header.producer_id} is unknown here (its state was removed) "
                    f"and sent sequence {header.base_sequence}",
                )
            return
        if header.producer_epoch < entry.epoch:
            raise KafkaError(
                ErrorCode.invalid_producer_epoch,
                f"producer {header.producer_id} epoch {header.producer_epoch} is older than "
                f"the current epoch {entry.epoch}",
            )
        if header.producer_epoch > entry.epoch:
            if header.base_sequence != 0:
                raise KafkaError(
                    ErrorCode.out_of_order_sequence_number,
                    f"a new epoch {header.producer_epoch} of producer {header.producer_id} "
                    f"must start at sequence 0, not {header.base_sequence}",
                )
            return
        # An empty entry at this epoch (after a transaction marker bumped it) expects 0.
        if not in_sequence(entry.last_seq, header.base_sequence):
            raise KafkaError(
                ErrorCode.out_of_order_sequence_number,
                f"producer {header.producer_id} sent sequence {header.base_sequence} after "
                f"{entry.last_seq}",
            )

    def add(self, header: BatchHeader) -> None:
        """Record a data batch at its assigned offsets (validated or replayed)."""
        entry = self._entry(header.producer_id)
        if entry is None or header.producer_epoch > entry.epoch:
            fresh = ProducerEntry(header.producer_id, header.producer_epoch)
            if entry is not None:
                fresh.coordinator_epoch = entry.coordinator_epoch
                fresh.txn_first_offset = entry.txn_first_offset
            entry = fresh
        else:
            entry = entry.copy()
        entry.batches.append(
            BatchMetadata(
                header.base_sequence,
                header.last_sequence,
                header.last_offset,
                header.last_offset_delta,
                header.max_timestamp,
            )
        )
        entry.last_timestamp = header.max_timestamp
        if header.is_transactional and entry.txn_first_offset == NO_TXN:
            entry.txn_first_offset = header.base_offset
        self.updated[header.producer_id] = entry

    def add_marker(
        self, header: BatchHeader, aborted: bool, coordinator_epoch: int, *, strict: bool = True
    ) -> CompletedTxn | None:
        """Record a COMMIT or ABORT marker at its assigned offset; return the transaction
        it ended, if the producer had one open here.

        A marker may carry a bumped epoch (a fence or a timeout abort): from then on the
        producer's older epoch is rejected here, which is what fences a zombie's writes.
        With `strict` off (a marker already in a log: replay, a follower's copy) an older
        producer or coordinator epoch is only logged, as Kafka does for its REPLICATION
        origin: the log is the truth, and refusing it would stop recovery or replication.
        """
        entry = self._entry(header.producer_id)
        problem = None
        if entry is not None and header.producer_epoch < entry.epoch:
            problem = KafkaError(
                ErrorCode.invalid_producer_epoch,
                f"marker epoch {header.producer_epoch} of producer {header.producer_id} is "
                f"older than the current epoch {entry.epoch}",
            )
        elif entry is not None and coordinator_epoch < entry.coordinator_epoch:
            problem = KafkaError(
                ErrorCode.transaction_coordinator_fenced,
                f"marker from coordinator epoch {coordinator_epoch} after epoch "
                f"{entry.coordinator_epoch}",
            )
        if problem is not None:
            if strict:
                raise problem
            log.warning("marker at offset %d kept anyway: %s", header.base_offset, problem)
        if entry is None or header.producer_epoch > entry.epoch:
            updated = ProducerEntry(header.producer_id, header.producer_epoch)
            if entry is not None:
                updated.txn_first_offset = entry.txn_first_offset
        else:
            updated = entry.copy()
        completed = None
        if updated.txn_first_offset != NO_TXN:
            completed = CompletedTxn(
                header.producer_id, updated.txn_first_offset, header.base_offset, aborted
            )
        updated.txn_first_offset = NO_TXN
        updated.last_marker_offset = header.base_offset
        updated.coordinator_epoch = coordinator_epoch
        updated.last_timestamp = header.max_timestamp
        self.updated[header.producer_id] = updated
        return completed

    def replay_batch(
        self, header: BatchHeader, marker: tuple[bool, int] | None
    ) -> CompletedTxn | None:
        """Record one batch that is already in a log, unchecked: recovery replaying its own
        log, and a follower copying its leader's (both Kafka's REPLICATION origin).

        A control batch comes with (is it an ABORT, its coordinator epoch), a data batch
        with None. Returns the transaction a marker ended, if any.
        """
        if header.is_control:
            if marker is None:
                return None
            return self.add_marker(header, marker[0], marker[1], strict=False)
        if header.has_producer_id:
            self.add(header)
        return None

    def open_transactions(self) -> dict[int, int]:
        """Producer id -> first offset of its open transaction, as it would be once this
        plan is applied (the state's, updated by the batches planned so far)."""
        ongoing = dict(self._manager.ongoing)
        for pid, entry in self.updated.items():
            if entry.txn_first_offset == NO_TXN:
                ongoing.pop(pid, None)
            else:
                ongoing[pid] = entry.txn_first_offset
        return ongoing

    def apply(self) -> None:
        manager = self._manager
        manager.producers.update(self.updated)
        for pid, entry in self.updated.items():
            if entry.txn_first_offset == NO_TXN:
                manager.ongoing.pop(pid, None)
            else:
                manager.ongoing[pid] = entry.txn_first_offset


class ProducerStateManager:
    def __init__(self, fs: FileSystem, directory: str) -> None:
        self.fs = fs
        self.directory = directory
        self.producers: dict[int, ProducerEntry] = {}
        # producer id -> first offset of its open transaction here (the LSO's candidates)
        self.ongoing: dict[int, int] = {}
        self.map_end_offset = 0  # the state covers every batch below this offset

    def plan(self) -> AppendPlan:
        return AppendPlan(self)

    def replay(
        self, batches: Iterable[tuple[BatchHeader, tuple[bool, int] | None]]
    ) -> list[CompletedTxn]:
        """Rebuild state from batches already in the log (no validation: they were).

        Each control batch comes with (is it an ABORT, its coordinator epoch); data batches
        with None. Returns the transactions the replayed markers completed.
        """
        plan = self.plan()
        completed: list[CompletedTxn] = []
        for header, marker in batches:
            done = plan.replay_batch(header, marker)
            if done is not None:
                completed.append(done)
            self.map_end_offset = header.next_offset
        plan.apply()
        return completed

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction, or None."""
        return min(self.ongoing.values()) if self.ongoing else None

    def advance(self, next_offset: int) -> None:
        self.map_end_offset = next_offset

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Forget every producer and delete every snapshot: the log was emptied and starts
        again at `offset`, so no snapshot describes anything in it."""
        for snapshot in self.snapshot_offsets():
            self.fs.remove(self.snapshot_path(snapshot))
        self.producers = {}
        self.ongoing = {}
        self.map_end_offset = offset

    # ---- expiry ----------------------------------------------------------------------

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget idle producers; never one with an open transaction."""
        expired = [
            pid
            for pid, entry in self.producers.items()
            if entry.txn_first_offset == NO_TXN and now_ms - entry.last_timestamp >= expiration_ms
        ]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    def _reset_ongoing(self) -> None:
        self.ongoing = {
            pid: e.txn_first_offset
            for pid, e in self.producers.items()
            if e.txn_first_offset != NO_TXN
        }

    # ---- snapshots -------------------------------------------------------------------

    def snapshot_path(self, offset: int) -> str:
        return os.path.join(self.directory, f"{offset:020d}{SNAPSHOT_SUFFIX}")

    def snapshot_offsets(self) -> list[int]:
        names = self.fs.listdir(self.directory) if self.fs.isdir(self.directory) else []
        return sorted(
            int(n[: -len(SNAPSHOT_SUFFIX)])
            for n in names
            if n.endswith(SNAPSHOT_SUFFIX) and n[: -len(SNAPSHOT_SUFFIX)].isdigit()
        )

    def take_snapshot(self) -> None:
        """Write the state at `map_end_offset`, atomically; keep the newest two."""
        self.fs.write_file_atomic(self.snapshot_path(self.map_end_offset), encode(self.producers))
        for offset in self.snapshot_offsets()[:-SNAPSHOTS_KEPT]:
            self.fs.remove(self.snapshot_path(offset))

    def load_snapshot(self, at_or_below: int) -> int:
        """Load the newest readable snapshot at or below an offset; return its offset.

        Snapshots above the offset (the log was truncated below them) and unreadable ones
        are deleted. Returns 0 with empty state when none is usable.
        """
        for offset in reversed(self.snapshot_offsets()):
            path = self.snapshot_path(offset)
            if offset > at_or_below:
                self.fs.remove(path)
                continue
            try:
                self.producers = decode(self.fs.read_file(path))
            except ValueError as exc:
                log.warning("skipping unreadable producer snapshot %s: %s", path, exc)
                self.fs.remove(path)
                continue
            self.map_end_offset = offset
            self._reset_ongoing()
            return offset
        self.producers = {}
        self.ongoing = {}
        self.map_end_offset = 0
        return 0


def encode(producers: dict[int, ProducerEntry]) -> bytes:
    parts = [_COUNT.pack(len(producers))]
    for entry in sorted(producers.values(), key=lambda e: e.producer_id):
        parts.append(
            _PRODUCER[SNAPSHOT_VERSION].pack(
                entry.producer_id,
                entry.epoch,
                entry.coordinator_epoch,
                entry.last_timestamp,
                entry.txn_first_offset,
                entry.last_marker_offset,
                len(entry.batches),
            )
        )
        for b in entry.batches:
            parts.append(
                _BATCH.pack(b.first_seq, b.last_seq, b.last_offset, b.offset_delta, b.timestamp)
            )
    body = b"".join(parts)
    return _PREFIX.pack(SNAPSHOT_VERSION, _crc32c.crc32c(body)) + body


def decode(data: bytes) -> dict[int, ProducerEntry]:
    """Parse a snapshot; raise ValueError for anything but a whole, intact one.

    Version 1 (before markers were remembered) is still read: its producers have no last
    marker, so their batches count as retries as before until their next marker."""
    if len(data) < _PREFIX.size + _COUNT.size:
        raise ValueError("truncated")
    version, crc = _PREFIX.unpack_from(data, 0)
    layout = _PRODUCER.get(version)
    if layout is None:
        raise ValueError(f"unknown version {version}")
    body = memoryview(data)[_PREFIX.size :]
    if _crc32c.crc32c(body) != crc:
        raise ValueError("CRC mismatch")
    try:
        (count,) = _COUNT.unpack_from(body, 0)
        pos = _COUNT.size
        producers: dict[int, ProducerEntry] = {}
        for _ in range(count):
            fields = layout.unpack_from(body, pos)
            pos += layout.size
            pid, epoch, coord_epoch, last_ts, txn_first = fields[:5]
            nbatches = fields[-1]
            entry = ProducerEntry(pid, epoch, coordinator_epoch=coord_epoch, last_timestamp=last_ts)
            entry.txn_first_offset = txn_first
            if version >= 2:
                entry.last_marker_offset = fields[5]
            for _ in range(nbatches):
                entry.batches.append(BatchMetadata(*_BATCH.unpack_from(body, pos)))
                pos += _BATCH.size
            producers[pid] = entry
    except struct.error as exc:
        raise ValueError(f"truncated: {exc}") from exc
    if pos != len(body):
        raise ValueError("trailing bytes")
    return producers
