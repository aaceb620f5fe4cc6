"""The log cleaner: what compaction keeps, what it removes, and what it never touches."""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tests.simulation.storage_checks import check_indexes_match_rebuild

from onceflow.clock import ManualClock
from onceflow.records.batch import BatchHeader, scan_batches, validate_produced_batches
from onceflow.records.builder import build_batch
from onceflow.records.compression import Compression
from onceflow.records.record import Record, decode_records
from onceflow.storage.cleaner import LogCleaner
from onceflow.storage.fs import FileSystem, RealFileSystem, SimFileSystem
from onceflow.storage.partition_log import FILE_DELETE_DELAY_MS, LogConfig, PartitionLog
from onceflow.storage.recovery import open_partition

DIR = "/data/c-0"
SECOND = 1000
MINUTE = 60 * SECOND


def compact_config(**overrides: object) -> LogConfig:
    settings: dict[str, object] = {
        "segment_bytes": 400,
        "index_interval_bytes": 64,
        "cleanup_compact": True,
        "cleanup_delete": False,
        "delete_retention_ms": MINUTE,
        "min_compaction_lag_ms": 0,
        "min_cleanable_dirty_ratio": 0.5,
    }
    settings.update(overrides)
    return LogConfig(**settings)  # type: ignore[arg-type]


def open_log(
    fs: FileSystem | None = None,
    clock: ManualClock | None = None,
    directory: str = DIR,
    clean_shutdown: bool = False,
    **overrides: object,
) -> PartitionLog:
    plog, _ = open_partition(
        fs or SimFileSystem(),
        directory,
        "c",
        0,
        compact_config(**overrides),
        clock or ManualClock(),
        0,
        clean_shutdown,
    )
    return plog


@dataclass
class Producers:
    """Next sequence per idempotent producer id (epoch 0)."""

    next_seq: dict[int, int] = field(default_factory=dict)

    def batch_fields(self, producer_id: int, count: int) -> dict[str, Any]:
        seq = self.next_seq.get(producer_id, 0)
        self.next_seq[producer_id] = seq + count
        return {"producer_id": producer_id, "producer_epoch": 0, "base_sequence": seq}


def put(
    plog: PartitionLog,
    records: Sequence[tuple[bytes | None, bytes | None]],
    *,
    flush: bool = True,
    **batch: Any,
) -> tuple[int, int]:
    """Append one batch of (key, value) records; return its (first, last) offsets."""
    data = build_batch(
        [(k, v, ()) for k, v in records],
        timestamp_ms=plog.clock.now_ms(),
        **batch,
    )
    result = plog.append_batches(data, validate_produced_batches(data, 1 << 22))
    if flush:
        plog.flush()
    return result.first_offset, result.last_offset


def stored(plog: PartitionLog) -> list[tuple[BatchHeader, bytes]]:
    """(header, bytes) of every batch in the segment files, each file whole batches only."""
    out: list[tuple[BatchHeader, bytes]] = []
    for segment in plog.segments:
        raw = segment.read_bytes(0, segment.size)
        found, end = scan_batches(raw)
        assert end == segment.size, f"segment {segment.base_offset} holds a partial batch"
        out += [(b.header, raw[b.position : b.position + b.header.size]) for b in found]
    return out


def records_of(plog: PartitionLog) -> list[Record]:
    """Every data record in the files, CRC checked, in offset order."""
    out: list[Record] = []
    for header, raw in stored(plog):
        if not header.is_control:
            out += decode_records(raw, verify_crc=True)
    offsets = [r.offset for r in out]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    return out


def fetched(plog: PartitionLog) -> list[Record]:
    """What a consumer reading from the log start gets: whole, CRC-valid batches only."""
    out: list[Record] = []
    offset = plog.log_start_offset
    hw = plog.high_watermark
    while offset < hw:
        region = plog.read(offset, 1 << 20, hw, True).region
        if region is None:
            break
        data = region.read()
        found, end = scan_batches(data)
        assert end == len(data), "a read returned a partial batch"
        for b in found:
            batch = data[b.position : b.position + b.header.size]
            if not b.header.is_control:
                out += [r for r in decode_records(batch, verify_crc=True) if r.offset >= offset]
            offset = b.header.next_offset
    return out


def table(records: list[Record]) -> dict[bytes, bytes]:
    """The key -> latest value a compacted topic stands for (tombstones delete)."""
    state: dict[bytes, bytes] = {}
    for r in records:
        assert r.key is not None
        if r.value is None:
            state.pop(r.key, None)
        else:
            state[r.key] = r.value
    return state


