"""PartitionLog: the ordered segments of one partition, and its offsets.

Offsets that matter, lowest to highest:
- `log_start_offset`: the first offset still held (retention moves it).
- `high_watermark`: what consumers may read. In durable mode (the default) it is the
  flushed offset, so no consumer ever sees data a crash could take back.
- `log_end_offset`: one past the last appended offset.

Appends are synchronous writes to the page cache. Durability is a separate, two-step flush
(`prepare_flush` on the event loop, fsync anywhere, `complete_flush` back on the loop), which
lets the broker group many appends under one fsync.

Storage failures (see failures.py): a write that finds the disk full is cut back whole and
raises OutOfSpace with the log unchanged; any other failure, a failed fsync above all, takes
the log offline, after which every call raises LogOffline until a restart recovers it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from onceflow.clock import Clock
from onceflow.errors import ErrorCode, KafkaError
from onceflow.invariants import invariant
from onceflow.records.batch import (
    BatchHeader,
    assign_offsets,
    parse_header,
    stamp_log_append_time,
)
from onceflow.records.control import ControlType, build_control_batch, parse_control_record
from onceflow.records.record import decode_records
from onceflow.storage.failures import LogOffline, OutOfSpace
from onceflow.storage.fs import FileHandle, FileSystem, is_out_of_space
from onceflow.storage.indexes import AbortedTxn
from onceflow.storage.producer_state import AppendPlan, ProducerStateManager
from onceflow.storage.segment import LogSegment

log = logging.getLogger(__name__)

MAX_RELATIVE_OFFSET = (1 << 31) - 1
# How long a deleted or replaced segment's descriptors stay open (Kafka's
# file.delete.delay.ms): a fetch response may still be streaming from them.
FILE_DELETE_DELAY_MS = 60_000


class SpaceAccount(Protocol):
    """Told about every write and every write refused for lack of space (the disk guard)."""

    def note_written(self, nbytes: int) -> None: ...
    def note_out_of_space(self) -> None: ...


@dataclass(frozen=True, slots=True)
class LogConfig:
    """The per-topic settings storage acts on (Kafka's topic-level config keys)."""

    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * 24 * 3600 * 1000
    index_interval_bytes: int = 4096
    segment_index_bytes: int = 10 * 1024 * 1024
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    cleanup_delete: bool = True
    cleanup_compact: bool = False
    max_message_bytes: int = 1048588
    delete_retention_ms: int = 24 * 3600 * 1000
    min_compaction_lag_ms: int = 0
    min_cleanable_dirty_ratio: float = 0.5
    durable: bool = True  # answer acks=-1 and expose data only after fsync
    log_append_time: bool = False  # message.timestamp.type=LogAppendTime
    timestamp_after_max_ms: int = 3_600_000  # message.timestamp.after.max.ms
    timestamp_before_max_ms: int = (1 << 63) - 1  # message.timestamp.before.max.ms


@dataclass(frozen=True, slots=True)
class AppendResult:
    first_offset: int
    last_offset: int
    log_start_offset: int
    duplicate: bool = False  # a producer's retry: nothing was appended
    log_append_time: int = -1  # the broker's timestamp, for LogAppendTime topics


@dataclass(frozen=True, slots=True)
class FileRegion:
    """Bytes of a segment file to send as they are (sendfile when possible)."""

    file: FileHandle
    position: int
    size: int

    def read(self) -> bytes:
        return self.file.pread(self.size, self.position)


@dataclass(frozen=True, slots=True)
class ReadResult:
    region: FileRegion | None
    high_watermark: int
    log_start_offset: int


@dataclass(slots=True)
class FlushPlan:
    log: PartitionLog
    end_offset: int
    end_segment: LogSegment
    end_position: int
    segments: list[LogSegment] = field(default_factory=list)

    def execute(self) -> None:
        """The slow part: fsync the record bytes of every segment with unflushed data."""
        for segment in self.segments:
            segment.fsync_data()


class PartitionLog:
    def __init__(
        self,
        fs: FileSystem,
        directory: str,
        topic: str,
        partition: int,
        config: LogConfig,
        clock: Clock,
        segments: list[LogSegment],
        recovery_point: int,
        producer_state: ProducerStateManager | None = None,
    ) -> None:
        invariant(bool(segments), "a partition log always has an active segment")
        self.fs = fs
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self.clock = clock
        self.segments = segments
        self.leader_epoch = 0
        self.log_end_offset = segments[-1].next_offset
        self.flushed_offset = min(recovery_point, self.log_end_offset)
        # What the recovery-point checkpoint may claim: everything below is on disk. It
        # moves with every flush and with every roll (which syncs the old segment), so after
        # a crash recovery scans at most the active segment's tail, whatever the log's size.
        self.recovery_point = self.flushed_offset
        self.on_roll: Callable[[], object] | None = None
        self.on_offline: Callable[[PartitionLog], None] | None = None
        self.space: SpaceAccount | None = None
        self.offline: str | None = None  # why the log stopped serving, once it has
        self._hw_segment = segments[-1]
        self._hw_position = segments[-1].size
        self.high_watermark = self.log_end_offset
        self._dirty: list[LogSegment] = []
        if self.flushed_offset < self.log_end_offset:
            # Recovery validated everything past the recovery point; flush it once more.
            self._dirty = list(segments)
        self.deleted = False
        if producer_state is None:
            producer_state = ProducerStateManager(fs, directory)
            producer_state.advance(self.log_end_offset)
        invariant(
            producer_state.map_end_offset == self.log_end_offset,
            f"producer state of {topic}-{partition} covers up to "
            f"{producer_state.map_end_offset}, the log ends at {self.log_end_offset}",
        )
        self.producer_state = producer_state
        self.retired: list[tuple[int, LogSegment]] = []

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def active(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_start_offset(self) -> int:
        return self.segments[0].base_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # ---- appending -------------------------------------------------------------------

    def append_batches(
        self,
        data: bytes | bytearray | memoryview,
        headers: list[BatchHeader],
        *,
        from_client: bool = True,
    ) -> AppendResult:
        """Assign offsets to validated batches and append them as they are.

        Only baseOffset and partitionLeaderEpoch change; the producer's CRC stays valid.
        Batches with a producer id are checked against the producer state first (for
        client appends): a retried duplicate returns its original offsets and appends
        nothing, and a fenced or out-of-order batch raises Kafka's error.
        """
        first = self.log_end_offset
        if from_client and not self.config.log_append_time:
            self._check_timestamps(headers)
        placed = [h._replace(base_offset=o) for h, o in _bases(headers, first)]
        plan = self.producer_state.plan()
        for header in placed:
            if not header.has_producer_id or header.is_control:
                continue
            if from_client:
                duplicate = plan.duplicate_of(header)
                if duplicate is not None:
                    return AppendResult(
                        duplicate.first_offset,
                        duplicate.last_offset,
                        self.log_start_offset,
                        duplicate=True,
                    )
                plan.check(header)
            plan.add(header)
        return self._write(placed, data, plan, stamp_time=from_client)

    def _check_timestamps(self, headers: list[BatchHeader]) -> None:
        """message.timestamp.after/before.max.ms, per batch (its first and max timestamps)."""
        now = self.clock.now_ms()
        for header in headers:
            if (
                header.max_timestamp - now > self.config.timestamp_after_max_ms
                or now - header.base_timestamp > self.config.timestamp_before_max_ms
            ):
                raise KafkaError(
                    ErrorCode.invalid_timestamp,
                    f"timestamp {header.max_timestamp} is out of the allowed range around "
                    f"the broker's time {now}",
                )

    def _write(
        self,
        placed: list[BatchHeader],
        data: bytes | bytearray | memoryview,
        plan: AppendPlan,
        stamp_time: bool = False,
        aborted: AbortedTxn | None = None,
    ) -> AppendResult:
        """Write whole batches, then apply their state; on a failure nothing is applied and
        the files hold what they held before (or the log goes offline). `aborted` is the
        `.txnindex` entry of an ABORT marker, written before the marker itself."""
        self.check_online()
        first = self.log_end_offset
        stamped = assign_offsets(data, placed, first, self.leader_epoch)
        append_time = -1
        if stamp_time and self.config.log_append_time:
            append_time = self.clock.now_ms()
            placed = stamp_log_append_time(stamped, placed, append_time)
        try:
            self._maybe_roll(len(stamped), placed)
            if aborted is not None:
                self.active.txn_index.append(aborted)
            try:
                self.active.append(stamped, placed)
            except OSError:
                if aborted is not None:
                    self.active.txn_index.drop_last()
                raise
        except OSError as exc:
            raise self._failed(exc, "append to") from exc
        if self.space is not None:
            self.space.note_written(len(stamped))
        self.log_end_offset = placed[-1].next_offset
        plan.apply()
        self.producer_state.advance(self.log_end_offset)
        self._mark_dirty()
        if not self.config.durable:
            self._advance_high_watermark(self.log_end_offset, self.active, self.active.size)
        return AppendResult(
            first, self.log_end_offset - 1, self.log_start_offset, log_append_time=append_time
        )

    # ---- storage failures ------------------------------------------------------------

    def check_online(self) -> None:
        if self.offline is not None:
            raise self.offline_error()

    def offline_error(self) -> LogOffline:
        return LogOffline(f"{self.name} is offline after a storage failure: {self.offline}")

    def _failed(self, exc: OSError, what: str) -> OutOfSpace | LogOffline:
        """The error a failed write is answered with; anything but a clean out-of-space
        failure takes the log offline."""
        if is_out_of_space(exc):
            if self.space is not None:
                self.space.note_out_of_space()
            return OutOfSpace(f"no space left on the log dir to {what} {self.name}: {exc}")
        return self.take_offline(f"{what} {self.name} failed: {exc}")

    def take_offline(self, reason: str) -> LogOffline:
        """Stop serving: the files may not hold what memory says. Only a restart, which
        recovers from the files alone, brings the partition back."""
        if self.offline is None:
            self.offline = reason
            self._dirty = []  # never sync again: a later fsync may "succeed" over lost pages
            log.error(
                "%s is offline: %s. It answers KAFKA_STORAGE_ERROR until the broker is "
                "restarted and recovers it from disk.",
                self.name,
                reason,
            )
            if self.on_offline is not None:
                self.on_offline(self)
        return self.offline_error()

    def _mark_dirty(self) -> None:
        if not self._dirty or self._dirty[-1] is not self.active:
            self._dirty.append(self.active)

    def _maybe_roll(self, incoming: int, headers: list[BatchHeader]) -> None:
        seg = self.active
        if seg.size == 0:
            return
        now = self.clock.now_ms()
        started = seg.first_batch_timestamp if seg.first_batch_timestamp is not None else now
        max_index_entries = self.config.segment_index_bytes // 8
        if (
            seg.size + incoming > self.config.segment_bytes
            or now - started > self.config.segment_ms
            or len(seg.offset_index) >= max_index_entries - 1
            or headers[-1].last_offset - seg.base_offset > MAX_RELATIVE_OFFSET
        ):
            self.roll()

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end offset."""
        if self.active.size == 0:
            return self.active
        # The old segment's bytes must be durable before the new segment's name can be:
        # otherwise a crash may keep the new (empty) segment and tear the old one at a
        # batch boundary, leaving a hole in the offsets that recovery cannot see. The
        # group commit has usually synced it already; this only covers the last appends.
        try:
            self.active.fsync()
        except OSError as exc:
            raise self.take_offline(f"fsync of {self.active.log_path} failed: {exc}") from exc
        segment = LogSegment(
            self.fs, self.directory, self.log_end_offset, self.config.index_interval_bytes
        )
        segment.next_offset = self.log_end_offset
        self.segments.append(segment)
        try:
            self.fs.fsync_dir(self.directory)
        except OSError as exc:
            raise self.take_offline(f"fsync of {self.directory} failed: {exc}") from exc
        # The data below the new base is durable now, so a snapshot there is safe to trust,
        # and recovery need not scan below it. A snapshot is derived data: without it the
        # next start replays more of the log, nothing else.
        try:
            self.producer_state.take_snapshot()
        except OSError as exc:
            log.warning("%s: producer snapshot not written (%s)", self.name, exc)
        self.recovery_point = max(self.recovery_point, self.log_end_offset)
        if self.on_roll is not None:
            self.on_roll()
        return segment

    # ---- durability ------------------------------------------------------------------

    def prepare_flush(self) -> FlushPlan | None:
        """Snapshot what must be synced to make everything appended so far durable."""
        if not self._dirty or self.offline is not None:
            return None
        plan = FlushPlan(self, self.log_end_offset, self.active, self.active.size, self._dirty)
        self._dirty = []
        return plan

    def complete_flush(self, plan: FlushPlan) -> None:
        self.recovery_point = max(self.recovery_point, plan.end_offset)
        if plan.end_offset > self.flushed_offset:
            self.flushed_offset = plan.end_offset
            if self.config.durable:
                self._advance_high_watermark(plan.end_offset, plan.end_segment, plan.end_position)

    def flush(self) -> None:
        """Synchronous flush of the data and the active segment's indexes (shutdown,
        recovery, tests, simulation). A failed fsync takes the log offline."""
        self.check_online()
        plan = self.prepare_flush()
        try:
            if plan is not None:
                plan.execute()
            self.active.fsync()
        except OSError as exc:
            raise self.flush_failed(exc) from exc
        if plan is not None:
            self.complete_flush(plan)

    def flush_failed(self, exc: OSError) -> LogOffline:
        """Never retried: after a failed fsync the kernel may have dropped the pages, and a
        second fsync would report success for data that is not on disk."""
        return self.take_offline(f"fsync failed: {exc}")

    def _advance_high_watermark(self, offset: int, segment: LogSegment, position: int) -> None:
        if offset >= self.high_watermark:
            self.high_watermark = offset
            self._hw_segment = segment
            self._hw_position = position

    @property
    def has_unflushed(self) -> bool:
        return bool(self._dirty)

    # ---- reading ---------------------------------------------------------------------

    def segment_for(self, offset: int) -> int:
        """Index of the segment holding `offset` (the last with base at or below it)."""
        lo, hi = 0, len(self.segments) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.segments[mid].base_offset <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def check_offset(self, offset: int, limit: int) -> None:
        if offset < self.log_start_offset or offset > limit:
            raise KafkaError(
                ErrorCode.offset_out_of_range,
                f"offset {offset} is outside [{self.log_start_offset}, {limit}] of {self.name}",
            )

    def read(self, offset: int, max_bytes: int, upper_offset: int, min_one: bool) -> ReadResult:
        """File bytes from the batch holding `offset`, up to `upper_offset` (exclusive).

        Like Kafka, the region may end inside a batch when `max_bytes` cuts it; clients
        drop a partial trailing batch. With `min_one`, the first batch is returned whole
        even when it is larger than `max_bytes`.
        """
        self.check_online()
        hw = self.high_watermark
        self.check_offset(offset, self.log_end_offset)
        start = self.log_start_offset
        if offset >= upper_offset:
            return ReadResult(None, hw, start)
        index = self.segment_for(offset)
        while index < len(self.segments):
            segment = self.segments[index]
            location = segment.find_batch(offset)
            if location is not None and location.header.base_offset < upper_offset:
                end = self._position_limit(segment, upper_offset)
                if min_one:
                    max_bytes = max(max_bytes, location.header.size)
                size = min(max_bytes, end - location.position)
                if size <= 0:
                    return ReadResult(None, hw, start)
                return ReadResult(FileRegion(segment.log, location.position, size), hw, start)
            if location is not None:
                break
            index += 1
        return ReadResult(None, hw, start)

    def _position_limit(self, segment: LogSegment, upper_offset: int) -> int:
        if upper_offset >= self.log_end_offset or upper_offset >= segment.next_offset:
            return segment.size
        if upper_offset == self.high_watermark and segment is self._hw_segment:
            return self._hw_position
        return segment.position_of(upper_offset)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with a timestamp at or after `timestamp`.

        The time index finds the segment and a starting point; batch headers (each carries
        its max timestamp) find the batch; only that one batch is decoded.
        """
        for segment in self.segments:
            if segment.max_timestamp < timestamp:
                continue
            start = segment.time_index.lookup(timestamp)
            _, position = segment.offset_index.lookup(start)
            for location in segment.read_headers(position):
                header = location.header
                if header.base_offset >= self.high_watermark:
                    return None
                if header.max_timestamp >= timestamp:
                    batch = segment.read_bytes(location.position, header.size)
                    for record in decode_records(batch, verify_crc=False):
                        if record.timestamp >= timestamp:
                            return record.offset, record.timestamp
                    return header.base_offset, header.max_timestamp
        return None

    # ---- retention -------------------------------------------------------------------

    def delete_oldest_segments(self, count: int) -> int:
        """Delete the oldest `count` segments (never the active one, never unflushed data)."""
        deletable = 0
        for segment in self.segments[: min(count, len(self.segments) - 1)]:
            if (
                segment.next_offset > self.flushed_offset
                or segment.next_offset > self.high_watermark
            ):
                break
            deletable += 1
        for segment in self.segments[:deletable]:
            segment.delete(close=False)
            self.retire(segment)
        del self.segments[:deletable]
        return deletable

    def retire(self, segment: LogSegment) -> None:
        """Close a segment that left the log only after FILE_DELETE_DELAY_MS."""
        self.retired.append((self.clock.monotonic_ms(), segment))

    def close_retired(self, force: bool = False) -> None:
        now = self.clock.monotonic_ms()
        keep = []
        for retired_at, segment in self.retired:
            if force or now - retired_at >= FILE_DELETE_DELAY_MS:
                segment.close()
            else:
                keep.append((retired_at, segment))
        self.retired = keep

    # ---- lifecycle -------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove everything at or above `offset` (recovery and tests only)."""
        while len(self.segments) > 1 and self.segments[-1].base_offset >= offset:
            self.segments.pop().delete()
        self.active.truncate_to(offset)
        self.log_end_offset = self.active.next_offset
        self.flushed_offset = min(self.flushed_offset, self.log_end_offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.high_watermark = min(self.high_watermark, self.log_end_offset)
        # The cached position must be the high watermark's, which may sit below the new
        # log end; pointing it at the end let reads bounded by the HW return more.
        self._hw_segment = self.segments[self.segment_for(self.high_watermark)]
        self._hw_position = self._hw_segment.position_of(self.high_watermark)
        self._dirty = [self.active]
        self.rebuild_producer_state()

    def rebuild_producer_state(self) -> int:
        """Load the newest usable snapshot and replay the log after it; return the number
        of batches replayed. The aborted-transaction indexes after the snapshot are rebuilt
        from the replayed markers; if any older one is unreadable, everything is replayed.

        A snapshot is written only once the data below its offset is durable (at a roll,
        after the old segment's fsync, or at clean shutdown), so any snapshot at or below
        the recovered log end describes data that is still there.
        """
        state = self.producer_state
        # An entry names its ABORT marker, which is in this segment and after the
        # transaction's first offset; one that does not (zeros where an fsync failed) makes
        # the file untrusted, and everything is replayed.
        loaded = [
            segment.txn_index.load()
            and all(
                e.first_offset < e.last_offset
                and segment.base_offset <= e.last_offset < segment.next_offset
                for e in segment.txn_index.entries
            )
            for segment in self.segments
        ]
        start = state.load_snapshot(self.log_end_offset if all(loaded) else -1)
        replayed: list[tuple[BatchHeader, tuple[bool, int] | None]] = []
        for segment in self.segments:
            if segment.next_offset <= start or segment.size == 0:
                continue
            position = segment.position_of(start) if segment.base_offset < start else 0
            for location in segment.read_headers(position):
                marker = None
                if location.header.is_control:
                    raw = segment.read_bytes(location.position, location.header.size)
                    kind, coordinator_epoch = parse_control_record(raw, verify_crc=False)
                    marker = (kind == ControlType.ABORT, coordinator_epoch)
                replayed.append((location.header, marker))
        completed = state.replay(replayed)
        state.advance(self.log_end_offset)
        aborted = [c for c in completed if c.aborted]
        for index, segment in enumerate(self.segments):
            entries = segment.txn_index.entries
            # An entry may outlive its marker: the .txnindex entry is written first, and a
            # crash can keep it while tearing off the marker (an empty active segment then
            # still ends at the snapshot). Such a segment is not skipped.
            if (
                loaded[index]
                and segment.next_offset <= start
                and all(e.last_offset < start for e in entries)
            ):
                continue
            kept = [e for e in segment.txn_index.entries if e.last_offset < start]
            upper = self.segments[index + 1].base_offset if index + 1 < len(self.segments) else None
            mine = [
                AbortedTxn(c.producer_id, c.first_offset, c.last_offset, c.last_offset + 1)
                for c in aborted
                if c.last_offset >= segment.base_offset and (upper is None or c.last_offset < upper)
            ]
            # An unreadable file (torn by a crash) is rewritten even when it ends up empty:
            # left as it was, every later start would distrust it and replay the whole log.
            if mine or len(kept) != len(segment.txn_index.entries) or not loaded[index]:
                segment.txn_index.rewrite(kept + mine)
        return len(replayed)

    # ---- transactions ----------------------------------------------------------------

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the oldest open transaction, or the high watermark."""
        first = self.producer_state.first_unstable_offset()
        hw = self.high_watermark
        return hw if first is None else min(first, hw)

    def append_marker(
        self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool
    ) -> AppendResult:
        """Append a COMMIT or ABORT marker for a producer's transaction on this partition.

        Writing one again after a crash is harmless: with no open transaction it ends
        nothing. An ABORT that ends a transaction adds an entry to the `.txnindex`.
        """
        batch = build_control_batch(
            ControlType.COMMIT if commit else ControlType.ABORT,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch,
            timestamp_ms=self.clock.now_ms(),
        )
        header = parse_header(batch)._replace(base_offset=self.log_end_offset)
        plan = self.producer_state.plan()
        completed = plan.add_marker(header, not commit, coordinator_epoch)
        aborted = None
        if completed is not None and completed.aborted:
            # The stable offset once this transaction ended: the oldest still-open one's
            # first offset, or just past the marker.
            still_open = [o for p, o in self.producer_state.ongoing.items() if p != producer_id]
            stable = min(still_open) if still_open else header.base_offset + 1
            aborted = AbortedTxn(producer_id, completed.first_offset, header.base_offset, stable)
        return self._write([header], batch, plan, aborted=aborted)

    def aborted_between(self, start: int, end: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of aborted transactions overlapping [start, end)."""
        out: list[tuple[int, int]] = []
        for segment in self.segments:
            if segment.base_offset >= end:
                break
            for entry in segment.txn_index.entries:
                if entry.last_offset >= start and entry.first_offset < end:
                    out.append((entry.producer_id, entry.first_offset))
        return out

    def close(self) -> bool:
        """Close after a flush: the producer snapshot at the end spares the next start a
        replay. Returns False if that snapshot could not be written (the next start
        replays instead); the caller reports it."""
        written = True
        if not self.deleted and self.offline is None:
            try:
                self.producer_state.take_snapshot()
            except OSError:
                written = False
        for segment in self.segments:
            segment.close()
        self.close_retired(force=True)
        return written

    def delete(self) -> None:
        """Remove the partition's files; descriptors close after the delete delay."""
        self.deleted = True
        for segment in self.segments:
            self.retire(segment)
        self.fs.rmtree(self.directory)


def _bases(headers: list[BatchHeader], first: int) -> list[tuple[BatchHeader, int]]:
    out = []
    offset = first
    for header in headers:
        out.append((header, offset))
        offset += header.last_offset_delta + 1
    return out


def partition_dir(root: str, topic: str, partition: int) -> str:
    return os.path.join(root, f"{topic}-{partition}")
