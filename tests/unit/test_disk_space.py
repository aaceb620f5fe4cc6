"""The free-space guard: its threshold, when it reads statvfs, and its states."""

from __future__ import annotations

import logging

import pytest

from onceflow.clock import ManualClock
from onceflow.errors import ErrorCode
from onceflow.storage.disk_space import FULL_HOLD_MS, RECHECK_MS, DiskSpaceGuard, DiskState
from onceflow.storage.failures import OutOfSpace
from onceflow.storage.fs import DiskUsage, SimFileSystem

MIB = 1 << 20


class CountingFS(SimFileSystem):
    def __init__(self, total: int, free: int) -> None:
        super().__init__()
        self.total, self.free, self.reads = total, free, 0

    def disk_usage(self, path: str) -> DiskUsage:
        self.reads += 1
        return DiskUsage(self.total, self.free)


def guard(
    fs: CountingFS, clock: ManualClock, min_bytes: int = MIB, percent: float = 5.0
) -> DiskSpaceGuard:
    g = DiskSpaceGuard(fs, "/data", clock, min_bytes, percent)
    g.refresh(force=True)
    return g


@pytest.mark.parametrize(
    ("total", "min_bytes", "percent", "threshold"),
    [
        (1000 * MIB, 1024 * MIB, 5.0, 50 * MIB),  # a small disk: the percentage
        (100_000 * MIB, 1024 * MIB, 5.0, 1024 * MIB),  # a big one: the absolute bytes
        (1000 * MIB, 0, 5.0, 0),  # either at 0: no check
        (1000 * MIB, MIB, 0.0, 0),
    ],
)
def test_the_threshold_is_the_smaller_of_bytes_and_percent(
    total: int, min_bytes: int, percent: float, threshold: int
) -> None:
    g = guard(CountingFS(total, total), ManualClock(), min_bytes, percent)
    assert g.threshold == threshold


def test_statvfs_is_read_once_a_second_far_from_the_threshold_and_often_near_it() -> None:
    fs, clock = CountingFS(1000 * MIB, 500 * MIB), ManualClock()
    g = guard(fs, clock, min_bytes=10 * MIB)
    reads = fs.reads
    for _ in range(100):
        g.note_written(64 * 1024)
        g.admit_client_write()
    assert fs.reads == reads  # 6.4 MB written of a 490 MB margin: the estimate suffices
    clock.advance(RECHECK_MS)
    g.admit_client_write()
    assert fs.reads == reads + 1
    fs.free = 12 * MIB  # 2 MB above the threshold: each 1 MB written uses half of it
    g.refresh(force=True)
    reads = fs.reads
    g.note_written(MIB)
    g.admit_client_write()
    assert fs.reads == reads + 1


def test_below_the_threshold_client_writes_are_refused_until_space_is_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    fs, clock = CountingFS(1000 * MIB, 500 * MIB), ManualClock()
    g = guard(fs, clock, min_bytes=10 * MIB)
    fs.free = 5 * MIB
    clock.advance(RECHECK_MS)
    for _ in range(3):
        with pytest.raises(OutOfSpace) as caught:
            g.admit_client_write()
        assert caught.value.code is ErrorCode.kafka_storage_error
        assert "5242880 bytes free" in caught.value.message
    assert g.state is DiskState.LOW
    fs.free = 20 * MIB
    clock.advance(RECHECK_MS)
    g.admit_client_write()
    assert g.state is DiskState.OK
    assert caplog.text.count("ok -> low") == 1 and caplog.text.count("low -> ok") == 1


def test_full_is_left_only_when_space_grew_or_after_a_while(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    fs, clock = CountingFS(1000 * MIB, 0), ManualClock()
    g = guard(fs, clock, min_bytes=0)  # the check off: only real failures count
    g.note_out_of_space()
    assert g.state is DiskState.FULL
    fs.free = 100 * 1024  # a little freed: not enough to leave
    clock.advance(RECHECK_MS)
    with pytest.raises(OutOfSpace):
        g.admit_client_write()
    fs.free = 2 * MIB
    clock.advance(RECHECK_MS)
    g.admit_client_write()
    assert g.state is DiskState.OK
    # A failure statvfs cannot explain (a quota, inodes): retried after the hold.
    g.note_out_of_space()
    clock.advance(RECHECK_MS)
    assert g.refresh() is DiskState.FULL
    clock.advance(FULL_HOLD_MS)
    assert g.refresh() is DiskState.OK
    assert caplog.text.count("ok -> full") == 2 and caplog.text.count("full -> ok") == 2