def closed_records(plog: PartitionLog) -> list[Record]:
    end = plog.active.base_offset
    return [r for r in records_of(plog) if r.offset < end]


def fill(plog: PartitionLog, rounds: int, keys: int = 3) -> dict[int, tuple[bytes, bytes]]:
    """`rounds` updates of each of `keys` keys, one record per batch; offset -> (key, value)."""
    written: dict[int, tuple[bytes, bytes]] = {}
    for r in range(rounds):
        for k in range(keys):
            key, value = b"k%d" % k, b"v%d-%d" % (k, r)
            first, _ = put(plog, [(key, value)])
            written[first] = (key, value)
    return written


# ---- what compaction keeps -----------------------------------------------------------------


def test_only_the_latest_record_per_key_survives_in_closed_segments() -> None:
    plog = open_log()
    written = fill(plog, rounds=20)
    assert len(plog.segments) > 3
    before = records_of(plog)
    stats = LogCleaner().clean(plog, plog.clock.now_ms())
    assert stats is not None and stats.records_removed > 0
    assert stats.bytes_after < stats.bytes_before

    after = records_of(plog)
    assert table(after) == table(before)
    keys = [r.key for r in closed_records(plog)]
    assert len(keys) == len(set(keys)), "a closed segment still holds an older value of a key"
    # Offsets never move: each survivor sits at the offset it was written at.
    for r in after:
        assert r.key is not None and r.value is not None
        assert written[r.offset] == (r.key, r.value)
    # ... so a consumer sees gaps, and reads the same as the files hold.
    offsets = [r.offset for r in fetched(plog)]
    assert offsets == [r.offset for r in after]
    assert plog.log_start_offset == 0
    assert offsets[0] > 0, "the first records were removed: the consumer skips ahead"
    assert len(offsets) < plog.log_end_offset
    assert plog.log_end_offset == 60


def test_the_active_segment_is_never_cleaned() -> None:
    plog = open_log(segment_bytes=1 << 20)
    fill(plog, rounds=10)
    assert len(plog.segments) == 1
    assert LogCleaner().clean(plog, plog.clock.now_ms()) is None
    assert len(records_of(plog)) == 30
    # Roll: the duplicates in the new active segment stay until it is closed.
    plog.roll()
    fill(plog, rounds=3)
    LogCleaner().clean(plog, plog.clock.now_ms())
    active = [r for r in records_of(plog) if r.offset >= plog.active.base_offset]
    assert len(active) == 9


def test_only_data_below_the_high_watermark_is_cleaned() -> None:
    plog = open_log()
    for r in range(10):
        put(plog, [(b"k", b"v%d" % r)], flush=False)  # durable mode: HW waits for the flush
    assert len(plog.segments) > 1
    assert plog.high_watermark == 0
    cleaner = LogCleaner()
    assert cleaner.clean(plog, plog.clock.now_ms()) is None
    plog.flush()
    stats = cleaner.clean(plog, plog.clock.now_ms())
    assert stats is not None and stats.records_removed > 0


def test_tombstones_stay_until_delete_retention_then_go() -> None:
    clock = ManualClock()
    plog = open_log(clock=clock, delete_retention_ms=10 * MINUTE)
    put(plog, [(b"gone", b"1")])
    put(plog, [(b"kept", b"1")])
    tomb, _ = put(plog, [(b"gone", None)])
    fill(plog, rounds=8)  # closes the segment holding the tombstone
    cleaner = LogCleaner()
    cleaner.clean(plog, clock.now_ms())
    after = records_of(plog)
    assert [r.offset for r in after if r.key == b"gone"] == [tomb], "the tombstone stays"
    assert table(after).get(b"kept") == b"1"

    clock.advance(10 * MINUTE)  # exactly delete.retention.ms old: still kept
    cleaner.clean(plog, clock.now_ms())
    assert [r.offset for r in records_of(plog) if r.key == b"gone"] == [tomb]

    clock.advance(1)
    cleaner.clean(plog, clock.now_ms())
    assert [r for r in records_of(plog) if r.key == b"gone"] == []
    assert table(records_of(plog)).get(b"kept") == b"1"


