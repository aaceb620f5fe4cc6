"""Open a partition's segments after a clean shutdown or a crash.

After a clean shutdown the index files are trusted (if sane). After a crash every segment
from the one holding the recovery point onward is validated batch by batch: a torn or
corrupt tail is truncated and later segments are deleted, because nothing after a hole can
be trusted. Indexes are derived data, rebuilt whenever they are missing or wrong.

The log start offset is the checkpointed one (DeleteRecords moved it), or the first
segment's base if higher. A log that ends below it (its files were lost) starts empty
there, as Kafka's loader does: deleted records never come back.
"""

from __future__ import annotations

import itertools
import logging
import os
from dataclasses import dataclass

from onceflow.clock import Clock
from onceflow.storage.fs import FileSystem
from onceflow.storage.partition_log import LogConfig, PartitionLog
from onceflow.storage.segment import LogSegment

log = logging.getLogger(__name__)

# Left behind by an interrupted operation; never the truth.
_STRAY_SUFFIXES = (".tmp", ".cleaned", ".deleted")


@dataclass(frozen=True, slots=True)
class RecoveryStats:
    segments_scanned: int
    bytes_truncated: int
    segments_deleted: int
    batches_replayed: int = 0  # producer-state replay after the newest usable snapshot


def open_partition(
    fs: FileSystem,
    directory: str,
    topic: str,
    partition: int,
    config: LogConfig,
    clock: Clock,
    recovery_point: int,
    clean_shutdown: bool,
    log_start_offset: int = 0,
) -> tuple[PartitionLog, RecoveryStats]:
    fs.makedirs(directory)
    names = fs.listdir(directory)
    for name in names:
        if name.endswith(_STRAY_SUFFIXES):
            fs.remove(os.path.join(directory, name))
    bases = sorted(int(n[:-4]) for n in names if n.endswith(".log") and n[:-4].isdigit())
    # Orphan indexes of a segment whose .log is gone are removed too.
    for name in names:
        stem, _, suffix = name.partition(".")
        if (
            suffix in ("index", "timeindex", "txnindex")
            and stem.isdigit()
            and int(stem) not in bases
        ):
            fs.remove(os.path.join(directory, name))
    interval = config.index_interval_bytes
    segments = [LogSegment(fs, directory, base, interval) for base in bases]
    if not segments:
        segments = [LogSegment(fs, directory, 0, interval)]
        fs.fsync_dir(directory)

    scanned = truncated = deleted = 0
    needs_scan_from = (
        len(segments) if clean_shutdown else _first_unrecovered(segments, recovery_point)
    )
    i = 0
    while i < len(segments):
        segment = segments[i]
        if i < needs_scan_from and segment.load_indexes():
            i += 1
            continue
        _, cut = segment.recover()
        scanned += 1
        truncated += cut
        if cut and i + 1 < len(segments):
            # Data after a torn or corrupt batch cannot be trusted.
            for later in segments[i + 1 :]:
                later.delete()
                deleted += 1
            del segments[i + 1 :]
        i += 1
    # Each segment must start where the previous one ended, or offsets would repeat.
    for prev, nxt in itertools.pairwise(segments):
        if nxt.base_offset < prev.next_offset:
            log.error(
                "%s-%d: segment %d overlaps the previous one", topic, partition, nxt.base_offset
            )
    if truncated or deleted:
        log.warning(
            "%s-%d: recovery truncated %d bytes and deleted %d segments",
            topic,
            partition,
            truncated,
            deleted,
        )
    plog = PartitionLog(
        fs,
        directory,
        topic,
        partition,
        config,
        clock,
        segments,
        segments[-1].next_offset
        if clean_shutdown
        else min(recovery_point, segments[-1].next_offset),
        log_start_offset=min(log_start_offset, segments[-1].next_offset),
    )
    if not clean_shutdown:
        plog.flush()  # what recovery validated becomes durable before anyone reads it
    replayed = plog.rebuild_producer_state()
    if log_start_offset > plog.log_end_offset:
        log.warning(
            "%s-%d: the log ends at %d, below its log start offset %d: starting it empty there",
            topic,
            partition,
            plog.log_end_offset,
            log_start_offset,
        )
        plog.truncate_fully_and_start_at(log_start_offset)
    return plog, RecoveryStats(scanned, truncated, deleted, replayed)


def _first_unrecovered(segments: list[LogSegment], recovery_point: int) -> int:
    """Index of the segment holding the recovery point: scanning starts there."""
    for i in range(len(segments) - 1, -1, -1):
        if segments[i].base_offset <= recovery_point:
            return i
    return 0
