"""Invariants of a partition log rebuilt from its files, shared by simulation and property tests.

Everything here reads through the public storage API or the raw segment bytes; nothing
trusts the indexes it is checking.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from onceflow.records.batch import BatchHeader, assign_offsets, scan_batches
from onceflow.storage.fs import SimFileSystem
from onceflow.storage.indexes.offset import ENTRY as OFFSET_ENTRY
from onceflow.storage.indexes.time import ENTRY as TIME_ENTRY
from onceflow.storage.partition_log import PartitionLog
from onceflow.storage.segment import LogSegment


@dataclass(frozen=True, slots=True)
class StoredBatch:
    base: int
    next: int
    data: bytes  # as stored: base offset and leader epoch stamped in


@dataclass
class Journal:
    """What a test did to one partition: every batch it tried to append, and what was acked.

    A batch is journaled *before* the append runs, so a crash inside the append still knows
    which bytes may have reached the file.
    """

    attempted: dict[int, StoredBatch] = field(default_factory=dict)  # by base offset
    acked: int = 0  # every offset below this was flushed before the crash
    max_log_start: int = 0  # retention may have moved the log start up to here, no further

    def intend(self, plog: PartitionLog, data: bytes, headers: list[BatchHeader]) -> None:
        stored = assign_offsets(data, headers, plog.log_end_offset, plog.leader_epoch)
        offset = plog.log_end_offset
        pos = 0
        for header in headers:
            nxt = offset + header.last_offset_delta + 1
            self.attempted[offset] = StoredBatch(
                offset, nxt, bytes(stored[pos : pos + header.size])
            )
            offset, pos = nxt, pos + header.size

    def forget_from(self, offset: int) -> None:
        """After a crash: batches at or past the recovered log end were lost (not acked)."""
        for base in [b for b in self.attempted if b >= offset]:
            del self.attempted[base]


def stored_batches(plog: PartitionLog) -> list[StoredBatch]:
    """Every batch in the segment files, asserting that each file holds only whole batches."""
    out: list[StoredBatch] = []
    for segment in plog.segments:
        raw = segment.read_bytes(0, segment.size)
        assert len(raw) == segment.size
        found, end = scan_batches(raw)
        assert end == segment.size, (
            f"segment {segment.base_offset}: bytes {end}..{segment.size} are not a whole, "
            "valid batch (a torn or corrupt tail survived recovery)"
        )
        for b in found:
            h = b.header
            out.append(
                StoredBatch(h.base_offset, h.next_offset, raw[b.position : b.position + h.size])
            )
    return out


def check_log(plog: PartitionLog, journal: Journal, *, recovered: bool = True) -> None:
    """The recovery guarantees, checked against the journal of what was written."""
    batches = stored_batches(plog)
    start, end = plog.log_start_offset, plog.log_end_offset

    # Offsets are contiguous from the log start, across segment boundaries too.
    expected_next = start
    for batch in batches:
        assert batch.base == expected_next, f"offset gap or overlap at {expected_next}"
        expected_next = batch.next
    assert end == expected_next, "log end offset is one past the last batch"
    for prev, nxt in itertools.pairwise(plog.segments):
        assert nxt.base_offset == prev.next_offset, "segments tile the offsets"
    for segment in plog.segments:
        assert segment.next_offset >= segment.base_offset

    # Every surviving batch is byte for byte one that was appended: nothing invented.
    for batch in batches:
        wanted = journal.attempted.get(batch.base)
        assert wanted is not None, f"batch at {batch.base} was never appended"
        assert batch == wanted, f"batch at {batch.base} differs from what was appended"

    # Every acknowledged batch not yet due for deletion survived intact.
    assert start <= journal.max_log_start, f"log start {start} passed {journal.max_log_start}"
    assert end >= journal.acked, f"acked offsets below {journal.acked} lost (end {end})"
    held = {b.base for b in batches}
    for base, wanted in journal.attempted.items():
        if wanted.next <= journal.acked and base >= start:
            assert base in held, f"acked batch at {base} is missing"

    assert plog.high_watermark <= end
    assert plog.flushed_offset <= end
    if recovered:
        assert plog.high_watermark == end, "recovery makes what it validated visible"
    check_indexes_match_rebuild(plog)
    check_reads(plog, batches)


def check_reads(plog: PartitionLog, batches: list[StoredBatch]) -> None:
    """A read at any offset returns whole batches, starting at the one holding it."""
    hw = plog.high_watermark
    visible = [b for b in batches if b.next <= hw]
    for i, batch in enumerate(visible):
        for offset in {batch.base, batch.next - 1}:
            region = plog.read(offset, 1 << 30, hw, True).region
            assert region is not None, f"nothing read at {offset}"
            data = region.read()
            found, stop = scan_batches(data)
            assert stop == len(data), "a read returned a partial batch"
            assert found and found[0].header.base_offset == batch.base
            got = [data[b.position : b.position + b.header.size] for b in found]
            assert got == [b.data for b in visible[i : i + len(got)]]
    assert plog.read(hw, 1 << 20, hw, True).region is None


def index_snapshot(segment: LogSegment) -> tuple[object, ...]:
    return (
        segment.next_offset,
        segment.size,
        segment.max_timestamp,
        segment.offset_of_max_timestamp,
        list(segment.offset_index.offsets),
        list(segment.offset_index.positions),
        list(segment.time_index.timestamps),
        list(segment.time_index.offsets),
    )


def check_indexes_match_rebuild(plog: PartitionLog) -> None:
    """In-memory and on-disk indexes equal what a rebuild from the .log alone produces."""
    for segment in plog.segments:
        scratch = SimFileSystem()
        scratch.makedirs(segment.directory)
        handle = scratch.open(segment.log_path)
        handle.append(segment.read_bytes(0, segment.size))
        rebuilt = LogSegment(
            scratch, segment.directory, segment.base_offset, segment.index_interval
        )
        _, cut = rebuilt.recover()
        assert cut == 0
        assert index_snapshot(segment) == index_snapshot(rebuilt), (
            f"segment {segment.base_offset}: indexes differ from a rebuild"
        )
        fs = segment.fs
        if fs.exists(segment.offset_index.path):
            on_disk = fs.read_file(segment.offset_index.path)
            assert on_disk == b"".join(
                OFFSET_ENTRY.pack(o - segment.base_offset, p)
                for o, p in zip(
                    segment.offset_index.offsets, segment.offset_index.positions, strict=True
                )
            ), f"segment {segment.base_offset}: .index file differs from memory"
        if fs.exists(segment.time_index.path):
            on_disk = fs.read_file(segment.time_index.path)
            assert on_disk == b"".join(
                TIME_ENTRY.pack(t, o - segment.base_offset)
                for t, o in zip(
                    segment.time_index.timestamps, segment.time_index.offsets, strict=True
                )
            ), f"segment {segment.base_offset}: .timeindex file differs from memory"