def test_min_compaction_lag_keeps_young_segments_dirty() -> None:
    clock = ManualClock()
    plog = open_log(clock=clock, min_compaction_lag_ms=5 * MINUTE)
    fill(plog, rounds=10)
    cleaner = LogCleaner()
    assert cleaner.clean(plog, clock.now_ms()) is None
    clock.advance(5 * MINUTE - 1)
    assert cleaner.clean(plog, clock.now_ms()) is None
    # Newer segments are younger still: the cleanable prefix stops at the first young one.
    clock.advance(1)
    old_end = plog.log_end_offset
    fill(plog, rounds=10)
    before = {r.offset for r in records_of(plog)}
    stats = cleaner.clean(plog, clock.now_ms())
    assert stats is not None and stats.records_removed > 0
    removed = before - {r.offset for r in records_of(plog)}
    assert removed and max(removed) < old_end


def test_dirty_ratio_decides_when_a_log_needs_cleaning() -> None:
    cleaner = LogCleaner()
    plain = open_log(directory="/data/plain-0", cleanup_compact=False, cleanup_delete=True)
    fill(plain, rounds=10)
    assert not cleaner.needs_cleaning(plain), "only compacted topics are cleaned"

    plog = open_log(min_cleanable_dirty_ratio=0.5)
    assert cleaner.dirty_ratio(plog) == 0.0
    fill(plog, rounds=10)
    assert cleaner.dirty_ratio(plog) == 1.0  # never cleaned: all dirty
    assert cleaner.needs_cleaning(plog)
    cleaner.clean(plog, plog.clock.now_ms())
    assert cleaner.dirty_ratio(plog) == 0.0
    assert not cleaner.needs_cleaning(plog)
    # New closed segments make it dirty again; the threshold is inclusive.
    while cleaner.dirty_ratio(plog) < 0.5:
        put(plog, [(b"k0", b"again")])
    ratio = cleaner.dirty_ratio(plog)
    assert 0.5 <= ratio < 1.0
    assert cleaner.needs_cleaning(plog)
    strict = open_log(directory="/data/strict-0", min_cleanable_dirty_ratio=1.0)
    fill(strict, rounds=10)
    assert cleaner.needs_cleaning(strict)  # 1.0 >= 1.0
    cleaner.clean(strict, strict.clock.now_ms())
    put(strict, [(b"x", b"y")] * 1)
    fill(strict, rounds=4)
    assert not cleaner.needs_cleaning(strict)


def test_a_recreated_log_in_the_same_directory_starts_dirty() -> None:
    """The first dirty offset belongs to the log, not to its directory name."""
    fs = SimFileSystem()
    cleaner = LogCleaner()
    plog = open_log(fs)
    fill(plog, rounds=30)
    cleaner.clean(plog, plog.clock.now_ms())
    plog.delete()
    again = open_log(fs)
    fill(again, rounds=5)
    assert cleaner.dirty_ratio(again) == 1.0
    assert cleaner.needs_cleaning(again)


# ---- what compaction never touches -----------------------------------------------------------


def test_transactions_below_the_lso_compact_and_markers_stay() -> None:
    plog = open_log()
    producers = Producers()
    put(plog, [(b"k0", b"plain-old")])
    txn_first, _ = put(
        plog,
        [(b"k0", b"txn-1"), (b"k1", b"txn-1")],
        transactional=True,
        **producers.batch_fields(42, 2),
    )
    plog.append_marker(42, 0, 0, commit=True)
    plog.flush()
    aborted_first, _ = put(
        plog, [(b"k1", b"aborted")], transactional=True, **producers.batch_fields(42, 1)
    )
    plog.append_marker(42, 0, 0, commit=False)
    plog.flush()
    fill(plog, rounds=10, keys=2)  # later non-transactional values of the same keys
    special = {h.base_offset: raw for h, raw in stored(plog) if h.is_transactional}
    assert len(special) == 4
    aborted = plog.aborted_between(0, plog.high_watermark)
    assert aborted == [(42, aborted_first)]

    stats = LogCleaner().clean(plog, plog.clock.now_ms())
    assert stats is not None and stats.records_removed > 0
    after = {h.base_offset: raw for h, raw in stored(plog) if h.is_transactional}
    # The committed transaction's records were superseded by later values: gone. The
    # aborted batch is the producer's last one, kept whole for its sequence numbers, and
    # both markers stay byte for byte.
    assert txn_first not in after
    assert after == {o: raw for o, raw in special.items() if o != txn_first}
    # The segment holding the ABORT marker was rewritten; its aborted-transaction index
    # must still answer read_committed fetches.
    assert plog.aborted_between(0, plog.high_watermark) == aborted
    assert plog.aborted_between(aborted_first, plog.high_watermark) == aborted


