"""PartitionLog: the ordered segments of one partition, and its offsets.

Offsets that matter, lowest to highest:
- `log_start_offset`: the first offset offered to readers. Retention moves it with the
  segments it deletes; DeleteRecords (and, on a follower, its leader's) moves it past the
  first segment's base, and the segments wholly below it go at the next retention pass
  (Kafka's logStartOffset). The log manager persists it in log-start-offset-checkpoint.
- `high_watermark`: what consumers may read. In durable mode (the default) it is the
  flushed offset, so no consumer ever sees data a crash could take back. A replicated
  partition hands it to the replication layer (`hw_follows_local = False`), which moves it
  as the in-sync replicas copy the log (`update_high_watermark`, `set_high_watermark`).
- `log_end_offset`: one past the last appended offset.

A leader's appends get offsets and its `leader_epoch` stamped in (`append_batches`); a
follower appends its leader's batches as they are (`append_as_follower`), cuts a divergent
tail (`truncate_to`) or starts over (`truncate_fully_and_start_at`). Either way `epochs`
(leader_epoch.py) keeps where each leader epoch began.

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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from onceflow.clock import Clock
from onceflow.config import BrokerConfig, TopicConfig
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
from onceflow.storage import aborted_txns
from onceflow.storage.failures import LogOffline, OutOfSpace
from onceflow.storage.follower import follower_batches
from onceflow.storage.fs import FileHandle, FileSystem, is_out_of_space
from onceflow.storage.indexes import AbortedTxn
from onceflow.storage.leader_epoch import EpochEntry, LeaderEpochCache
from onceflow.storage.producer_state import AppendPlan, CompletedTxn, ProducerStateManager
from onceflow.storage.segment import LogSegment

log = logging.getLogger(__name__)

MAX_RELATIVE_OFFSET = (1 << 31) - 1
#: A topic with no overrides under the default broker config: where LogConfig's defaults come from.
_TOPIC = TopicConfig()

# How long a deleted or replaced segment's descriptors stay open (Kafka's
# file.delete.delay.ms): a fetch response may still be streaming from them.
FILE_DELETE_DELAY_MS = _TOPIC.file_delete_delay_ms


class SpaceAccount(Protocol):
    """Told about every write and every write refused for lack of space (the disk guard)."""

    def note_written(self, nbytes: int) -> None: ...
    def note_out_of_space(self) -> None: ...


@dataclass(frozen=True, slots=True)
class LogConfig:
    """The per-topic settings storage acts on (Kafka's topic-level config keys).

    The defaults are a topic's without overrides under a default broker config, read from
    `TopicConfig` so they are written only where the keys are declared; the broker builds one
    per topic with `from_topic`.
    """

    segment_bytes: int = _TOPIC.segment_bytes
    segment_ms: int = _TOPIC.segment_ms
    index_interval_bytes: int = _TOPIC.index_interval_bytes
    segment_index_bytes: int = _TOPIC.segment_index_bytes
    retention_ms: int = _TOPIC.retention_ms
    retention_bytes: int = _TOPIC.retention_bytes
    cleanup_delete: bool = _TOPIC.delete_enabled
    cleanup_compact: bool = _TOPIC.compact_enabled
    max_message_bytes: int = _TOPIC.max_message_bytes
    delete_retention_ms: int = _TOPIC.delete_retention_ms
    min_compaction_lag_ms: int = _TOPIC.min_compaction_lag_ms
    min_cleanable_dirty_ratio: float = _TOPIC.min_cleanable_dirty_ratio
    durable: bool = BrokerConfig.onceflow_fsync_on_ack  # answer acks=-1, expose data after fsync
    log_append_time: bool = _TOPIC.message_timestamp_type == "LogAppendTime"
    timestamp_after_max_ms: int = _TOPIC.message_timestamp_after_max_ms
    timestamp_before_max_ms: int = _TOPIC.message_timestamp_before_max_ms

    @classmethod
    def from_topic(cls, topic: TopicConfig, *, durable: bool) -> LogConfig:
        """What storage needs of a topic's effective config; `durable` is the broker's
        onceflow.fsync.on.ack, the one setting that is not per topic."""
        return cls(
            segment_bytes=topic.segment_bytes,
            segment_ms=topic.segment_ms,
            index_interval_bytes=topic.index_interval_bytes,
            segment_index_bytes=topic.segment_index_bytes,
            retention_ms=topic.retention_ms,
            retention_bytes=topic.retention_bytes,
            cleanup_delete=topic.delete_enabled,
            cleanup_compact=topic.compact_enabled,
            max_message_bytes=topic.max_message_bytes,
            delete_retention_ms=topic.delete_retention_ms,
            min_compaction_lag_ms=topic.min_compaction_lag_ms,
            min_cleanable_dirty_ratio=topic.min_cleanable_dirty_ratio,
            durable=durable,
            log_append_time=topic.message_timestamp_type == "LogAppendTime",
            timestamp_after_max_ms=topic.message_timestamp_after_max_ms,
            timestamp_before_max_ms=topic.message_timestamp_before_max_ms,
        )


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
    segment: LogSegment | None = None  # the region's
    # The first offset after the region's batches when the read stopped at its limit;
    # None when max_bytes cut it (aborted_transactions then walks headers to find it).
    end_offset: int | None = None


@dataclass(slots=True)
class FlushPlan:
    log: PartitionLog
    end_offset: int
    end_segment: LogSegment
    end_position: int
    segments: list[LogSegment] = field(default_factory=list)
    truncations: int = 0  # the log's truncation count when the plan was made

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
        log_start_offset: int = 0,
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
        self._log_start_offset = max(log_start_offset, segments[0].base_offset)
        # Told when the log start offset moved other than with deleted segments, so that
        # it is persisted (the log manager's checkpoint).
        self.on_log_start_moved: Callable[[PartitionLog], object] | None = None
        self.flushed_offset = min(recovery_point, self.log_end_offset)
        # What the recovery-point checkpoint may claim: everything below is on disk. It
        # moves with every flush and with every roll (which syncs the old segment), so after
        # a crash recovery scans at most the active segment's tail, whatever the log's size.
        self.recovery_point = self.flushed_offset
        self.on_roll: Callable[[], object] | None = None
        self.on_offline: Callable[[PartitionLog], None] | None = None
        self.space: SpaceAccount | None = None
        self.offline: str | None = None  # why the log stopped serving, once it has
        # Markers appended here per producer id: a transactional write verified by a
        # remote coordinator is appended only if no marker of its producer came in while
        # it waited (Kafka's VerificationGuard).
        self.markers_written: dict[int, int] = {}
        self._hw_segment = segments[-1]
        self._hw_position = segments[-1].size
        self.high_watermark = self.log_end_offset
        # True: the high watermark follows this replica alone (the flushed offset in
        # durable mode, else the log end). False: replication owns it, through
        # update_high_watermark and set_high_watermark.
        self.hw_follows_local = True
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
        # Bumped by every truncation: a flush planned before one may not claim offsets
        # that now hold other (unsynced) data.
        self._truncations = 0
        self.epochs = LeaderEpochCache(fs, directory)
        self.epochs.on_failure = self._epochs_failed
        last = self._last_batch()
        self.epochs.load(
            self.log_start_offset,
            self.log_end_offset,
            None if last is None else last.partition_leader_epoch,
            self._all_headers,
        )

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def active(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    def increment_log_start_offset(self, offset: int) -> bool:
        """Move the log start offset up to `offset` (Kafka's maybeIncrementLogStartOffset):
        reads below it answer OFFSET_OUT_OF_RANGE, ListOffsets EARLIEST returns it, and
        retention deletes the segments wholly below it. Never past the high watermark
        (OFFSET_OUT_OF_RANGE), never back. Producer state is kept: an open transaction
        that began below the new start stays open (the last stable offset is held at the
        log start until it ends). True if it moved."""
        self.check_online()
        if offset > self.high_watermark:
            raise KafkaError(
                ErrorCode.offset_out_of_range,
                f"cannot move the log start offset of {self.name} to {offset}, past its "
                f"high watermark {self.high_watermark}",
            )
        if offset <= self._log_start_offset:
            return False
        self._log_start_offset = offset
        self.epochs.truncate_from_start(offset)
        self._log_start_moved()
        return True

    def _log_start_moved(self) -> None:
        if self.on_log_start_moved is not None:
            self.on_log_start_moved(self)

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

    def append_as_follower(self, data: bytes | bytearray | memoryview) -> AppendResult:
        """Append batches a follower fetched from its leader, exactly as they are: their
        offsets, their partitionLeaderEpoch, their CRCs (Kafka's appendAsFollower).

        Whole batches only: a partial batch at the end (the fetch's size limit cut it) is
        left for the next fetch. The first batch must start at or after the log end (after
        it only where the leader's log has a compaction gap) and offsets must rise, or
        UnexpectedAppendOffset / InvalidReplicaData is raised with nothing written (see
        follower.py). The producer state takes the batches as recovery replays them, so
        this replica, once leader, deduplicates retries and knows the open and aborted
        transactions (an ABORT's `.txnindex` entry is written before the marker, as on the
        leader). New leader epochs go to the epoch cache. Failures as for any append:
        OutOfSpace leaves the log unchanged, anything else takes it offline.

        With no whole batch in `data`, nothing is appended and the result's last offset is
        below its first (the log end).
        """
        self.check_online()
        headers, size = follower_batches(data, self.log_end_offset, self.name)
        if not headers:
            end = self.log_end_offset
            return AppendResult(end, end - 1, self.log_start_offset)
        view = memoryview(data)[:size]
        plan = self.producer_state.plan()
        aborted: list[AbortedTxn] = []
        position = 0
        for header in headers:
            marker = None
            if header.is_control:
                marker = _marker_of(view[position : position + header.size])
            completed = plan.replay_batch(header, marker)
            if completed is not None and completed.aborted:
                aborted.append(_aborted_txn(plan, completed))
            position += header.size
        return self._write(headers, view, plan, aborted=aborted, as_follower=True)

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
        *,
        stamp_time: bool = False,
        aborted: Sequence[AbortedTxn] = (),
        as_follower: bool = False,
    ) -> AppendResult:
        """Write whole batches, then apply their state; on a failure nothing is applied and
        the files hold what they held before (or the log goes offline). `aborted` are the
        `.txnindex` entries of ABORT markers, written before the markers themselves.

        A leader's batches get their offsets and its leader epoch stamped in; a follower's
        (`as_follower`) are written as they are. A new epoch goes to the epoch cache before
        its first batch is written (Kafka's order: the checkpoint may get ahead of the
        log, which opening the log repairs, never behind it), and is taken back if the
        write fails."""
        self.check_online()
        append_time = -1
        if as_follower:
            first = placed[0].base_offset
            stamped: bytes | bytearray | memoryview = data
            starts: Iterator[tuple[int, int]] = (
                (h.partition_leader_epoch, h.base_offset) for h in placed
            )
        else:
            first = self.log_end_offset
            buffer = assign_offsets(data, placed, first, self.leader_epoch)
            if stamp_time and self.config.log_append_time:
                append_time = self.clock.now_ms()
                placed = stamp_log_append_time(buffer, placed, append_time)
            stamped = buffer
            starts = iter(((self.leader_epoch, first),))
        try:
            self._maybe_roll(len(stamped), placed)
            epochs_before = self._assign_epochs(starts)
            self.check_online()  # the epoch checkpoint's failure may have taken the log down
            written = 0
            try:
                for entry in aborted:
                    self.active.txn_index.append(entry)
                    written += 1
                self.active.append(stamped, placed)
            except OSError:
                for _ in range(written):
                    self.active.txn_index.drop_last()
                if epochs_before is not None:
                    self.epochs.restore(epochs_before)
                raise
        except OSError as exc:
            raise self._failed(exc, "append to") from exc
        if self.space is not None:
            self.space.note_written(len(stamped))
        self.log_end_offset = placed[-1].next_offset
        plan.apply()
        self.producer_state.advance(self.log_end_offset)
        self._mark_dirty()
        if not self.config.durable and self.hw_follows_local:
            self._advance_high_watermark(self.log_end_offset, self.active, self.active.size)
        return AppendResult(
            first, self.log_end_offset - 1, self.log_start_offset, log_append_time=append_time
        )

    def _assign_epochs(self, starts: Iterator[tuple[int, int]]) -> list[EpochEntry] | None:
        """Record the (epoch, start offset) pairs that change the epoch cache; return the
        entries as they were, or None if nothing changed. Batches without an epoch (-1,
        written before epochs existed) change nothing."""
        latest = self.epochs.latest_epoch
        changes = []
        for epoch, start in starts:
            if epoch != latest and epoch >= 0:
                changes.append((epoch, start))
                latest = epoch
        if not changes:
            return None
        before = self.epochs.entries
        self.epochs.assign_all(changes)
        return before

    def _epochs_failed(self, exc: OSError) -> None:
        """The epoch checkpoint could neither be written nor removed: what is on disk may
        contradict memory, so the log stops serving until a restart rebuilds it."""
        self.take_offline(f"the leader epoch checkpoint of {self.name} failed: {exc}")

    # ---- storage failures ------------------------------------------------------------

    def check_online(self) -> None:
        if self.offline is not None:
            raise self.offline_error()

    def offline_error(self) -> LogOffline:
        return LogOffline(f"{self.name} is offline after a storage failure: {self.offline}")

    def _failed(self, exc: OSError, what: str) -> OutOfSpace | LogOffline:
        """The error a failed write is answered with; anything but a clean out-of-space
        failure takes the log offline."""
        if is_out_of_space(exc) and self.offline is None:
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
        self.epochs.flush_deferred()
        self.recovery_point = max(self.recovery_point, self.log_end_offset)
        if self.on_roll is not None:
            self.on_roll()
        return segment

    # ---- durability ------------------------------------------------------------------

    def prepare_flush(self) -> FlushPlan | None:
        """Snapshot what must be synced to make everything appended so far durable."""
        if not self._dirty or self.offline is not None:
            return None
        plan = FlushPlan(
            self,
            self.log_end_offset,
            self.active,
            self.active.size,
            self._dirty,
            self._truncations,
        )
        self._dirty = []
        return plan

    def complete_flush(self, plan: FlushPlan) -> None:
        if plan.truncations != self._truncations:
            # The log was cut while this plan's fsyncs ran: its end offset may now name
            # data appended since, which it did not sync. The truncation marked the active
            # segment dirty, so the next round syncs and claims it.
            return
        self.recovery_point = max(self.recovery_point, plan.end_offset)
        if plan.end_offset > self.flushed_offset:
            self.flushed_offset = plan.end_offset
            if self.config.durable and self.hw_follows_local:
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

    def update_high_watermark(self, offset: int) -> bool:
        """Advance the high watermark to `offset`, capped at the log end; never back. For
        the replication layer (`hw_follows_local` off): a leader once the ISR holds the
        data, a follower from its leader's fetch response. True if it moved."""
        offset = min(offset, self.log_end_offset)
        if offset <= self.high_watermark:
            return False
        self._set_high_watermark(offset)
        return True

    def set_high_watermark(self, offset: int) -> int:
        """Set the high watermark to `offset` clamped to [log start, log end], even below
        where it is (Kafka's updateHighWatermark: a follower taking a new leader's lower
        one, or a replica setting it from a checkpoint once it opens). Returns it."""
        offset = max(self.log_start_offset, min(offset, self.log_end_offset))
        self._set_high_watermark(offset)
        return offset

    def _set_high_watermark(self, offset: int) -> None:
        """Move the high watermark and the file position reads bounded by it stop at."""
        self.high_watermark = offset
        if offset == self.log_end_offset:
            self._hw_segment, self._hw_position = self.active, self.active.size
        else:
            self._hw_segment = self.segments[self.segment_for(offset)]
            self._hw_position = self._hw_segment.position_of(offset)

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
                stop = None
                if size == end - location.position:
                    stop = min(upper_offset, segment.next_offset)
                region = FileRegion(segment.log, location.position, size)
                return ReadResult(region, hw, start, segment, stop)
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
        its max timestamp) find the batch; only that one batch is decoded. Records below
        the log start offset are not offered (Kafka searches from it).
        """
        first = self._log_start_offset
        for segment in self.segments:
            if segment.max_timestamp < timestamp or segment.next_offset <= first:
                continue
            start = max(segment.time_index.lookup(timestamp), first)
            _, position = segment.offset_index.lookup(start)
            for location in segment.read_headers(position):
                header = location.header
                if header.base_offset >= self.high_watermark:
                    return None
                if header.max_timestamp >= timestamp and header.next_offset > first:
                    batch = segment.read_bytes(location.position, header.size)
                    for record in decode_records(batch, verify_crc=False):
                        if record.timestamp >= timestamp and record.offset >= first:
                            return record.offset, record.timestamp
                    return max(header.base_offset, first), header.max_timestamp
        return None

    def max_timestamp_record(self) -> tuple[int, int, int] | None:
        """(offset, timestamp, leader epoch or -1) of the first record carrying the log's
        largest timestamp, None when there is none (ListOffsets MAX_TIMESTAMP, KIP-734).

        As Kafka's fetchOffsetByTimestamp: the first segment with the largest timestamp, the
        first batch in it with that max timestamp (the segment keeps where), and in that
        batch the first record with it. Like Kafka, it does not look at the log start
        offset; the caller bounds the answer by what may be read."""
        best: LogSegment | None = None
        for segment in self.segments:
            if segment.size and (best is None or segment.max_timestamp > best.max_timestamp):
                best = segment
        location = None if best is None else best.find_batch(best.offset_of_max_timestamp)
        if best is None or location is None:
            return None
        header = location.header
        batch = best.read_bytes(location.position, header.size)
        for record in decode_records(batch, verify_crc=False):
            if record.timestamp == header.max_timestamp:
                return record.offset, record.timestamp, max(header.partition_leader_epoch, -1)
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
        if deletable:
            self._log_start_offset = max(self._log_start_offset, self.segments[0].base_offset)
            self.epochs.truncate_from_start(self.log_start_offset)
        return deletable

    def delete_segments_below_start(self) -> int:
        """Delete the segments wholly below the log start offset, those whose successor
        starts at or below it (Kafka's deleteLogStartOffsetBreachedSegments, whatever the
        cleanup policy); the active segment stays. Returns how many went."""
        count = 0
        for successor in self.segments[1:]:
            if successor.base_offset > self._log_start_offset:
                break
            count += 1
        return self.delete_oldest_segments(count) if count else 0

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

    def truncate_to(self, offset: int) -> bool:
        """Remove everything at or above `offset`: a follower cutting a tail its leader
        does not have (Kafka's truncateTo), recovery, tests. Returns whether the log got
        shorter.

        A cut inside a batch removes that whole batch. The producer state is rebuilt
        from the newest snapshot below the cut (later ones are deleted), the `.txnindex`
        entries of removed markers go with it, the epoch cache loses the epochs that
        started in the removed part, and the high watermark comes down to the new end.
        Below the log start, the log is emptied and starts at `offset`. Removed segments'
        descriptors stay open for the delete delay (a fetch may be sending from them). A
        failure takes the log offline: the files may no longer match memory.
        """
        self.check_online()
        if offset < 0:
            raise ValueError(f"cannot truncate {self.name} to a negative offset {offset}")
        if offset >= self.log_end_offset:
            # An epoch its leader assigned at the log end and never wrote in may still be
            # there (this replica led, then lost leadership before any append).
            self.epochs.truncate_from_end(self.log_end_offset)
            return False
        if offset < self.segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        if offset < self._log_start_offset:  # as Kafka: the start comes down with the end
            self._log_start_offset = offset
            self._log_start_moved()
        self._truncations += 1
        try:
            while len(self.segments) > 1 and self.segments[-1].base_offset >= offset:
                segment = self.segments.pop()
                segment.delete(close=False)
                self.retire(segment)
            self.active.truncate_to(offset)
            self.log_end_offset = self.active.next_offset
            self.flushed_offset = min(self.flushed_offset, self.log_end_offset)
            self.recovery_point = min(self.recovery_point, self.log_end_offset)
            # The cached position must be the high watermark's, which may sit below the new
            # log end; pointing it at the end let reads bounded by the HW return more.
            self._set_high_watermark(min(self.high_watermark, self.log_end_offset))
            self._dirty = [self.active]
            self.epochs.truncate_from_end(self.log_end_offset)
            self.rebuild_producer_state()
        except OSError as exc:
            raise self.take_offline(f"truncating {self.name} to {offset} failed: {exc}") from exc
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start an empty log at `offset` (Kafka's name): a
        follower whose leader's log starts past this log's end, or whose leader's log
        start falls inside the first batch it would fetch.

        Crash safety: snapshots and the epoch checkpoint go first, then the segments
        (oldest first), and the directory is synced before the new segment is created,
        so a crash leaves the old log, a suffix of it, an empty log, or the new one:
        never a new segment beside old snapshots that describe other data.
        """
        self.check_online()
        if offset < 0:
            raise ValueError(f"cannot start {self.name} at a negative offset {offset}")
        self._truncations += 1
        try:
            self.producer_state.truncate_fully_and_start_at(offset)
            self.epochs.clear()
            self.check_online()
            for segment in self.segments:
                segment.delete(close=False)
                self.retire(segment)
            self.fs.fsync_dir(self.directory)
            segment = LogSegment(self.fs, self.directory, offset, self.config.index_interval_bytes)
            self.fs.fsync_dir(self.directory)
        except OSError as exc:
            raise self.take_offline(
                f"emptying {self.name} to start at {offset} failed: {exc}"
            ) from exc
        self.segments = [segment]
        self.log_end_offset = offset
        if offset != self._log_start_offset:
            self._log_start_offset = offset
            self._log_start_moved()
        self.flushed_offset = self.recovery_point = offset
        self._dirty = []
        self.high_watermark = offset
        self._hw_segment, self._hw_position = segment, 0

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
                    marker = _marker_of(segment.read_bytes(location.position, location.header.size))
                replayed.append((location.header, marker))
        completed = state.replay(replayed)
        state.advance(self.log_end_offset)
        aborted = aborted_txns.index_entries(completed, state.ongoing.values())
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
                e
                for e in aborted
                if e.last_offset >= segment.base_offset and (upper is None or e.last_offset < upper)
            ]
            # An unreadable file (torn by a crash) is rewritten even when it ends up empty:
            # left as it was, every later start would distrust it and replay the whole log.
            if mine or len(kept) != len(segment.txn_index.entries) or not loaded[index]:
                segment.txn_index.rewrite(kept + mine)
        lowered = aborted_txns.clamp_stable_offsets(self.segments)
        if lowered:
            log.warning(
                "%s: %d .txnindex entries (an older recovery's) had a stable offset past a "
                "later aborted transaction's start; lowered",
                self.name,
                lowered,
            )
        return len(replayed)

    def _last_batch(self) -> BatchHeader | None:
        """The header of the log's last batch, or None for an empty log."""
        for segment in reversed(self.segments):
            if segment.size:
                location = segment.find_batch(segment.next_offset - 1)
                return None if location is None else location.header
        return None

    def _all_headers(self) -> Iterator[BatchHeader]:
        """Every batch header, oldest first (the epoch cache's rebuild walks them)."""
        for segment in self.segments:
            for location in segment.read_headers():
                yield location.header

    # ---- transactions ----------------------------------------------------------------

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the oldest open transaction, or the high watermark."""
        first = self.producer_state.first_unstable_offset()
        hw = self.high_watermark
        # A transaction open from below the log start holds it there (Kafka's
        # maybeIncrementFirstUnstableOffset), never below.
        return hw if first is None else min(max(first, self._log_start_offset), hw)

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
        aborted = []
        if completed is not None and completed.aborted:
            aborted.append(_aborted_txn(plan, completed))
        result = self._write([header], batch, plan, aborted=aborted)
        self.markers_written[producer_id] = self.markers_written.get(producer_id, 0) + 1
        return result

    def aborted_transactions(self, fetch_offset: int, read: ReadResult) -> list[AbortedTxn]:
        """What a read_committed fetch that got `read` returns: the aborted transactions
        overlapping [fetch_offset, the end of the batches read) (aborted_txns.py)."""
        segment, region = read.segment, read.region
        if segment is None or region is None:
            return []

        def read_end() -> int:
            if read.end_offset is not None:
                return read.end_offset
            return aborted_txns.end_offset(segment, region.position, region.position + region.size)

        later = self.segments[self.segment_for(segment.base_offset) :]
        return aborted_txns.overlapping(later, fetch_offset, read_end)

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

    def close(self, delay: bool = False) -> bool:
        """Close after a flush: the producer snapshot at the end spares the next start a
        replay. Returns False if that snapshot could not be written (the next start
        replays instead); the caller reports it. With `delay`, the descriptors are closed
        only after the delete delay (close_retired), as a fetch may still be sending
        from them."""
        written = True
        if not self.deleted and self.offline is None:
            try:
                self.producer_state.take_snapshot()
            except OSError:
                written = False
            self.epochs.flush_deferred()
        if delay:
            for segment in self.segments:
                self.retire(segment)
            return written
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


def _marker_of(batch: bytes | bytearray | memoryview) -> tuple[bool, int]:
    """(is it an ABORT, its coordinator epoch) of a control batch, as replay takes it."""
    kind, coordinator_epoch = parse_control_record(batch, verify_crc=False)
    return kind == ControlType.ABORT, coordinator_epoch


def _aborted_txn(plan: AppendPlan, completed: CompletedTxn) -> AbortedTxn:
    """The `.txnindex` entry of an ABORT marker. Its stable offset is where the LSO stands
    once the transaction ended: the oldest still-open transaction's first offset, or just
    past the marker."""
    still_open = [o for p, o in plan.open_transactions().items() if p != completed.producer_id]
    stable = min(still_open) if still_open else completed.last_offset + 1
    return AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset, stable)


def _bases(headers: list[BatchHeader], first: int) -> list[tuple[BatchHeader, int]]:
    out = []
    offset = first
    for header in headers:
        out.append((header, offset))
        offset += header.last_offset_delta + 1
    return out


def partition_dir(root: str, topic: str, partition: int) -> str:
    return os.path.join(root, f"{topic}-{partition}")
