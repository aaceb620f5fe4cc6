"""The log cleaner: compaction for `cleanup.policy=compact` topics.

For each compacted partition whose dirty ratio reaches `min.cleanable.dirty.ratio`, the
cleaner maps every key in the cleanable range (all segments but the active one, minus those
younger than `min.compaction.lag.ms`) to its latest offset, then rewrites each of those
segments keeping only records that are the latest for their key. Tombstones (null values)
are dropped once they are older than `delete.retention.ms`.

Offsets never move: a cleaned batch keeps its base offset and lastOffsetDelta. Only segments
below the last stable offset are cleaned, where every transaction is decided: committed
transactional records compact like plain ones, aborted ones are removed, markers stay. Each
producer's last batch keeps at least one record, so its sequence survives a rebuild of the
producer state from the log; a tombstone stays while an older record of its key is kept that
way. Segments left empty are deleted, except the first (the log start offset stays).

Crash safety: the cleaned copy is written to `<base>.log.cleaned` and fsynced; the segment's
derived indexes are removed; then one atomic rename replaces the `.log`. Recovery deletes a
leftover `.cleaned` file and rebuilds missing indexes, so a crash at any step leaves either
the old or the new segment, never a mix.
"""

from __future__ import annotations

import contextlib
import logging
import os
import weakref
from dataclasses import dataclass

from onceflow.records.batch import BatchHeader
from onceflow.records.builder import rebuild_batch
from onceflow.records.record import Record, decode_records
from onceflow.storage.partition_log import PartitionLog
from onceflow.storage.segment import LogSegment, segment_name

log = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"


@dataclass(frozen=True, slots=True)
class CleanStats:
    segments: int
    bytes_before: int
    bytes_after: int
    records_removed: int


class LogCleaner:
    """Compacts partitions one at a time; keeps each partition's first dirty offset."""

    def __init__(self) -> None:
        # Keyed by the log object, not its directory: a topic deleted and created again
        # under the same name reused the old first dirty offset, so the new log looked clean
        # (dirty ratio 0) until its offsets passed the old one.
        self._first_dirty: weakref.WeakKeyDictionary[PartitionLog, int] = (
            weakref.WeakKeyDictionary()
        )

    def dirty_ratio(self, plog: PartitionLog) -> float:
        closed = plog.segments[:-1]
        total = sum(s.size for s in closed)
        if total == 0:
            return 0.0
        first_dirty = self._first_dirty.get(plog, 0)
        dirty = sum(s.size for s in closed if s.base_offset >= first_dirty)
        return dirty / total

    def needs_cleaning(self, plog: PartitionLog) -> bool:
        cfg = plog.config
        return cfg.cleanup_compact and self.dirty_ratio(plog) >= cfg.min_cleanable_dirty_ratio

    def clean(self, plog: PartitionLog, now_ms: int) -> CleanStats | None:
        """Compact `plog`'s cleanable segments; return what changed, or None."""
        cfg = plog.config
        # Below the last stable offset every transaction is decided, so committed
        # transactional records compact like any other and aborted ones can go.
        cleanable = [
            s
            for s in plog.segments[:-1]
            if s.next_offset <= plog.last_stable_offset
            and now_ms - s.max_timestamp >= cfg.min_compaction_lag_ms
        ]
        # Only a prefix of segments can be cleaned: a younger segment stops the range.
        prefix: list[LogSegment] = []
        for segment in plog.segments[:-1]:
            if segment not in cleanable:
                break
            prefix.append(segment)
        if not prefix:
            return None
        first_dirty = prefix[-1].next_offset  # before cleaning can lower it
        aborted = _Aborted(plog)
        latest = _latest_offsets(prefix, aborted)
        # Only each producer's last batch needs to stay for its sequence (Kafka's rule too).
        # Keeping a record of every idempotent batch kept one record per batch forever, so a
        # compacted topic written by an idempotent producer never shrank below that.
        last_batches = {
            entry.batches[-1].last_offset
            for entry in plog.producer_state.producers.values()
            if entry.batches
        }
        shadowed = _shadowed_keys(prefix, latest, last_batches, aborted)
        horizon = now_ms - cfg.delete_retention_ms
        stats = CleanStats(0, 0, 0, 0)
        for segment in prefix:
            try:
                result, replaced = _clean_segment(
                    plog, segment, latest, shadowed, last_batches, aborted, horizon
                )
            except OSError as exc:
                log.warning("cleaning %s stopped: %s; it is tried again later", plog.name, exc)
                return None
            stats = _add(stats, result)
            if replaced:
                plog.retire(segment)
        _drop_empty_segments(plog, prefix)
        self._first_dirty[plog] = first_dirty
        if stats.records_removed:
            log.info(
                "cleaned %s: %d segments, %d -> %d bytes, %d records removed",
                plog.name,
                stats.segments,
                stats.bytes_before,
                stats.bytes_after,
                stats.records_removed,
            )
        return stats

    def close(self) -> None:
        """Nothing to release: replaced segments are retired through their log, which
        closes them after the file delete delay (a fetch may still read the old file)."""