def test_aborted_data_is_removed_and_the_latest_committed_record_kept() -> None:
    plog = open_log()
    producers = Producers()
    kept_first, _ = put(
        plog, [(b"only-txn", b"committed")], transactional=True, **producers.batch_fields(5, 1)
    )
    plog.append_marker(5, 0, 0, commit=True)
    aborted_first, _ = put(
        plog, [(b"gone", b"aborted")], transactional=True, **producers.batch_fields(5, 1)
    )
    plog.append_marker(5, 0, 0, commit=False)
    put(plog, [(b"x", b"1")], transactional=True, **producers.batch_fields(5, 1))
    plog.append_marker(5, 0, 0, commit=True)  # producer 5's last batch is this one
    plog.flush()
    fill(plog, rounds=10, keys=2)
    LogCleaner().clean(plog, plog.clock.now_ms())
    offsets = {h.base_offset for h, _ in stored(plog) if h.is_transactional}
    assert kept_first in offsets  # the latest (only) value of its key, committed
    assert aborted_first not in offsets  # aborted data is never needed again


def test_an_idempotent_batch_keeps_its_last_record_so_sequences_survive() -> None:
    fs = SimFileSystem()
    clock = ManualClock()
    plog = open_log(fs, clock)
    producers = Producers()
    first, last = put(
        plog, [(b"k0", b"1"), (b"k1", b"1"), (b"k2", b"1")], **producers.batch_fields(7, 3)
    )
    fill(plog, rounds=10, keys=3)  # supersedes all three
    original = next(h for h, _ in stored(plog) if h.base_offset == first)
    state_before = plog.producer_state.producers[7]

    LogCleaner().clean(plog, clock.now_ms())
    header, raw = next((h, raw) for h, raw in stored(plog) if h.base_offset == first)
    assert header.record_count == 1
    assert header.last_offset == last, "lastOffsetDelta is kept"
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (
        original.producer_id,
        original.producer_epoch,
        original.base_sequence,
    )
    assert [(r.offset, r.key) for r in decode_records(raw)] == [(last, b"k2")]

    # Producer state rebuilt from the cleaned log alone is what it was.
    plog.close()
    for name in fs.listdir(DIR):
        if name.endswith(".snapshot"):
            fs.remove(os.path.join(DIR, name))
    reopened = open_log(fs, clock)
    entry = reopened.producer_state.producers[7]
    assert entry.last_seq == state_before.last_seq == 2
    assert entry.epoch == state_before.epoch


def test_only_a_producers_last_batch_keeps_a_record() -> None:
    """Kafka's rule: the sequence needs only the producer's last batch. Keeping a record of
    every idempotent batch kept the topic from ever shrinking below one record per batch."""
    fs = SimFileSystem()
    clock = ManualClock()
    plog = open_log(fs, clock)
    producers = Producers()
    for r in range(30):
        last, _ = put(plog, [(b"k0", b"idempotent-%d" % r)], **producers.batch_fields(5, 1))
    put(plog, [(b"other", b"x")], **producers.batch_fields(6, 1))
    fill(plog, rounds=10, keys=1)  # later plain values of k0 close the segments
    LogCleaner().clean(plog, clock.now_ms())
    idempotent = [h for h, _ in stored(plog) if h.producer_id == 5]
    assert [(h.base_offset, h.record_count) for h in idempotent] == [(last, 1)]
    assert [h.producer_id for h, _ in stored(plog) if h.producer_id == 6] == [6]
    assert table(records_of(plog)) == {b"k0": b"v0-9", b"other": b"x"}

    # Producer state rebuilt from the cleaned log alone still knows both sequences.
    plog.close()
    for name in fs.listdir(DIR):
        if name.endswith(".snapshot"):
            fs.remove(os.path.join(DIR, name))
    reopened = open_log(fs, clock)
    assert reopened.producer_state.producers[5].last_seq == 29
    assert reopened.producer_state.producers[6].last_seq == 0


