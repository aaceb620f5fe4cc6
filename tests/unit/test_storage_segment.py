"""LogSegment and its indexes: appends, lookups, clean reload, and rebuilds from the .log."""

from __future__ import annotations

import os

import pytest

from onceflow.records.batch import BatchHeader, parse_header, validate_produced_batches
from onceflow.records.builder import build_batch
from onceflow.storage.fs import SimFileSystem
from onceflow.storage.indexes import OffsetIndex, TimeIndex
from onceflow.storage.indexes.offset import ENTRY as OFFSET_ENTRY
from onceflow.storage.indexes.time import ENTRY as TIME_ENTRY
from onceflow.storage.segment import LogSegment

DIR = "/data/t-0"
T0 = 1_700_000_000_000


def make_batch(base: int, count: int, ts: int, size: int = 20) -> tuple[bytes, BatchHeader]:
    data = build_batch(
        [(b"k%d" % i, b"v" * size, []) for i in range(count)],
        timestamp_ms=ts,
        base_offset=base,
    )
    return data, validate_produced_batches(data, 1 << 20)[0]


def fill(segment: LogSegment, batches: int, per_batch: int = 3, ts: int = T0) -> list[bytes]:
    """Append `batches` batches of `per_batch` records with rising timestamps."""
    out = []
    offset = segment.next_offset
    for i in range(batches):
        data, header = make_batch(offset, per_batch, ts + i)
        segment.append(data, [header])
        out.append(data)
        offset = header.next_offset
    return out


def new_segment(fs: SimFileSystem, base: int = 0, interval: int = 100) -> LogSegment:
    fs.makedirs(DIR)
    return LogSegment(fs, DIR, base, interval)


def index_state(segment: LogSegment) -> tuple[list[int], ...]:
    return (
        list(segment.offset_index.offsets),
        list(segment.offset_index.positions),
        list(segment.time_index.timestamps),
        list(segment.time_index.offsets),
    )


def test_append_keeps_sparse_index_and_find_batch_finds_every_offset() -> None:
    fs = SimFileSystem()
    segment = new_segment(fs, base=1000, interval=150)
    batches = fill(segment, 30)
    assert len(segment.offset_index) > 5, "a small interval makes many index entries"
    assert segment.next_offset == 1000 + 30 * 3
    assert segment.size == sum(len(b) for b in batches)
    position = 0
    for i, data in enumerate(batches):
        for offset in range(1000 + 3 * i, 1000 + 3 * i + 3):
            location = segment.find_batch(offset)
            assert location is not None
            assert location.position == position
            assert location.header.base_offset == 1000 + 3 * i
            assert segment.read_bytes(location.position, len(data)) == data
        position += len(data)
    assert segment.find_batch(1000 + 90) is None
    assert segment.position_of(1000 + 90) == segment.size
    # Below the base: the first batch holds the first offset at or above it.
    first = segment.find_batch(0)
    assert first is not None and first.position == 0


def test_index_entries_point_at_batches_whose_last_offset_they_name() -> None:
    fs = SimFileSystem()
    segment = new_segment(fs, interval=100)
    fill(segment, 20)
    for offset, position in zip(
        segment.offset_index.offsets, segment.offset_index.positions, strict=True
    ):
        header = parse_header(segment.read_bytes(position, 61))
        assert header.last_offset == offset
    assert list(segment.time_index.timestamps) == sorted(set(segment.time_index.timestamps))


def test_find_batch_reads_a_batch_larger_than_the_scan_window() -> None:
    fs = SimFileSystem()
    segment = new_segment(fs, interval=1 << 20)
    small, small_header = make_batch(0, 1, T0)
    big, big_header = make_batch(1, 2, T0, size=40_000)
    tail, tail_header = make_batch(3, 1, T0)
    segment.append(small + big + tail, [small_header, big_header, tail_header])
    location = segment.find_batch(4)
    assert location is None
    location = segment.find_batch(3)
    assert location is not None and location.position == len(small) + len(big)
    location = segment.find_batch(2)
    assert location is not None and location.position == len(small)