class _Aborted:
    """Which transactional batches belong to aborted transactions (from the .txnindex)."""

    def __init__(self, plog: PartitionLog) -> None:
        self._ranges: dict[int, list[tuple[int, int]]] = {}
        for segment in plog.segments:
            for entry in segment.txn_index.entries:
                self._ranges.setdefault(entry.producer_id, []).append(
                    (entry.first_offset, entry.last_offset)
                )

    def __call__(self, header: BatchHeader) -> bool:
        return any(
            first <= header.base_offset <= last
            for first, last in self._ranges.get(header.producer_id, ())
        )


def _latest_offsets(segments: list[LogSegment], aborted: _Aborted) -> dict[bytes, int]:
    latest: dict[bytes, int] = {}
    for segment in segments:
        for record in _visible_records(segment, aborted):
            if record.key is not None:
                latest[record.key] = record.offset
    return latest


def _visible_records(segment: LogSegment, aborted: _Aborted) -> list[Record]:
    """Records a read_committed consumer sees: plain and committed transactional ones."""
    out: list[Record] = []
    for location in segment.read_headers():
        header = location.header
        if header.is_control or (header.is_transactional and aborted(header)):
            continue
        out.extend(decode_records(segment.read_bytes(location.position, header.size)))
    return out


def _shadowed_keys(
    segments: list[LogSegment],
    latest: dict[bytes, int],
    last_batches: set[int],
    aborted: _Aborted,
) -> set[bytes]:
    """Keys with an older record that cleaning keeps anyway: the record a producer's last
    batch keeps, or an aborted producer-last batch kept whole.

    A tombstone for such a key must stay. Dropping it once it passed delete.retention.ms
    brought the older value back to life: a key deleted by one producer reappeared with the
    value an idempotent producer had written before the delete.
    """
    shadowed: set[bytes] = set()
    for segment in segments:
        for location in segment.read_headers():
            header = location.header
            if header.is_control or header.last_offset not in last_batches:
                continue
            records = decode_records(segment.read_bytes(location.position, header.size))
            kept_whole = header.is_transactional and aborted(header)
            # Conservative for idempotent batches: their last record may be the one kept.
            candidates = records if kept_whole else records[-1:]
            for record in candidates:
                if record.key is not None and latest.get(record.key, -1) > record.offset:
                    shadowed.add(record.key)
    return shadowed


def _clean_segment(
    plog: PartitionLog,
    segment: LogSegment,
    latest: dict[bytes, int],
    shadowed: set[bytes],
    last_batches: set[int],
    aborted: _Aborted,
    horizon: int,
) -> tuple[CleanStats, bool]:
    """Clean one segment; return the stats and whether the segment was replaced.

    Markers are kept (they are small, and they settle transactional offsets on reload).
    Aborted transactional batches go, except a producer's last batch, which stays whole for
    its sequence numbers. Committed transactional records compact like plain ones.
    """
    parts: list[bytes] = []
    removed = 0
    for location in segment.read_headers():
        header = location.header
        raw = segment.read_bytes(location.position, header.size)
        if header.is_control:
            parts.append(raw)
            continue
        if header.is_transactional and aborted(header):
            if header.last_offset in last_batches:
                parts.append(raw)
            else:
                removed += header.record_count
            continue
        records = decode_records(raw)
        kept = [r for r in records if _keep(r, latest, shadowed, horizon)]
        if not kept and header.has_producer_id and header.last_offset in last_batches:
            # A producer's last batch keeps one record, so its sequence numbers stay in the
            # log and producer state replays the same after cleaning.
            kept = records[-1:]
        removed += len(records) - len(kept)
        if len(kept) == len(records):
            parts.append(raw)
        elif kept:
            parts.append(rebuild_batch(header, kept))
    if removed == 0:
        return CleanStats(1, segment.size, segment.size, 0), False
    before = segment.size
    replacement = _swap_in(plog, segment, b"".join(parts))
    return CleanStats(1, before, replacement.size, removed), True


