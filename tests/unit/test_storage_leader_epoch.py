"""The leader epoch cache: Kafka's semantics, its checkpoint file, and the partition log
keeping it (appends, truncation, retention, a file that is missing, torn, corrupt or
stale, and writes that fail)."""

from __future__ import annotations

import errno
from collections.abc import Callable

import pytest

from onceflow.clock import ManualClock
from onceflow.records.batch import BatchHeader, validate_produced_batches
from onceflow.records.builder import build_batch
from onceflow.storage.failures import LogOffline, OutOfSpace
from onceflow.storage.fs import Fault, SimFileSystem
from onceflow.storage.leader_epoch import (
    CHECKPOINT_FILE,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    LeaderEpochCache,
    decode_checkpoint,
    encode_checkpoint,
)
from onceflow.storage.partition_log import LogConfig, PartitionLog
from onceflow.storage.recovery import open_partition

DIR = "/data/t-0"
CHECKPOINT = f"{DIR}/{CHECKPOINT_FILE}"
UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def cache_with(*entries: tuple[int, int], fs: SimFileSystem | None = None) -> LeaderEpochCache:
    fs = fs or SimFileSystem()
    fs.makedirs(DIR)
    cache = LeaderEpochCache(fs, DIR)
    for epoch, start in entries:
        assert cache.assign(epoch, start)
    return cache


def broken_remove(path: str) -> None:
    raise OSError(errno.EIO, "remove failed", path)


def stored(fs: SimFileSystem) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in decode_checkpoint(fs.read_file(CHECKPOINT))]


# ---- the cache -------------------------------------------------------------------------


def test_assign_appends_new_epochs_and_writes_kafkas_checkpoint_format() -> None:
    fs = SimFileSystem()
    cache = cache_with((1, 0), (3, 10), (5, 20), fs=fs)
    assert cache.entries == [EpochEntry(1, 0), EpochEntry(3, 10), EpochEntry(5, 20)]
    assert cache.latest_epoch == 5 and cache.start_of_latest() == 20
    assert fs.read_file(CHECKPOINT) == b"0\n3\n1 0\n3 10\n5 20\n"


def test_the_same_epoch_at_a_later_offset_changes_nothing() -> None:
    fs = SimFileSystem()
    cache = cache_with((1, 0), (3, 10), fs=fs)
    steps = fs.steps
    assert cache.assign(3, 15) is False
    assert cache.assign(3, 10) is False
    assert fs.steps == steps, "nothing written"
    assert cache.entries == [(1, 0), (3, 10)]


def test_the_same_epoch_at_an_earlier_offset_moves_its_start() -> None:
    fs = SimFileSystem()
    cache = cache_with((1, 0), (3, 10), fs=fs)
    assert cache.assign(3, 7)
    assert cache.entries == [(1, 0), (3, 7)]
    assert stored(fs) == [(1, 0), (3, 7)]


def test_a_lower_epoch_replaces_the_entries_it_contradicts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Kafka's assign: the new entry wins, entries of higher epochs or later starts go."""
    fs = SimFileSystem()
    cache = cache_with((1, 0), (3, 10), (5, 20), fs=fs)
    assert cache.assign(4, 15)
    assert cache.entries == [(1, 0), (3, 10), (4, 15)]
    assert cache.assign(2, 30)  # above every start but below epoch 3: 3 and 4 go
    assert cache.entries == [(1, 0), (2, 30)]
    assert stored(fs) == [(1, 0), (2, 30)]
    assert "replaces conflicting entries" in caplog.text


def test_a_new_epoch_at_the_start_of_an_empty_one_replaces_it_quietly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cache = cache_with((1, 0), (3, 10))
    assert cache.assign(4, 10)  # leader 3 wrote nothing before leader 4 took over
    assert cache.entries == [(1, 0), (4, 10)]
    assert "conflicting" not in caplog.text