def test_a_deleted_key_never_comes_back_through_a_kept_idempotent_record() -> None:
    """A tombstone past delete.retention.ms must not go while an older value of its key
    stays in the log (an idempotent producer's last record, or a transactional batch)."""
    clock = ManualClock()
    plog = open_log(clock=clock, delete_retention_ms=SECOND)
    producers = Producers()
    put(plog, [(b"a", b"idempotent")], **producers.batch_fields(9, 1))
    put(
        plog,
        [(b"b", b"transactional")],
        transactional=True,
        **producers.batch_fields(10, 1),
    )
    plog.append_marker(10, 0, 0, commit=True)
    put(plog, [(b"a", None)])
    put(plog, [(b"b", None)])
    fill(plog, rounds=8)
    clock.advance(MINUTE)
    cleaner = LogCleaner()
    for _ in range(2):
        cleaner.clean(plog, clock.now_ms())
        clock.advance(MINUTE)
        state = table(records_of(plog))
        assert b"a" not in state and b"b" not in state
        assert table(fetched(plog)) == state


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.ZSTD, Compression.LZ4])
def test_compressed_batches_are_cleaned_and_stay_compressed(codec: Compression) -> None:
    plog = open_log(segment_bytes=1000)
    offsets: dict[int, tuple[bytes, bytes]] = {}
    for r in range(12):
        records = [(b"k%d" % k, b"value-%d-%d" % (k, r) * 5) for k in range(4)]
        if r % 3 == 0:
            records.append((b"only-%d" % r, b"unique"))
        first, _ = put(plog, records, compression=codec)
        for i, (k, v) in enumerate(records):
            offsets[first + i] = (k, v)
    before = table(records_of(plog))
    stats = LogCleaner().clean(plog, plog.clock.now_ms())
    assert stats is not None and stats.records_removed > 0
    for header, _ in stored(plog):
        assert header.compression == codec
    after = records_of(plog)
    assert table(after) == before
    assert all(offsets[r.offset] == (r.key, r.value) for r in after)
    assert table(fetched(plog)) == before


# ---- the files after a clean -----------------------------------------------------------------


def test_reads_after_cleaning_return_whole_batches_at_every_offset() -> None:
    plog = open_log()
    fill(plog, rounds=15)
    LogCleaner().clean(plog, plog.clock.now_ms())
    survivors = [r.offset for r in records_of(plog)]
    hw = plog.high_watermark
    for offset in range(plog.log_start_offset, hw):
        region = plog.read(offset, 1 << 20, hw, True).region
        assert region is not None, f"nothing read at {offset}"
        data = region.read()
        found, end = scan_batches(data)
        assert end == len(data) and found
        first = found[0].header
        # A removed offset reads from the next surviving record on.
        wanted = min(o for o in survivors if o >= offset)
        assert first.base_offset <= wanted <= first.last_offset
        decode_records(data[: first.size], verify_crc=True)


def test_indexes_match_a_rebuild_and_survive_a_reopen() -> None:
    fs = SimFileSystem()
    clock = ManualClock()
    plog = open_log(fs, clock, index_interval_bytes=1)  # an entry per batch
    fill(plog, rounds=20, keys=4)
    LogCleaner().clean(plog, clock.now_ms())
    check_indexes_match_rebuild(plog)
    expected = records_of(plog)
    assert not [n for n in fs.listdir(DIR) if n.endswith(".cleaned")]
    # A timestamp lookup lands on a surviving record.
    first = expected[0]
    assert plog.offset_for_timestamp(first.timestamp) == (first.offset, first.timestamp)

    plog.close()
    clean = open_log(fs, clock, clean_shutdown=True, index_interval_bytes=1)
    assert records_of(clean) == expected
    assert fetched(clean) == expected
    check_indexes_match_rebuild(clean)
    clean.close()
    crashed = open_log(fs, clock, clean_shutdown=False, index_interval_bytes=1)
    assert fetched(crashed) == expected


def test_cleaning_twice_changes_nothing_more() -> None:
    plog = open_log()
    fill(plog, rounds=15)
    cleaner = LogCleaner()
    cleaner.clean(plog, plog.clock.now_ms())
    files = stored(plog)
    again = cleaner.clean(plog, plog.clock.now_ms())
    assert again is not None and again.records_removed == 0
    assert again.bytes_before == again.bytes_after
    assert stored(plog) == files


def test_segments_emptied_by_cleaning_are_deleted_but_the_first_stays() -> None:
    fs = SimFileSystem()
    plog = open_log(fs, segment_bytes=200)
    cleaner = LogCleaner()
    for _ in range(20):
        fill(plog, rounds=5, keys=1)
        cleaner.clean(plog, plog.clock.now_ms())
    # Bounded: the (possibly empty) first segment, the last cleaned one, and the active one.
    assert len(plog.segments) <= 3
    assert plog.log_start_offset == 0
    logs = [n for n in fs.listdir(DIR) if n.endswith(".log")]
    assert len(logs) == len(plog.segments)
    assert not [
        n
        for n in fs.listdir(DIR)
        if n.endswith((".index", ".timeindex"))
        and int(n.split(".")[0]) not in {s.base_offset for s in plog.segments}
    ]
    assert table(fetched(plog)) == {b"k0": b"v0-4"}


