"""open_partition: what a clean start trusts, what an unclean start scans, what it cuts."""

from __future__ import annotations

import os

import pytest
from tests.simulation.storage_checks import Journal, check_indexes_match_rebuild, check_log

from onceflow.clock import ManualClock
from onceflow.records.batch import validate_produced_batches
from onceflow.records.builder import build_batch
from onceflow.storage import segment as segment_module
from onceflow.storage.fs import SimFileSystem
from onceflow.storage.partition_log import LogConfig, PartitionLog
from onceflow.storage.recovery import RecoveryStats, open_partition

DIR = "/data/t-0"
CONFIG = LogConfig(segment_bytes=500, index_interval_bytes=100)


def reopen(
    fs: SimFileSystem, recovery_point: int, clean: bool, config: LogConfig = CONFIG
) -> tuple[PartitionLog, RecoveryStats]:
    return open_partition(fs, DIR, "t", 0, config, ManualClock(), recovery_point, clean)


def build(batches: int, config: LogConfig = CONFIG) -> tuple[SimFileSystem, Journal]:
    """A flushed, cleanly closed log of `batches` one-record batches over several segments."""
    fs = SimFileSystem(seed=7)
    plog, _ = reopen(fs, 0, False, config)
    journal = Journal()
    for i in range(batches):
        data = build_batch(
            [(b"k", b"value-%d" % i * 4, [])], timestamp_ms=ManualClock().now_ms() + i
        )
        headers = validate_produced_batches(data, 1 << 20)
        journal.intend(plog, data, headers)
        plog.append_batches(data, headers)
    plog.flush()
    journal.acked = plog.flushed_offset
    plog.close()
    return fs, journal


def seg_path(base: int, suffix: str) -> str:
    return os.path.join(DIR, f"{base:020d}{suffix}")


def bases(plog: PartitionLog) -> list[int]:
    return [s.base_offset for s in plog.segments]


def test_clean_start_trusts_every_segment_with_indexes() -> None:
    fs, journal = build(30)
    plog, stats = reopen(fs, 30, True)
    assert len(plog.segments) > 3
    # The active segment may be too small to have index files; everything else is trusted.
    assert stats.segments_scanned <= 1
    check_log(plog, journal)


def test_clean_start_rebuilds_only_the_segment_with_a_damaged_index() -> None:
    fs, journal = build(30)
    probe, _ = reopen(fs, 30, True)
    middle = bases(probe)[1]
    probe.close()
    raw = fs.read_file(seg_path(middle, ".index"))
    fs.write_file_atomic(seg_path(middle, ".index"), raw[:-3])
    fs.remove(seg_path(bases(probe)[2], ".timeindex"))
    plog, stats = reopen(fs, 30, True)
    assert 2 <= stats.segments_scanned <= 3
    assert stats.bytes_truncated == 0 and stats.segments_deleted == 0
    check_log(plog, journal)


def test_unclean_start_scans_from_the_segment_holding_the_recovery_point() -> None:
    fs, journal = build(30)
    probe, _ = reopen(fs, 30, True)
    segment_bases = bases(probe)
    probe.close()
    point = segment_bases[2] + 1
    plog, stats = reopen(fs, point, False)
    assert stats.segments_scanned == len(segment_bases) - 2
    check_log(plog, journal)


def test_unclean_start_truncates_a_torn_tail() -> None:
    fs, journal = build(10)
    probe, _ = reopen(fs, 10, True)
    active = probe.active.log_path
    probe.close()
    handle = fs.open(active)
    handle.append(b"\x00\x00\x00\x00\x00\x00\x00\x0a\x00\x00\x01\x00partial")
    plog, stats = reopen(fs, 0, False)
    assert stats.bytes_truncated == 19
    check_log(plog, journal)


def test_corrupt_batch_mid_log_cuts_there_and_deletes_later_segments() -> None:
    """Nothing after a hole can be trusted: the corrupt batch and all later segments go."""
    fs, journal = build(30)
    probe, _ = reopen(fs, 30, True)
    victim = probe.segments[1]
    first, second = victim.read_headers()[:2]
    later = bases(probe)[2:]
    probe.close()
    raw = bytearray(fs.read_file(victim.log_path))
    raw[second.position + 70] ^= 0x55
    fs.remove(victim.log_path)
    fs.open(victim.log_path).append(bytes(raw))
    plog, stats = reopen(fs, 0, False)
    assert stats.segments_deleted == len(later)
    assert plog.log_end_offset == first.header.next_offset
    assert all(not fs.exists(seg_path(b, ".log")) for b in later)
    journal.forget_from(plog.log_end_offset)
    journal.acked = plog.log_end_offset
    check_log(plog, journal)


def test_stray_and_orphan_files_are_removed() -> None:
    fs, journal = build(10)
    for name in ("00000000000000000003.index.tmp", "00000000000000000000.log.deleted", "x.cleaned"):
        fs.open(os.path.join(DIR, name)).append(b"junk")
    fs.open(seg_path(9999, ".index")).append(b"\x00" * 8)
    fs.open(seg_path(9999, ".timeindex")).append(b"\x00" * 12)
    plog, _ = reopen(fs, 10, True)
    names = fs.listdir(DIR)
    assert not [n for n in names if n.endswith((".tmp", ".deleted", ".cleaned"))]
    assert f"{9999:020d}.index" not in names and f"{9999:020d}.timeindex" not in names
    check_log(plog, journal)


def test_an_empty_directory_opens_as_an_empty_log() -> None:
    fs = SimFileSystem()
    plog, _ = reopen(fs, 0, False)
    assert (plog.log_start_offset, plog.log_end_offset, plog.high_watermark) == (0, 0, 0)
    assert fs.exists(seg_path(0, ".log"))


@pytest.mark.parametrize("window", [61, 100, 333])
def test_recovery_with_batches_straddling_the_read_window(
    monkeypatch: pytest.MonkeyPatch, window: int
) -> None:
    """Recovery and lookups read in windows; batches larger than one, or across two, work."""
    big = LogConfig(segment_bytes=1 << 20, index_interval_bytes=100)
    fs, journal = build(25, big)
    monkeypatch.setattr(segment_module, "_RECOVERY_WINDOW", window)
    monkeypatch.setattr(segment_module, "_SCAN_WINDOW", window)
    probe, _ = reopen(fs, 0, False, big)
    size = probe.active.size
    probe.close()
    fs.open(seg_path(0, ".log")).append(b"\x01" * 40)  # a torn tail after the last batch
    plog, stats = reopen(fs, 0, False, big)
    assert stats.bytes_truncated == 40
    assert plog.active.size == size
    check_log(plog, journal)
    check_indexes_match_rebuild(plog)


def test_a_torn_txn_index_is_repaired_even_when_it_holds_nothing() -> None:
    """A crash can tear a .txnindex whose abort marker did not survive either. Rebuilt
    entries are then empty, and the file used to stay torn: every later start distrusted
    it, deleted the producer snapshots and replayed the whole log."""
    fs, _journal = build(30)
    fs.write_file_atomic(seg_path(0, ".txnindex"), b"\x00" * 20)  # not a whole entry
    plog, stats = reopen(fs, 0, False)
    assert stats.batches_replayed == 30, "an unreadable index: producer state from scratch"
    assert not fs.exists(seg_path(0, ".txnindex")), "repaired: no aborted transactions"
    plog.close()
    _plog, stats = reopen(fs, plog.log_end_offset, True)
    assert stats.batches_replayed == 0, "the shutdown snapshot is trusted again"