@pytest.mark.parametrize(("epoch", "start"), [(-1, 0), (0, -1)])
def test_negative_entries_are_refused(epoch: int, start: int) -> None:
    with pytest.raises(ValueError):
        cache_with().assign(epoch, start)


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        (UNDEFINED_EPOCH, UNDEFINED),
        (5, (5, 100)),  # the latest epoch ends at the log end
        (3, (3, 20)),  # a known epoch ends where the next starts
        (1, (1, 10)),
        (4, (3, 20)),  # unknown, between: the largest below it, ending where 5 starts
        (2, (1, 10)),
        (0, (0, 0)),  # below the first entry: Kafka answers the asked epoch, first start
        (6, UNDEFINED),  # above every entry
    ],
)
def test_end_offset_for(requested: int, expected: tuple[int, int]) -> None:
    cache = cache_with((1, 0), (3, 10), (5, 20))
    assert cache.end_offset_for(requested, 100) == expected


def test_end_offset_for_without_entries_is_undefined() -> None:
    cache = cache_with()
    assert cache.latest_epoch is None and cache.start_of_latest() == -1
    assert cache.end_offset_for(0, 50) == UNDEFINED
    assert cache.end_offset_for(UNDEFINED_EPOCH, 50) == UNDEFINED


def test_end_offset_for_below_the_first_entry_after_retention() -> None:
    cache = cache_with((2, 0), (4, 30))
    cache.truncate_from_start(35)
    assert cache.entries == [(4, 35)]
    assert cache.end_offset_for(3, 90) == (3, 35)
    assert cache.end_offset_for(4, 90) == (4, 90)


@pytest.mark.parametrize(
    ("offset", "epoch"), [(0, None), (4, None), (5, 1), (9, 1), (10, 3), (19, 3), (20, 5), (99, 5)]
)
def test_epoch_for_offset(offset: int, epoch: int | None) -> None:
    assert cache_with((1, 5), (3, 10), (5, 20)).epoch_for_offset(offset) == epoch


def test_truncate_from_end_drops_entries_starting_at_or_after_the_cut() -> None:
    fs = SimFileSystem()
    cache = cache_with((1, 0), (3, 10), (5, 20), fs=fs)
    assert cache.truncate_from_end(21) is False
    assert cache.truncate_from_end(20)
    assert cache.entries == [(1, 0), (3, 10)]
    assert cache.truncate_from_end(5)
    assert cache.entries == [(1, 0)]
    assert stored(fs) == [(1, 0)]


@pytest.mark.parametrize(
    ("start", "expected"),
    [
        (0, [(1, 0), (3, 10), (5, 20)]),  # nothing before it
        (4, [(1, 4), (3, 10), (5, 20)]),  # the first epoch now starts later
        (10, [(3, 10), (5, 20)]),  # exactly at an entry: kept, older ones go
        (15, [(3, 15), (5, 20)]),
        (25, [(5, 25)]),
    ],
)
def test_truncate_from_start(start: int, expected: list[tuple[int, int]]) -> None:
    fs = SimFileSystem()
    cache = cache_with((1, 0), (3, 10), (5, 20), fs=fs)
    assert cache.truncate_from_start(start) is (start != 0)
    assert cache.entries == expected
    assert stored(fs) == expected


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"0\n",
        b"0\n2\n1 0\n3 10",  # torn: no final newline
        b"0\n2\n1 0\n",  # fewer entries than the count
        b"0\n1\n1 0\n3 10\n",  # more
        b"1\n1\n1 0\n",  # unknown version
        b"0\n2\n3 0\n1 10\n",  # epochs going down
        b"0\n2\n1 10\n3 10\n",  # offsets not rising
        b"0\n1\n1\n",
        b"0\n1\n-1 0\n",
        b"0\n1\nx 0\n",
        b"\xff\xfe",
    ],
)
def test_a_damaged_checkpoint_does_not_parse(raw: bytes) -> None:
    with pytest.raises(ValueError):
        decode_checkpoint(raw)


def test_checkpoint_round_trip() -> None:
    entries = [EpochEntry(0, 0), EpochEntry(7, 12), EpochEntry(9, 1 << 40)]
    assert decode_checkpoint(encode_checkpoint(entries)) == entries
    assert decode_checkpoint(encode_checkpoint([])) == []


