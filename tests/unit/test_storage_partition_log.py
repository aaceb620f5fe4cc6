"""PartitionLog: offsets, rolling, reads bounded by the high watermark, time lookups."""

from __future__ import annotations

import itertools

import pytest

from onceflow.clock import ManualClock
from onceflow.errors import ErrorCode, KafkaError
from onceflow.records.batch import parse_header, scan_batches, validate_produced_batches
from onceflow.records.builder import build_batch
from onceflow.records.record import decode_records
from onceflow.storage.fs import SimFileSystem
from onceflow.storage.partition_log import AppendResult, LogConfig, PartitionLog
from onceflow.storage.recovery import open_partition

DIR = "/data/t-0"


def open_log(
    fs: SimFileSystem | None = None,
    clock: ManualClock | None = None,
    **overrides: int | bool,
) -> PartitionLog:
    settings: dict[str, int | bool] = {"index_interval_bytes": 128}
    settings.update(overrides)
    config = LogConfig(**settings)  # type: ignore[arg-type]
    plog, _ = open_partition(
        fs or SimFileSystem(), DIR, "t", 0, config, clock or ManualClock(), 0, False
    )
    return plog


def append(
    plog: PartitionLog, count: int = 1, ts: int | None = None, size: int = 20
) -> AppendResult:
    now = plog.clock.now_ms() if ts is None else ts
    data = build_batch([(b"k", b"x" * size, []) for _ in range(count)], timestamp_ms=now)
    return plog.append_batches(data, validate_produced_batches(data, 1 << 22))


def batches_in(data: bytes) -> list[tuple[int, int]]:
    """(base offset, next offset) of every whole batch in `data`."""
    found, _ = scan_batches(data)
    return [(b.header.base_offset, b.header.next_offset) for b in found]


def test_offsets_are_assigned_contiguously_and_stamped_into_the_batch() -> None:
    plog = open_log()
    first = append(plog, 3)
    second = append(plog, 2)
    assert (first.first_offset, first.last_offset) == (0, 2)
    assert (second.first_offset, second.last_offset) == (3, 4)
    assert plog.log_end_offset == 5
    plog.flush()
    region = plog.read(0, 1 << 20, plog.high_watermark, True).region
    assert region is not None
    data = region.read()
    assert batches_in(data) == [(0, 3), (3, 5)]
    records = decode_records(data[: parse_header(data).size])
    assert [r.offset for r in records] == [0, 1, 2]


def test_segment_rolls_when_the_next_append_would_pass_segment_bytes() -> None:
    plog = open_log(segment_bytes=400)
    for _ in range(20):
        append(plog)
    assert len(plog.segments) > 3
    for prev, nxt in itertools.pairwise(plog.segments):
        assert 0 < prev.size <= 400
        assert nxt.base_offset == prev.next_offset
    assert plog.log_end_offset == 20


def test_a_batch_larger_than_segment_bytes_still_goes_in_alone() -> None:
    plog = open_log(segment_bytes=200)
    append(plog)
    append(plog, size=1000)
    append(plog)
    assert [s.base_offset for s in plog.segments] == [0, 1, 2]
    assert plog.segments[1].size > 200


def test_segment_rolls_after_segment_ms() -> None:
    clock = ManualClock()
    plog = open_log(clock=clock, segment_ms=1000)
    append(plog)
    clock.advance(1000)
    append(plog)
    assert len(plog.segments) == 1, "exactly segment.ms old: not yet"
    clock.advance(1)
    append(plog)
    assert [s.base_offset for s in plog.segments] == [0, 2]
    clock.advance(5000)
    plog.roll()
    plog.roll()  # rolling an empty active segment does nothing
    assert [s.base_offset for s in plog.segments] == [0, 2, 3]


def test_roll_makes_the_old_segment_durable_before_the_new_one_exists() -> None:
    """Bug fixed: otherwise a crash could keep the new segment but lose the old tail,
    leaving a hole in the offsets that recovery did not notice."""
    fs = SimFileSystem(seed=3)
    plog = open_log(fs)
    append(plog)
    append(plog)
    old = plog.active
    expected = old.read_bytes(0, old.size)
    plog.roll()
    fs.crash()
    assert fs.read_file(old.log_path) == expected


