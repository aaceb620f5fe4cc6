"""Crash at every step of a log clean, reopen the partition from its files, check invariants.

A clean writes `<base>.log.cleaned`, fsyncs it, deletes the segment's indexes, renames the
cleaned file over the `.log`, syncs the directory and rebuilds the indexes; segments left
empty are deleted. The scenario runs once without a crash to learn the files a finished clean
leaves and to count its mutating steps, then once per step and seed with
`SimFileSystem(crash_at_step=...)`: the step raises before it runs, `crash()` drops every
unsynced byte and name, and `open_partition` reopens the directory. Then:

- each segment file is byte for byte the old segment or the cleaned one, never a mix;
- every surviving record sits at its original offset, and the key -> latest value table a
  consumer rebuilds is the one before the clean;
- no `.cleaned` file is left; the indexes are a rebuild from the .log alone, or a prefix of
  one (a crash while the cleaner rebuilds them can cut them short: a sparser index, still
  correct, for a segment below the recovery point that is not rescanned);
- the producer state and the aborted transactions are what they were;
- cleaning again finishes the job: the files end as a clean without a crash leaves them.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any

import pytest

from onceflow.clock import ManualClock
from onceflow.records.batch import scan_batches, validate_produced_batches
from onceflow.records.builder import build_batch
from onceflow.records.record import Record, decode_records
from onceflow.storage.cleaner import LogCleaner
from onceflow.storage.fs import SimFileSystem, SimulatedCrash
from onceflow.storage.indexes.offset import ENTRY as OFFSET_ENTRY
from onceflow.storage.indexes.time import ENTRY as TIME_ENTRY
from onceflow.storage.partition_log import LogConfig, PartitionLog
from onceflow.storage.recovery import open_partition
from onceflow.storage.segment import LogSegment

DIR = "/data/c-0"
SEEDS = (0, 1, 2)
MINUTE = 60_000
CONFIG = LogConfig(
    segment_bytes=350,
    index_interval_bytes=40,
    cleanup_compact=True,
    cleanup_delete=False,
    delete_retention_ms=MINUTE,
)
TXN_PID = 500
IDEMPOTENT_PID = 77


@dataclass
class World:
    fs: SimFileSystem
    clock: ManualClock
    plog: PartitionLog
    written: dict[int, tuple[bytes | None, bytes | None]]


def build_world(seed: int) -> World:
    """A compacted partition with overwrites, tombstones, an idempotent producer, and a
    committed and an aborted transaction, all flushed, over several closed segments."""
    fs = SimFileSystem(seed=seed)
    clock = ManualClock()
    plog, _ = open_partition(fs, DIR, "c", 0, CONFIG, clock, 0, False)
    written: dict[int, tuple[bytes | None, bytes | None]] = {}
    seqs: dict[int, int] = {}

    def put(records: list[tuple[bytes, bytes | None]], pid: int = -1, txn: bool = False) -> None:
        extra: dict[str, Any] = {}
        if pid >= 0:
            seq = seqs.get(pid, 0)
            seqs[pid] = seq + len(records)
            extra = {"producer_id": pid, "producer_epoch": 0, "base_sequence": seq}
        data = build_batch(
            [(k, v, ()) for k, v in records],
            timestamp_ms=clock.now_ms(),
            transactional=txn,
            **extra,
        )
        result = plog.append_batches(data, validate_produced_batches(data, 1 << 20))
        for i, kv in enumerate(records):
            written[result.first_offset + i] = kv

    for r in range(4):
        for k in range(3):
            put([(b"k%d" % k, b"v%d-%d" % (k, r))])
    put([(b"k0", b"idem-0"), (b"k1", b"idem-1")], pid=IDEMPOTENT_PID)
    put([(b"gone", b"soon")])
    put([(b"k2", b"txn-commit")], pid=TXN_PID, txn=True)
    plog.append_marker(TXN_PID, 0, 0, commit=True)
    put([(b"k1", b"txn-abort")], pid=TXN_PID, txn=True)
    plog.append_marker(TXN_PID, 0, 0, commit=False)
    put([(b"gone", None)])
    clock.advance(2 * MINUTE)  # the tombstone is past delete.retention.ms
    for r in range(4, 8):
        for k in range(3):
            put([(b"k%d" % k, b"v%d-%d" % (k, r))])
    put([(b"last", b"in-the-active-segment")])
    plog.flush()
    assert len(plog.segments) >= 4
    return World(fs, clock, plog, written)


def segment_files(fs: SimFileSystem) -> dict[int, bytes]:
    return {
        int(name[:-4]): fs.read_file(os.path.join(DIR, name))
        for name in fs.listdir(DIR)
        if name.endswith(".log")
    }


def committed_table(plog: PartitionLog) -> dict[bytes, bytes]:
    """The key -> latest value a read_committed consumer rebuilds from the files."""
    aborted = {first for _, first in plog.aborted_between(0, plog.high_watermark)}
    state: dict[bytes, bytes] = {}
    for segment in plog.segments:
        raw = segment.read_bytes(0, segment.size)
        found, end = scan_batches(raw)
        assert end == len(raw), f"segment {segment.base_offset} holds a partial batch"
        for b in found:
            if b.header.is_control or b.header.base_offset in aborted:
                continue
            for r in decode_records(raw[b.position : b.position + b.header.size]):
                assert r.key is not None
                if r.value is None:
                    state.pop(r.key, None)
                else:
                    state[r.key] = r.value
    return state


def all_records(plog: PartitionLog) -> list[Record]:
    out: list[Record] = []
    for segment in plog.segments:
        for location in segment.read_headers():
            if not location.header.is_control:
                out += decode_records(segment.read_bytes(location.position, location.header.size))
    return out


@dataclass(frozen=True)
class Reference:
    before_files: dict[int, bytes]
    after_files: dict[int, bytes]
    table: dict[bytes, bytes]
    aborted: list[tuple[int, int]]
    producers: dict[int, int]  # producer id -> last sequence
    log_end: int
    steps: int


def reference() -> Reference:
    world = build_world(seed=0)
    plog = world.plog
    before = segment_files(world.fs)
    table = committed_table(plog)
    aborted = plog.aborted_between(0, plog.high_watermark)
    producers = {pid: e.last_seq for pid, e in plog.producer_state.producers.items()}
    start = world.fs.steps
    stats = LogCleaner().clean(plog, world.clock.now_ms())
    assert stats is not None and stats.records_removed > 0
    after = segment_files(world.fs)
    assert committed_table(plog) == table
    assert b"gone" not in table
    assert len(after) < len(before), "the scenario empties a segment"
    return Reference(
        before, after, table, aborted, producers, plog.log_end_offset, world.fs.steps - start
    )


REFERENCE = reference()


Written = dict[int, tuple[bytes | None, bytes | None]]


def check_recovered(plog: PartitionLog, fs: SimFileSystem, written: Written) -> None:
    ref = REFERENCE
    assert not [n for n in fs.listdir(DIR) if ".cleaned" in n], "a .cleaned file survived"
    files = segment_files(fs)
    for base, data in files.items():
        old, new = ref.before_files.get(base), ref.after_files.get(base, b"")
        assert data in (old, new), f"segment {base} is neither the old nor the cleaned one"
    for base in ref.before_files.keys() - files.keys():
        assert ref.after_files.get(base, b"") == b"", f"segment {base} with data was lost"
    assert plog.log_start_offset == 0
    assert plog.log_end_offset == plog.high_watermark == ref.log_end
    for r in all_records(plog):
        assert written[r.offset] == (r.key, r.value), f"record at {r.offset} moved"
    assert committed_table(plog) == ref.table
    assert plog.aborted_between(0, plog.high_watermark) == ref.aborted
    producers = {pid: e.last_seq for pid, e in plog.producer_state.producers.items()}
    assert producers == ref.producers
    check_indexes_prefix_of_rebuild(plog)
    check_reads(plog)


def check_indexes_prefix_of_rebuild(plog: PartitionLog) -> None:
    """Each segment's state equals a rebuild from its .log; its index entries, in memory and
    on disk alike, are the rebuild's entries or a prefix of them."""
    for segment in plog.segments:
        scratch = SimFileSystem()
        scratch.makedirs(segment.directory)
        scratch.open(segment.log_path).append(segment.read_bytes(0, segment.size))
        rebuilt = LogSegment(
            scratch, segment.directory, segment.base_offset, segment.index_interval
        )
        assert rebuilt.recover()[1] == 0
        where = f"segment {segment.base_offset}"
        assert (
            segment.next_offset,
            segment.size,
            segment.max_timestamp,
            segment.offset_of_max_timestamp,
        ) == (
            rebuilt.next_offset,
            rebuilt.size,
            rebuilt.max_timestamp,
            rebuilt.offset_of_max_timestamp,
        ), where
        offsets = list(
            zip(segment.offset_index.offsets, segment.offset_index.positions, strict=True)
        )
        full = list(zip(rebuilt.offset_index.offsets, rebuilt.offset_index.positions, strict=True))
        assert offsets == full[: len(offsets)], f"{where}: .index is not a prefix of a rebuild"
        times = list(zip(segment.time_index.timestamps, segment.time_index.offsets, strict=True))
        full_times = list(
            zip(rebuilt.time_index.timestamps, rebuilt.time_index.offsets, strict=True)
        )
        assert times == full_times[: len(times)], f"{where}: .timeindex is not a prefix"
        fs = segment.fs
        if fs.exists(segment.offset_index.path):
            assert fs.read_file(segment.offset_index.path) == b"".join(
                OFFSET_ENTRY.pack(o - segment.base_offset, p) for o, p in offsets
            ), f"{where}: .index file differs from memory"
        if fs.exists(segment.time_index.path):
            assert fs.read_file(segment.time_index.path) == b"".join(
                TIME_ENTRY.pack(t, o - segment.base_offset) for t, o in times
            ), f"{where}: .timeindex file differs from memory"