def test_a_checkpoint_that_cannot_be_written_is_removed_and_memory_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fs = SimFileSystem()
    cache = cache_with((1, 0), fs=fs)
    fs.inject(Fault("write", path=CHECKPOINT_FILE, error=errno.ENOSPC))
    assert cache.assign(2, 10)
    assert cache.entries == [(1, 0), (2, 10)]
    assert not fs.exists(CHECKPOINT), "a stale file could look valid: it is removed"
    assert "rebuilt from the log at the next start" in caplog.text
    cache.assign(3, 20)  # space again: the whole file comes back
    assert stored(fs) == [(1, 0), (2, 10), (3, 20)]


def test_when_even_the_removal_fails_the_owner_is_told(monkeypatch: pytest.MonkeyPatch) -> None:
    fs = SimFileSystem()
    cache = cache_with((1, 0), fs=fs)
    fs.inject(Fault("write", path=CHECKPOINT_FILE, error=errno.EIO, repeat=True))

    monkeypatch.setattr(fs, "remove", broken_remove)
    with pytest.raises(OSError):
        cache.assign(2, 10)  # nobody to tell: raised
    failures: list[OSError] = []
    cache.on_failure = failures.append
    cache.assign(3, 20)
    assert len(failures) == 1


# ---- loading ---------------------------------------------------------------------------


def headers(*pairs: tuple[int, int]) -> list[BatchHeader]:
    """Batch headers with (partitionLeaderEpoch, base offset), one offset each."""
    return [BatchHeader(base, 61, epoch, 2, 0, 0, 0, 0, 0, -1, -1, -1, 1) for epoch, base in pairs]


def test_load_rebuilds_a_missing_file_from_the_batch_headers() -> None:
    fs = SimFileSystem()
    fs.makedirs(DIR)
    cache = LeaderEpochCache(fs, DIR)
    log = headers((-1, 0), (0, 1), (0, 2), (2, 3), (2, 4), (5, 5))
    assert cache.load(0, 6, 5, lambda: log) is True
    assert cache.entries == [(0, 1), (2, 3), (5, 5)]
    assert stored(fs) == [(0, 1), (2, 3), (5, 5)]


def test_load_of_an_empty_log_writes_nothing() -> None:
    fs = SimFileSystem()
    fs.makedirs(DIR)
    cache = LeaderEpochCache(fs, DIR)
    cache.load(0, 0, None, list)
    assert cache.entries == [] and not fs.exists(CHECKPOINT)


def test_load_trusts_a_sound_file_without_walking_the_log() -> None:
    fs = SimFileSystem()
    cache_with((0, 0), (4, 30), fs=fs)
    steps = fs.steps
    cache = LeaderEpochCache(fs, DIR)

    def walk() -> list[BatchHeader]:
        raise AssertionError("a sound checkpoint needs no walk")

    assert cache.load(0, 50, 4, walk) is False
    assert cache.entries == [(0, 0), (4, 30)]
    assert fs.steps == steps, "nothing rewritten"


def test_load_cuts_entries_the_log_does_not_reach_and_moves_the_first_up() -> None:
    """The checkpoint is written before the batches of a new epoch: a crash can keep the
    entry and lose the data."""
    fs = SimFileSystem()
    cache_with((0, 0), (4, 30), (6, 50), fs=fs)
    cache = LeaderEpochCache(fs, DIR)
    assert cache.load(10, 50, 4, list) is False
    assert cache.entries == [(0, 10), (4, 30)]
    assert stored(fs) == [(0, 10), (4, 30)]


@pytest.mark.parametrize(
    "damage",
    [
        lambda raw: raw[:-3],  # torn
        lambda raw: b"\x00" * len(raw),  # zeros where a write was lost
        lambda raw: raw.replace(b"\n3\n", b"\n9\n"),  # wrong count
        lambda raw: b"0\n1\n0 0\n",  # sound, but stale: lacks the last batch's epoch
    ],
)
def test_load_rebuilds_a_torn_corrupt_or_stale_file(damage: Callable[[bytes], bytes]) -> None:
    fs = SimFileSystem()
    cache_with((0, 0), (2, 3), (5, 5), fs=fs)
    fs.write_file_atomic(CHECKPOINT, damage(fs.read_file(CHECKPOINT)))
    cache = LeaderEpochCache(fs, DIR)
    log = headers((0, 0), (2, 3), (5, 5), (5, 6))
    assert cache.load(0, 7, 5, lambda: log) is True
    assert cache.entries == [(0, 0), (2, 3), (5, 5)]
    assert stored(fs) == [(0, 0), (2, 3), (5, 5)]