def _keep(record: Record, latest: dict[bytes, int], shadowed: set[bytes], horizon: int) -> bool:
    if record.key is None:
        return False  # compacted topics reject keyless records; drop any that slipped in
    if latest.get(record.key, -1) > record.offset:
        return False
    return record.value is not None or record.timestamp >= horizon or record.key in shadowed


def _swap_in(plog: PartitionLog, segment: LogSegment, data: bytes) -> LogSegment:
    fs = plog.fs
    directory = plog.directory
    log_path = os.path.join(directory, segment_name(segment.base_offset, ".log"))
    cleaned_path = log_path + CLEANED_SUFFIX
    fs.remove(cleaned_path)
    handle = fs.open(cleaned_path)
    try:
        handle.append(data)
        handle.fsync()
    except OSError:
        # Nothing was replaced yet: drop the copy, the old segment stays as it was, and
        # cleaning is tried again at the next pass.
        handle.close()
        with contextlib.suppress(OSError):
            fs.remove(cleaned_path)
        raise
    handle.close()
    try:
        return _replace(plog, segment, cleaned_path, log_path)
    except OSError as exc:
        raise plog.take_offline(f"replacing a cleaned segment failed: {exc}") from exc


def _replace(
    plog: PartitionLog, segment: LogSegment, cleaned_path: str, log_path: str
) -> LogSegment:
    fs = plog.fs
    directory = plog.directory
    # The old segment stays open (the log retires it, see FILE_DELETE_DELAY_MS):
    # after the rename its descriptor still reads the old, unlinked file.
    fs.remove(segment.offset_index.path)  # derived: rebuilt below, or by recovery
    fs.remove(segment.time_index.path)
    fs.rename(cleaned_path, log_path)
    fs.fsync_dir(directory)
    replacement = LogSegment(fs, directory, segment.base_offset, segment.index_interval)
    replacement.recover()
    # The .txnindex file is untouched (ABORT markers are kept whole) but the new segment
    # object never loaded it: without this, read_committed fetches over this segment lost
    # its aborted transactions until the next restart and returned aborted records.
    replacement.txn_index.entries = list(segment.txn_index.entries)
    # Like Kafka's cleaner, make the rebuilt indexes durable too; otherwise a crash could
    # leave them torn, and they cover data below the recovery point that is not rescanned.
    replacement.fsync()
    index = plog.segments.index(segment)
    plog.segments[index] = replacement
    return replacement


def _drop_empty_segments(plog: PartitionLog, prefix: list[LogSegment]) -> None:
    """Delete closed segments that cleaning left empty, except the first.

    Without this every roll of a compacted topic left an empty .log, .index and .timeindex
    and an open descriptor behind for good (Kafka merges small segments instead), so
    `__consumer_offsets` grew in files and descriptors without bound. Reads skip the offset
    range of a deleted segment as they skip cleaned gaps. The first segment stays so that
    the log start offset does not move.
    """
    bases = {s.base_offset for s in prefix[1:]}
    for segment in [s for s in plog.segments[1:-1] if s.base_offset in bases and s.size == 0]:
        plog.segments.remove(segment)
        segment.delete()


def _add(a: CleanStats, b: CleanStats) -> CleanStats:
    return CleanStats(
        a.segments + b.segments,
        a.bytes_before + b.bytes_before,
        a.bytes_after + b.bytes_after,
        a.records_removed + b.records_removed,
    )