def test_read_cuts_at_max_bytes_inside_a_batch() -> None:
    plog = open_log(durable=False)
    for _ in range(3):
        append(plog, 4)
    whole = plog.read(0, 1 << 20, plog.high_watermark, False).region
    assert whole is not None
    first_size = parse_header(whole.read()).size
    cut = plog.read(0, first_size + 10, plog.high_watermark, False).region
    assert cut is not None and cut.size == first_size + 10
    assert cut.read() == whole.read()[: first_size + 10]
    assert batches_in(cut.read()) == [(0, 4)], "the partial second batch is not whole"


def test_min_one_returns_a_whole_first_batch_larger_than_max_bytes() -> None:
    plog = open_log(durable=False)
    append(plog, 2, size=5000)
    append(plog)
    no_min = plog.read(0, 100, plog.high_watermark, False).region
    assert no_min is not None and no_min.size == 100
    region = plog.read(0, 100, plog.high_watermark, True).region
    assert region is not None
    assert batches_in(region.read()) == [(0, 2)]
    assert region.size == parse_header(region.read()).size


def test_read_from_an_offset_inside_a_batch_starts_at_that_batch() -> None:
    plog = open_log(durable=False, segment_bytes=300)
    for _ in range(10):
        append(plog, 3)
    for offset in range(30):
        region = plog.read(offset, 1 << 20, plog.high_watermark, False).region
        assert region is not None
        got = batches_in(region.read())
        assert got[0][0] == offset - offset % 3
        # A read stops at the end of the segment holding the offset.
        segment = plog.segments[plog.segment_for(offset)]
        assert got[-1][1] == segment.next_offset


def test_reads_stop_at_the_high_watermark_in_durable_mode() -> None:
    plog = open_log()
    append(plog, 2)
    plog.flush()
    append(plog, 2)
    assert (plog.high_watermark, plog.log_end_offset) == (2, 4)
    region = plog.read(0, 1 << 20, plog.high_watermark, True).region
    assert region is not None and batches_in(region.read()) == [(0, 2)]
    assert region.size == parse_header(region.read()).size
    # At or past the high watermark but not past the log end: empty, not an error.
    assert plog.read(2, 1 << 20, plog.high_watermark, True).region is None
    assert plog.read(4, 1 << 20, plog.high_watermark, True).region is None
    # A reader allowed up to the log end (e.g. the leader's own tools) sees everything.
    region = plog.read(0, 1 << 20, plog.log_end_offset, True).region
    assert region is not None and batches_in(region.read()) == [(0, 2), (2, 4)]
    plog.flush()
    region = plog.read(2, 1 << 20, plog.high_watermark, True).region
    assert region is not None and batches_in(region.read()) == [(2, 4)]


def test_upper_bound_inside_a_segment_never_returns_a_batch_crossing_it() -> None:
    plog = open_log(durable=False)
    for _ in range(5):
        append(plog, 2)
    region = plog.read(0, 1 << 20, 6, False).region
    assert region is not None
    assert batches_in(region.read()) == [(0, 2), (2, 4), (4, 6)]
    assert region.size == parse_header(region.read()).size * 3
    region = plog.read(0, 1 << 20, 5, False).region
    assert region is not None
    assert batches_in(region.read()) == [(0, 2), (2, 4)], "the batch holding 5 is out"
    assert region.size == parse_header(region.read()).size * 2


@pytest.mark.parametrize("offset", [-1, 11, 100])
def test_offset_out_of_range_outside_log_start_and_log_end(offset: int) -> None:
    plog = open_log(durable=False)
    for _ in range(5):
        append(plog, 2)
    with pytest.raises(KafkaError) as info:
        plog.read(offset, 1 << 20, plog.high_watermark, True)
    assert info.value.code == ErrorCode.offset_out_of_range
    assert plog.read(10, 1 << 20, plog.high_watermark, True).region is None


def test_offset_out_of_range_below_log_start_after_retention() -> None:
    plog = open_log(segment_bytes=250)
    for _ in range(10):
        append(plog)
    plog.flush()
    assert plog.delete_oldest_segments(2) == 2
    start = plog.log_start_offset
    assert start > 0
    with pytest.raises(KafkaError) as info:
        plog.read(start - 1, 1 << 20, plog.high_watermark, True)
    assert info.value.code == ErrorCode.offset_out_of_range
    region = plog.read(start, 1 << 20, plog.high_watermark, True).region
    assert region is not None and batches_in(region.read())[0][0] == start