# ---- the partition log keeps it ----------------------------------------------------------


def open_log(fs: SimFileSystem, **overrides: int) -> PartitionLog:
    config = LogConfig(**{"index_interval_bytes": 100, **overrides})  # type: ignore[arg-type]
    plog, _ = open_partition(fs, DIR, "t", 0, config, ManualClock(1_000), 0, False)
    return plog


def append(plog: PartitionLog, count: int = 1) -> None:
    data = build_batch([(b"k", b"v" * 40, ()) for _ in range(count)], timestamp_ms=1_000)
    plog.append_batches(data, validate_produced_batches(data, 1 << 20))


def epoch_log(fs: SimFileSystem, **overrides: int) -> PartitionLog:
    """Epoch 0 at 0, epoch 3 at 2, epoch 4 at 5 (ending at 7)."""
    plog = open_log(fs, **overrides)
    append(plog, 2)
    plog.leader_epoch = 3
    append(plog)
    append(plog, 2)
    plog.leader_epoch = 4
    append(plog)
    append(plog)
    return plog


def test_a_new_logs_first_epoch_is_written_at_the_first_roll_not_the_first_append() -> None:
    """A missing file makes the next start rebuild the entries from the log, so the first
    entry needs no file (and fsync) of its own until the log rolls or closes."""
    fs = SimFileSystem()
    plog = open_log(fs)
    append(plog, 2)
    assert plog.epochs.entries == [(0, 0)]
    assert not fs.exists(CHECKPOINT)
    plog.roll()
    assert stored(fs) == [(0, 0)]


def test_a_deferred_first_epoch_is_rebuilt_after_a_crash_and_written_at_close() -> None:
    fs = SimFileSystem()
    plog = open_log(fs)
    plog.leader_epoch = 6
    append(plog, 2)
    plog.flush()
    fs.crash()
    reopened = open_log(fs)
    assert reopened.epochs.entries == [(6, 0)]
    assert stored(fs) == [(6, 0)], "the start that rebuilt it wrote it"
    fresh = SimFileSystem()
    other = open_log(fresh)
    append(other)
    other.close()
    assert stored(fresh) == [(0, 0)]


def test_a_second_epoch_is_written_at_once() -> None:
    fs = SimFileSystem()
    plog = open_log(fs)
    append(plog)
    plog.epochs.assign(3, plog.log_end_offset)  # a new leader's epoch, before any data
    assert stored(fs) == [(0, 0), (3, 1)]


def test_leader_appends_record_each_new_epoch_once() -> None:
    fs = SimFileSystem()
    plog = epoch_log(fs)
    assert plog.epochs.entries == [(0, 0), (3, 2), (4, 5)]
    assert stored(fs) == [(0, 0), (3, 2), (4, 5)]
    assert plog.epochs.end_offset_for(3, plog.log_end_offset) == (3, 5)
    assert plog.epochs.end_offset_for(4, plog.log_end_offset) == (4, 7)


@pytest.mark.parametrize("damage", ["missing", "torn", "corrupt", "stale"])
def test_reopening_rebuilds_a_bad_checkpoint_from_the_log(damage: str) -> None:
    fs = SimFileSystem()
    plog = epoch_log(fs, segment_bytes=250)
    assert len(plog.segments) > 1
    plog.flush()
    if damage == "missing":
        fs.remove(CHECKPOINT)
    elif damage == "torn":
        fs.write_file_atomic(CHECKPOINT, fs.read_file(CHECKPOINT)[:-4])
    elif damage == "corrupt":
        fs.write_file_atomic(CHECKPOINT, b"0\n3\n0 0\n4 2\n3 5\n")
    else:
        fs.write_file_atomic(CHECKPOINT, b"0\n2\n0 0\n3 2\n")
    fs.crash()
    reopened = open_log(fs, segment_bytes=250)
    assert reopened.epochs.entries == [(0, 0), (3, 2), (4, 5)]
    assert stored(fs) == [(0, 0), (3, 2), (4, 5)]