def check_reads(plog: PartitionLog) -> None:
    """A read at any offset returns whole, CRC-valid batches from the next record on."""
    hw = plog.high_watermark
    for offset in range(plog.log_start_offset, hw):
        region = plog.read(offset, 1 << 20, hw, True).region
        assert region is not None, f"nothing read at {offset}"
        data = region.read()
        found, end = scan_batches(data)
        assert end == len(data) and found, f"a read at {offset} returned a partial batch"
        assert found[0].header.last_offset >= offset


def test_the_reference_clean_touches_every_kind_of_step() -> None:
    assert REFERENCE.steps > 10


@pytest.mark.parametrize("seed", SEEDS)
def test_crash_at_every_step_of_a_clean_leaves_old_or_new_segments(seed: int) -> None:
    for step in range(1, REFERENCE.steps + 2):
        world = build_world(seed)
        fs = world.fs
        recovery_point = world.plog.flushed_offset
        fs.crash_at_step = fs.steps + step
        crashed = False
        try:
            LogCleaner().clean(world.plog, world.clock.now_ms())
        except SimulatedCrash:
            crashed = True
        assert crashed == (step <= REFERENCE.steps)
        fs.crash()
        for clean_shutdown in (False, True):
            # A crash never leaves the clean-shutdown marker; the second open also checks
            # that the files recovery left are sane enough to trust on a clean start.
            plog, _ = open_partition(
                fs, DIR, "c", 0, CONFIG, world.clock, recovery_point, clean_shutdown
            )
            try:
                check_recovered(plog, fs, world.written)
            except AssertionError as exc:
                raise AssertionError(f"seed {seed}, crash at step {step}: {exc}") from exc
            plog.close()

        # Cleaning again finishes the job.
        plog, _ = open_partition(fs, DIR, "c", 0, CONFIG, world.clock, recovery_point, True)
        with contextlib.suppress(SimulatedCrash):
            LogCleaner().clean(plog, world.clock.now_ms())
        assert segment_files(fs) == REFERENCE.after_files, f"seed {seed}, step {step}"
        check_recovered(plog, fs, world.written)