def test_a_replaced_segment_stays_readable_until_the_delay_passes(tmp_path: Path) -> None:
    """A fetch response computed before a clean may still be sending from the old file."""
    clock = ManualClock()
    plog = open_log(RealFileSystem(), clock, directory=str(tmp_path / "c-0"))
    fill(plog, rounds=15)
    region = plog.read(0, 1 << 20, plog.high_watermark, True).region
    assert region is not None
    original = region.read()
    cleaner = LogCleaner()
    cleaner.clean(plog, clock.now_ms())
    assert plog.segments[0].log is not region.file
    assert region.read() == original, "the old file's bytes, not the cleaned file's"
    clock.advance(FILE_DELETE_DELAY_MS)
    plog.close_retired()
    assert region.file.fileno() == -1, "closed once no response can still be using it"
    plog.close()


def test_retention_keeps_a_deleted_segment_readable_until_the_delay_passes(
    tmp_path: Path,
) -> None:
    clock = ManualClock()
    plog = open_log(RealFileSystem(), clock, directory=str(tmp_path / "r-0"))
    fill(plog, rounds=15)
    region = plog.read(0, 1 << 20, plog.high_watermark, True).region
    assert region is not None and len(plog.segments) > 2
    original = region.read()
    assert plog.delete_oldest_segments(1) == 1
    assert region.read() == original
    clock.advance(FILE_DELETE_DELAY_MS)
    plog.close_retired()
    assert region.file.fileno() == -1
    plog.close()


def test_random_histories_keep_the_table_and_the_offsets() -> None:
    """Random puts, deletes, idempotent and transactional batches, time and cleans: the
    table a consumer rebuilds never changes, and every record keeps its offset."""
    for seed in range(6):
        rng = random.Random(seed)
        clock = ManualClock()
        plog = open_log(clock=clock, segment_bytes=300, delete_retention_ms=MINUTE)
        cleaner = LogCleaner()
        producers = Producers()
        written: dict[int, tuple[bytes | None, bytes | None]] = {}
        for step in range(150):
            roll = rng.random()
            if roll < 0.1:
                cleaner.clean(plog, clock.now_ms())
            elif roll < 0.2:
                clock.advance(rng.choice([SECOND, MINUTE]))
            else:
                n = rng.randint(1, 3)
                records = [
                    (
                        b"k%d" % rng.randrange(5),
                        None if rng.random() < 0.2 else b"s%d-%d" % (step, i),
                    )
                    for i in range(n)
                ]
                extra: dict[str, Any] = {}
                kind = rng.random()
                if kind < 0.2:
                    extra = dict(producers.batch_fields(rng.choice([1, 2]), n))
                elif kind < 0.3:
                    extra = dict(producers.batch_fields(3, n), transactional=True)
                first, _ = put(plog, records, **extra)
                if kind >= 0.2 and kind < 0.3:
                    plog.append_marker(3, 0, 0, commit=True)
                    plog.flush()
                for i, kv in enumerate(records):
                    written[first + i] = kv
            before = table(records_of(plog)) if step % 10 == 0 else None
            if before is not None:
                cleaner.clean(plog, clock.now_ms())
                assert table(records_of(plog)) == before, f"seed {seed} step {step}"
        expected = table([Record(o, 0, k, v) for o, (k, v) in sorted(written.items())])
        cleaner.clean(plog, clock.now_ms())
        survivors = records_of(plog)
        assert table(survivors) == expected, f"seed {seed}"
        assert table(fetched(plog)) == expected, f"seed {seed}"
        for r in survivors:
            assert written[r.offset] == (r.key, r.value), f"seed {seed}: offset {r.offset} moved"
        check_indexes_match_rebuild(plog)
        # Producer state rebuilt from the cleaned log alone is the one the log had.
        sequences = {pid: e.last_seq for pid, e in plog.producer_state.producers.items()}
        fs = plog.fs
        plog.close()
        for name in fs.listdir(DIR):
            if name.endswith(".snapshot"):
                fs.remove(os.path.join(DIR, name))
        reopened = open_log(fs, clock)
        rebuilt = {pid: e.last_seq for pid, e in reopened.producer_state.producers.items()}
        assert rebuilt == sequences, f"seed {seed}"