def test_an_epoch_whose_data_a_crash_lost_is_dropped_at_reopen() -> None:
    fs = SimFileSystem()
    plog = open_log(fs)
    append(plog, 2)
    plog.flush()
    plog.leader_epoch = 7
    append(plog)  # the checkpoint (durable) names epoch 7 at 2; the batch is not synced
    assert stored(fs) == [(0, 0), (7, 2)]
    fs.crash()
    reopened = open_log(fs)
    assert reopened.log_end_offset == 2
    assert reopened.epochs.entries == [(0, 0)]
    assert stored(fs) == [(0, 0)]


def test_old_data_without_epochs_has_no_entries() -> None:
    fs = SimFileSystem()
    plog = open_log(fs)
    plog.leader_epoch = -1
    append(plog, 3)
    assert plog.epochs.entries == [] and plog.epochs.latest_epoch is None
    plog.leader_epoch = 2
    append(plog)
    assert plog.epochs.entries == [(2, 3)]
    plog.flush()
    fs.remove(CHECKPOINT)
    assert open_log(fs).epochs.entries == [(2, 3)]


def test_a_checkpoint_that_cannot_be_written_does_not_fail_the_append() -> None:
    fs = SimFileSystem()
    plog = open_log(fs)
    append(plog)
    plog.leader_epoch = 2
    fs.inject(Fault("write", path=CHECKPOINT_FILE, error=errno.ENOSPC, repeat=True))
    append(plog)
    assert plog.log_end_offset == 2 and plog.offline is None
    assert plog.epochs.entries == [(0, 0), (2, 1)]
    assert not fs.exists(CHECKPOINT)
    plog.flush()
    fs.faults.clear()
    fs.crash()
    assert open_log(fs).epochs.entries == [(0, 0), (2, 1)]


def test_a_checkpoint_that_can_neither_be_written_nor_removed_takes_the_log_offline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fs = SimFileSystem()
    plog = open_log(fs)
    append(plog)
    plog.leader_epoch = 2
    fs.inject(Fault("write", path=CHECKPOINT_FILE, error=errno.EIO, repeat=True))

    monkeypatch.setattr(fs, "remove", broken_remove)
    with pytest.raises(LogOffline):
        append(plog)
    assert plog.offline is not None
    assert plog.log_end_offset == 1, "the batch was not written"


def test_an_append_that_finds_the_disk_full_takes_its_new_epoch_back() -> None:
    fs = SimFileSystem()
    plog = open_log(fs)
    append(plog)
    plog.leader_epoch = 5
    fs.inject(Fault("write", path=".log", error=errno.ENOSPC))
    with pytest.raises(OutOfSpace):
        append(plog)
    assert plog.epochs.entries == [(0, 0)]
    assert stored(fs) == [(0, 0)]
    append(plog)
    assert plog.epochs.entries == [(0, 0), (5, 1)]


def test_truncation_drops_the_epochs_of_the_removed_tail() -> None:
    fs = SimFileSystem()
    plog = epoch_log(fs)
    plog.truncate_to(4)
    assert plog.epochs.entries == [(0, 0), (3, 2)]
    assert stored(fs) == [(0, 0), (3, 2)]
    plog.truncate_to(2)
    assert plog.epochs.entries == [(0, 0)]


def test_truncating_at_the_end_drops_an_epoch_never_written_in() -> None:
    """A leader records its epoch at the log end when it takes over; if it loses the lead
    before appending, the entry must not survive as a follower."""
    fs = SimFileSystem()
    plog = epoch_log(fs)
    plog.epochs.assign(9, plog.log_end_offset)
    assert plog.truncate_to(plog.log_end_offset) is False
    assert plog.epochs.latest_epoch == 4


def test_retention_moves_the_first_epoch_up() -> None:
    fs = SimFileSystem()
    plog = epoch_log(fs, segment_bytes=250)
    plog.flush()
    assert [s.base_offset for s in plog.segments] == [0, 2, 3, 5]
    assert plog.delete_oldest_segments(2) == 2
    assert plog.log_start_offset == 3
    assert plog.epochs.entries == [(3, 3), (4, 5)]
    assert stored(fs) == [(3, 3), (4, 5)]
    fs.crash()
    assert open_log(fs, segment_bytes=250).epochs.entries == [(3, 3), (4, 5)]