def test_clean_reload_matches_the_indexes_built_while_appending() -> None:
    fs = SimFileSystem()
    segment = new_segment(fs, base=50, interval=120)
    fill(segment, 25)
    segment.fsync()
    before = index_state(segment)
    expected = (
        segment.next_offset,
        segment.max_timestamp,
        segment.offset_of_max_timestamp,
        segment.first_batch_timestamp,
    )
    segment.close()

    reopened = LogSegment(fs, DIR, 50, 120)
    assert reopened.load_indexes()
    assert index_state(reopened) == before
    got = (
        reopened.next_offset,
        reopened.max_timestamp,
        reopened.offset_of_max_timestamp,
        reopened.first_batch_timestamp,
    )
    assert got == expected
    # Appending after the reload indexes exactly as appending without the reload would.
    reference = _replay(50, 120, 25)
    fill(reopened, 10, ts=T0 + 100)
    fill(reference, 10, ts=T0 + 100)
    assert index_state(reopened) == index_state(reference)


def _replay(base: int, interval: int, batches: int) -> LogSegment:
    """A fresh segment in another directory holding the same first `batches` batches."""
    other = SimFileSystem()
    other.makedirs(DIR)
    segment = LogSegment(other, DIR, base, interval)
    fill(segment, batches)
    return segment


def test_clean_reload_knows_a_max_timestamp_between_index_entries() -> None:
    """Bug fixed: the max timestamp of a batch after the last index entry was forgotten."""
    fs = SimFileSystem()
    segment = new_segment(fs, interval=200)
    for i, ts in enumerate((T0, T0, T0, T0, T0 + 500, T0 + 100)):
        data, header = make_batch(i, 1, ts)
        segment.append(data, [header])
    assert list(segment.offset_index.offsets) == [3], "one entry, before the max"
    assert (segment.max_timestamp, segment.offset_of_max_timestamp) == (T0 + 500, 4)
    segment.fsync()
    segment.close()
    reopened = LogSegment(fs, DIR, 0, 200)
    assert reopened.load_indexes()
    assert (reopened.max_timestamp, reopened.offset_of_max_timestamp) == (T0 + 500, 4)


def test_recover_rebuilds_the_same_indexes_as_appending() -> None:
    fs = SimFileSystem()
    segment = new_segment(fs, interval=90)
    fill(segment, 25)
    before = index_state(segment)
    scanned, truncated = segment.recover()
    assert truncated == 0
    assert len(scanned) == 25
    assert index_state(segment) == before


@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
@pytest.mark.parametrize(
    "damage",
    ["missing", "torn_entry", "garbage_tail", "reordered", "wrong_position", "empty_log_ref"],
)
def test_damaged_index_is_refused_on_load_and_rebuilt(suffix: str, damage: str) -> None:
    fs = SimFileSystem()
    segment = new_segment(fs, interval=100)
    fill(segment, 20)
    segment.fsync()
    before = index_state(segment)
    segment.close()
    path = os.path.join(DIR, f"{0:020d}{suffix}")
    raw = fs.read_file(path)
    size = OFFSET_ENTRY.size if suffix == ".index" else TIME_ENTRY.size
    assert len(raw) >= 3 * size
    if damage == "missing":
        fs.remove(path)
    elif damage == "torn_entry":
        fs.write_file_atomic(path, raw[:-3])
    elif damage == "garbage_tail":
        fs.write_file_atomic(path, raw + b"\xff" * size)
    elif damage == "reordered":
        fs.write_file_atomic(path, raw[size:] + raw[:size])
    elif damage == "wrong_position":
        # The last entry still sorts after the others but names the wrong place.
        if suffix == ".index":
            rel, pos = OFFSET_ENTRY.unpack(raw[-size:])
            bad = OFFSET_ENTRY.pack(rel, pos + 7)
        else:
            ts, rel = TIME_ENTRY.unpack(raw[-size:])
            bad = TIME_ENTRY.pack(ts + 1_000_000, rel)
        fs.write_file_atomic(path, raw[:-size] + bad)
    elif damage == "empty_log_ref":
        # An entry past the end of the log.
        if suffix == ".index":
            rel, _ = OFFSET_ENTRY.unpack(raw[-size:])
            bad = OFFSET_ENTRY.pack(rel + 1000, segment.size + 10)
        else:
            ts, rel = TIME_ENTRY.unpack(raw[-size:])
            bad = TIME_ENTRY.pack(ts + 1, rel + 1000)
        fs.write_file_atomic(path, raw + bad)

    reopened = LogSegment(fs, DIR, 0, 100)
    assert not reopened.load_indexes()
    _, truncated = reopened.recover()
    assert truncated == 0
    assert index_state(reopened) == before
    # The rebuilt files are what a clean load reads next time.
    reopened.fsync()
    reopened.close()
    again = LogSegment(fs, DIR, 0, 100)
    assert again.load_indexes()
    assert index_state(again) == before


