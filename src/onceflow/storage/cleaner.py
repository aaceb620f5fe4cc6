"""The log cleaner: compaction for `cleanup.policy=compact` topics.

For each compacted partition whose dirty ratio reaches `min.cleanable.dirty.ratio`, the
cleaner maps every key in the cleanable range (all segments but the active one, minus those
younger than `min.compaction.lag.ms`) to its latest offset, then rewrites each of those
segments keeping only records that are the latest for their key. Tombstones (null values)
are dropped once they are older than `delete.retention.ms`.

Offsets never move: a cleaned batch keeps its base offset and lastOffsetDelta. Batches of
transactions and control batches are kept whole (transactions decide their fate).

Crash safety: the cleaned copy is written to `<base>.log.cleaned` and fsynced; the segment's
derived indexes are removed; then one atomic rename replaces the `.log`. Recovery deletes a
leftover `.cleaned` file and rebuilds missing indexes, so a crash at any step leaves either
the old or the new segment, never a mix.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

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
        self._first_dirty: dict[str, int] = {}

    def dirty_ratio(self, plog: PartitionLog) -> float:
        closed = plog.segments[:-1]
        total = sum(s.size for s in closed)
        if total == 0:
            return 0.0
        first_dirty = self._first_dirty.get(plog.directory, 0)
        dirty = sum(s.size for s in closed if s.base_offset >= first_dirty)
        return dirty / total

    def needs_cleaning(self, plog: PartitionLog) -> bool:
        cfg = plog.config
        return cfg.cleanup_compact and self.dirty_ratio(plog) >= cfg.min_cleanable_dirty_ratio

    def clean(self, plog: PartitionLog, now_ms: int) -> CleanStats | None:
        """Compact `plog`'s cleanable segments; return what changed, or None."""
        cfg = plog.config
        cleanable = [
            s
            for s in plog.segments[:-1]
            if s.next_offset <= plog.high_watermark
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
        latest = _latest_offsets(prefix)
        horizon = now_ms - cfg.delete_retention_ms
        stats = CleanStats(0, 0, 0, 0)
        for segment in prefix:
            stats = _add(stats, _clean_segment(plog, segment, latest, horizon))
        self._first_dirty[plog.directory] = prefix[-1].next_offset
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


def _latest_offsets(segments: list[LogSegment]) -> dict[bytes, int]:
    latest: dict[bytes, int] = {}
    for segment in segments:
        for record in _plain_records(segment):
            if record.key is not None:
                latest[record.key] = record.offset
    return latest


def _plain_records(segment: LogSegment) -> list[Record]:
    out: list[Record] = []
    for location in segment.read_headers():
        header = location.header
        if header.is_control or header.is_transactional:
            continue
        out.extend(decode_records(segment.read_bytes(location.position, header.size)))
    return out


def _clean_segment(
    plog: PartitionLog, segment: LogSegment, latest: dict[bytes, int], horizon: int
) -> CleanStats:
    parts: list[bytes] = []
    removed = 0
    for location in segment.read_headers():
        header = location.header
        raw = segment.read_bytes(location.position, header.size)
        if header.is_control or header.is_transactional:
            parts.append(raw)
            continue
        records = decode_records(raw)
        kept = [r for r in records if _keep(r, latest, horizon)]
        if not kept and header.has_producer_id:
            # An idempotent producer's batch keeps one record, so its sequence numbers stay
            # in the log and producer state replays the same after cleaning.
            kept = records[-1:]
        removed += len(records) - len(kept)
        if len(kept) == len(records):
            parts.append(raw)
        elif kept:
            parts.append(rebuild_batch(header, kept))
    if removed == 0:
        return CleanStats(1, segment.size, segment.size, 0)
    before = segment.size
    replacement = _swap_in(plog, segment, b"".join(parts))
    return CleanStats(1, before, replacement.size, removed)


def _keep(record: Record, latest: dict[bytes, int], horizon: int) -> bool:
    if record.key is None:
        return False  # compacted topics reject keyless records; drop any that slipped in
    if latest.get(record.key, -1) > record.offset:
        return False
    return record.value is not None or record.timestamp >= horizon


def _swap_in(plog: PartitionLog, segment: LogSegment, data: bytes) -> LogSegment:
    fs = plog.fs
    directory = plog.directory
    log_path = os.path.join(directory, segment_name(segment.base_offset, ".log"))
    cleaned_path = log_path + CLEANED_SUFFIX
    fs.remove(cleaned_path)
    handle = fs.open(cleaned_path)
    handle.append(data)
    handle.fsync()
    handle.close()
    segment.close()
    fs.remove(segment.offset_index.path)  # derived: rebuilt below, or by recovery
    fs.remove(segment.time_index.path)
    fs.rename(cleaned_path, log_path)
    fs.fsync_dir(directory)
    replacement = LogSegment(fs, directory, segment.base_offset, segment.index_interval)
    replacement.recover()
    index = plog.segments.index(segment)
    plog.segments[index] = replacement
    return replacement


def _add(a: CleanStats, b: CleanStats) -> CleanStats:
    return CleanStats(
        a.segments + b.segments,
        a.bytes_before + b.bytes_before,
        a.bytes_after + b.bytes_after,
        a.records_removed + b.records_removed,
    )