def test_high_watermark_moves_only_after_flush_in_durable_mode() -> None:
    plog = open_log()
    append(plog, 3)
    assert plog.high_watermark == 0 and plog.has_unflushed
    plan = plog.prepare_flush()
    assert plan is not None
    append(plog, 2)  # arrives while the fsync runs: not covered by this plan
    plan.execute()
    plog.complete_flush(plan)
    assert (plog.high_watermark, plog.flushed_offset, plog.log_end_offset) == (3, 3, 5)
    plog.flush()
    assert plog.high_watermark == 5
    assert plog.prepare_flush() is None


def test_high_watermark_moves_on_append_in_non_durable_mode() -> None:
    plog = open_log(durable=False)
    append(plog, 3)
    assert plog.high_watermark == 3 and plog.flushed_offset == 0
    plog.flush()
    assert plog.flushed_offset == 3


def test_truncate_below_the_high_watermark_position_keeps_reads_in_bounds() -> None:
    """Bug fixed: after truncate_to the high watermark kept a file position past it."""
    plog = open_log()
    append(plog, 2)
    plog.flush()
    for _ in range(3):
        append(plog, 2)
    plog.truncate_to(4)
    assert (plog.high_watermark, plog.log_end_offset) == (2, 4)
    region = plog.read(0, 1 << 20, plog.high_watermark, True).region
    assert region is not None
    assert batches_in(region.read()) == [(0, 2)]
    assert region.size == parse_header(region.read()).size
    append(plog, 1)
    assert plog.log_end_offset == 5
    plog.flush()
    region = plog.read(0, 1 << 20, plog.high_watermark, True).region
    assert region is not None and batches_in(region.read()) == [(0, 2), (2, 4), (4, 5)]


def test_offset_for_timestamp_finds_the_first_batch_at_or_after() -> None:
    clock = ManualClock(start_ms=10_000)
    plog = open_log(clock=clock, segment_bytes=300)
    stamps = [10_000, 10_050, 10_020, 10_100, 10_100, 10_300, 10_200, 10_400, 10_500]
    for ts in stamps:
        append(plog, 1, ts=ts)
    plog.flush()
    assert len(plog.segments) > 2
    for target in range(9_900, 10_600, 10):
        expected = next(
            ((i, ts) for i, ts in enumerate(stamps) if ts >= target),
            None,
        )
        assert plog.offset_for_timestamp(target) == expected, target


def test_offset_for_timestamp_ignores_data_above_the_high_watermark() -> None:
    clock = ManualClock(start_ms=10_000)
    plog = open_log(clock=clock)
    append(plog, 1, ts=10_000)
    plog.flush()
    append(plog, 1, ts=20_000)
    assert plog.offset_for_timestamp(15_000) is None
    plog.flush()
    assert plog.offset_for_timestamp(15_000) == (1, 20_000)


def test_offset_for_timestamp_survives_a_clean_reopen() -> None:
    fs = SimFileSystem()
    clock = ManualClock(start_ms=10_000)
    config = LogConfig(index_interval_bytes=150, segment_bytes=100_000)
    plog, _ = open_partition(fs, DIR, "t", 0, config, clock, 0, False)
    stamps = [10_000, 10_000, 10_000, 10_000, 10_900, 10_100]
    for ts in stamps:
        append(plog, 1, ts=ts)
    plog.flush()
    plog.close()
    reopened, stats = open_partition(fs, DIR, "t", 0, config, clock, 6, True)
    assert stats.segments_scanned == 0, "indexes were trusted"
    assert reopened.offset_for_timestamp(10_500) == (4, 10_900)


def test_delete_oldest_segments_spares_the_active_and_unflushed_segments() -> None:
    plog = open_log(segment_bytes=250)
    for _ in range(6):
        append(plog)
    plog.flush()
    for _ in range(6):
        append(plog)
    flushed = plog.flushed_offset
    count = len(plog.segments)
    deleted = plog.delete_oldest_segments(count + 5)
    assert deleted < count
    assert deleted > 0
    first = plog.segments[0]
    assert first is plog.active or first.next_offset > flushed, "unflushed data stays"
    assert plog.log_start_offset <= flushed
    assert plog.log_end_offset == 12