def test_index_truncated_to_whole_entries_is_sparser_but_still_correct() -> None:
    """Fewer entries are a valid (sparser) index: lookups scan further but stay right."""
    fs = SimFileSystem()
    segment = new_segment(fs, interval=100)
    batches = fill(segment, 20)
    segment.fsync()
    segment.close()
    path = os.path.join(DIR, f"{0:020d}.index")
    fs.write_file_atomic(path, fs.read_file(path)[: 2 * OFFSET_ENTRY.size])
    reopened = LogSegment(fs, DIR, 0, 100)
    assert reopened.load_indexes()
    assert reopened.next_offset == 60
    position = 0
    for i, data in enumerate(batches):
        location = reopened.find_batch(3 * i + 1)
        assert location is not None and location.position == position
        position += len(data)


def test_recover_truncates_a_torn_tail_and_a_corrupt_batch() -> None:
    fs = SimFileSystem()
    segment = new_segment(fs, interval=100)
    batches = fill(segment, 10)
    good_end = sum(len(b) for b in batches[:8])
    segment.close()
    log_path = os.path.join(DIR, f"{0:020d}.log")
    raw = bytearray(fs.read_file(log_path))
    raw[good_end + 70] ^= 0xFF  # corrupt the ninth batch's records: its CRC fails
    fs.remove(log_path)
    handle = fs.open(log_path)
    handle.append(bytes(raw[: len(raw) - 5]))  # and tear the tail
    segment = LogSegment(fs, DIR, 0, 100)
    scanned, truncated = segment.recover()
    assert len(scanned) == 8
    assert truncated == len(raw) - 5 - good_end
    assert segment.size == good_end
    assert segment.next_offset == 24
    assert fs.read_file(log_path) == b"".join(batches[:8])


def test_truncate_to_drops_batches_and_their_index_entries() -> None:
    fs = SimFileSystem()
    segment = new_segment(fs, interval=100)
    batches = fill(segment, 20)
    segment.truncate_to(30)
    assert segment.next_offset == 30
    assert segment.size == sum(len(b) for b in batches[:10])
    assert all(o < 30 for o in segment.offset_index.offsets)
    assert all(p < segment.size for p in segment.offset_index.positions)
    assert all(o < 30 for o in segment.time_index.offsets)
    reference = _replay(0, 100, 10)
    assert index_state(segment) == index_state(reference)


def test_offset_index_lookup_and_time_index_lookup() -> None:
    fs = SimFileSystem()
    fs.makedirs(DIR)
    index = OffsetIndex(fs, os.path.join(DIR, "x.index"), 100)
    assert index.lookup(500) == (100, 0)
    for offset, position in ((110, 50), (120, 90), (130, 200)):
        index.append(offset, position)
    index.append(125, 300)  # not above the last entry: ignored
    assert index.lookup(109) == (100, 0)
    assert index.lookup(110) == (110, 50)
    assert index.lookup(129) == (120, 90)
    assert index.lookup(10_000) == (130, 200)
    index.truncate_to_position(90)
    assert list(index.offsets) == [110]
    assert index.load(1000) and list(index.offsets) == [110]

    times = TimeIndex(fs, os.path.join(DIR, "x.timeindex"), 100)
    assert times.max_timestamp == -1
    for ts, offset in ((1000, 105), (2000, 115), (3000, 125)):
        times.append(ts, offset)
    times.append(2500, 130)  # not above the last timestamp: ignored
    assert times.lookup(500) == 100
    assert times.lookup(1000) == 100
    assert times.lookup(1500) == 105
    assert times.lookup(3000) == 115
    assert times.lookup(9999) == 125
    assert times.max_timestamp == 3000
    assert times.load(126) and list(times.offsets) == [105, 115, 125]
    assert not times.load(125)  # an entry at or past the segment's end is refused
