"""Storage faults through the file-system seam: a write that fails part-way (ENOSPC, EIO), a
cut-back that fails too, a failed fsync, for segments, indexes, the transaction index,
producer snapshots and the checkpoint.

Each test checks the same promise: the log stays whole (only whole batches in the files, and
the state in memory matches them), nothing is acknowledged unless it is readable, and
recovery after a crash gives back exactly what was acknowledged.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Mapping

import pytest
from tests.simulation.storage_checks import Journal, check_log

from onceflow.clock import ManualClock
from onceflow.errors import ErrorCode, KafkaError
from onceflow.records.batch import scan_batches, validate_produced_batches
from onceflow.records.builder import build_batch
from onceflow.storage.failures import LogOffline, OutOfSpace
from onceflow.storage.fs import Fault, SimFileSystem, TornWrite
from onceflow.storage.log_manager import CLEAN_SHUTDOWN, RECOVERY_CHECKPOINT, LogManager
from onceflow.storage.partition_log import AppendResult, LogConfig, PartitionLog
from onceflow.storage.recovery import open_partition

ROOT = "/data"
DIR = f"{ROOT}/t-0"
PID = 7


def open_log(fs: SimFileSystem, clean: bool = False, **overrides: int) -> PartitionLog:
    config = LogConfig(**{"index_interval_bytes": 100, **overrides})  # type: ignore[arg-type]
    plog, _ = open_partition(fs, DIR, "t", 0, config, ManualClock(), 0, clean)
    return plog


def data_batch(seq: int = -1, count: int = 1, txn: bool = False, size: int = 40) -> bytes:
    idempotent = seq >= 0
    return build_batch(
        [(b"k", bytes([65 + seq % 26]) * size, ()) for _ in range(count)],
        timestamp_ms=1_700_000_000_000,
        producer_id=PID if idempotent else -1,
        producer_epoch=0 if idempotent else -1,
        base_sequence=seq,
        transactional=txn,
    )


def append(plog: PartitionLog, data: bytes, journal: Journal | None = None) -> AppendResult:
    headers = validate_produced_batches(data, 1 << 20)
    if journal is not None:
        journal.intend(plog, data, headers)
    return plog.append_batches(data, headers)


def whole_batches(fs: SimFileSystem, plog: PartitionLog) -> list[int]:
    """Base offsets of the batches in the segment files; asserts nothing else is there."""
    bases = []
    for segment in plog.segments:
        raw = fs.read_file(segment.log_path)
        found, end = scan_batches(raw)
        assert end == len(raw), f"{segment.log_path}: a torn batch at byte {end}"
        bases += [b.header.base_offset for b in found]
    return bases


def crash_and_reopen(fs: SimFileSystem) -> PartitionLog:
    fs.crash()
    return open_log(fs)


# ---- the seam itself -------------------------------------------------------------------


def test_a_write_that_fails_part_way_is_cut_back_before_the_error_is_raised() -> None:
    fs = SimFileSystem()
    handle = fs.open("/f")
    handle.append(b"a" * 10)
    fs.inject(Fault("write", error=errno.ENOSPC, keep=0.5))
    with pytest.raises(OSError) as caught:
        handle.append(b"b" * 100)
    assert caught.value.errno == errno.ENOSPC
    assert fs.read_file("/f") == b"a" * 10
    handle.append(b"c")
    assert fs.read_file("/f") == b"a" * 10 + b"c"


def test_a_failed_cut_back_is_a_torn_write() -> None:
    fs = SimFileSystem()
    handle = fs.open("/f")
    fs.inject(Fault("write", error=errno.EIO, keep=0.5))
    fs.inject(Fault("truncate", error=errno.EIO))
    with pytest.raises(TornWrite):
        handle.append(b"b" * 100)
    assert fs.read_file("/f") == b"b" * 50


def test_a_full_file_system_writes_what_fits_then_cuts_it_back() -> None:
    fs = SimFileSystem(capacity=64)
    handle = fs.open("/f")
    handle.append(b"a" * 60)
    with pytest.raises(OSError) as caught:
        handle.append(b"b" * 10)
    assert caught.value.errno == errno.ENOSPC
    assert fs.read_file("/f") == b"a" * 60
    assert fs.disk_usage("/").free == 4


def test_after_a_failed_fsync_a_later_successful_one_does_not_save_the_data() -> None:
    """Linux marks the pages clean after a failed writeback: the retry "succeeds" and a
    crash finds zeros. This is why a failed fsync must never be retried as if it worked."""
    fs = SimFileSystem()
    handle = fs.open("/f")
    fs.fsync_dir("/")
    handle.append(b"x" * 8)
    fs.inject(Fault("fsync", path="/f"))
    with pytest.raises(OSError):
        handle.fsync()
    handle.fsync()  # succeeds, but too late
    fs.crash()
    assert fs.read_file("/f") == bytes(8)


def test_a_whole_file_write_that_fails_keeps_the_old_content() -> None:
    fs = SimFileSystem()
    fs.write_file_atomic("/f", b"old")
    fs.inject(Fault("write", path="/f", error=errno.ENOSPC))
    with pytest.raises(OSError):
        fs.write_file_atomic("/f", b"new")
    fs.inject(Fault("fsync", path="/f"))
    with pytest.raises(OSError):
        fs.write_file_atomic("/f", b"new")
    fs.crash()
    assert fs.read_file("/f") == b"old"


# ---- segments: out of space is retriable, the log unchanged ------------------------------


@pytest.mark.parametrize("keep", [0.0, 0.3, 0.99])
def test_out_of_space_mid_batch_leaves_the_log_as_it_was_and_the_retry_succeeds(
    keep: float,
) -> None:
    fs = SimFileSystem()
    plog = open_log(fs)
    journal = Journal()
    append(plog, data_batch(0, 3), journal)
    plog.flush()
    journal.acked = plog.flushed_offset
    before = (plog.log_end_offset, plog.active.size, list(plog.active.offset_index.offsets))
    state = dict(plog.producer_state.producers)
    fs.inject(Fault("write", path=".log", error=errno.ENOSPC, keep=keep))
    retry = data_batch(3, 2)
    with pytest.raises(OutOfSpace) as caught:
        append(plog, retry, journal)
    assert caught.value.code is ErrorCode.kafka_storage_error
    assert plog.offline is None
    assert (plog.log_end_offset, plog.active.size, list(plog.active.offset_index.offsets)) == before
    assert plog.producer_state.producers == state
    assert whole_batches(fs, plog) == [0]
    # The producer's retry of the same batch goes in, in sequence, at the next offset.
    result = append(plog, retry, journal)
    assert (result.first_offset, result.duplicate) == (3, False)
    plog.flush()
    journal.acked = plog.flushed_offset
    check_log(plog, journal, recovered=False)
    recovered = crash_and_reopen(fs)
    assert whole_batches(fs, recovered) == [0, 3]
    check_log(recovered, journal)


def test_a_write_that_cannot_be_cut_back_takes_the_log_offline() -> None:
    fs = SimFileSystem()
    plog = open_log(fs)
    journal = Journal()
    append(plog, data_batch(0), journal)
    plog.flush()
    journal.acked = plog.flushed_offset
    offline: list[str] = []
    plog.on_offline = lambda p: offline.append(p.name)
    fs.inject(Fault("write", path=".log", error=errno.ENOSPC, keep=0.5))
    fs.inject(Fault("truncate", path=".log"))
    with pytest.raises(LogOffline):
        append(plog, data_batch(1), journal)
    assert offline == ["t-0"]
    for call in (
        lambda: append(plog, data_batch(1)),
        lambda: plog.read(0, 1 << 20, plog.high_watermark, True),
        plog.flush,
    ):
        with pytest.raises(LogOffline) as caught:
            call()
        assert caught.value.code is ErrorCode.kafka_storage_error
    # A restart recovers from the files alone: the torn tail goes, the acked batch stays.
    recovered = crash_and_reopen(fs)
    assert recovered.offline is None
    assert whole_batches(fs, recovered) == [0]
    check_log(recovered, journal)


def test_an_io_error_on_write_takes_the_log_offline_even_when_cut_back() -> None:
    """EIO is a failing disk, not a full one: nothing more is written to it."""
    fs = SimFileSystem()
    plog = open_log(fs)
    fs.inject(Fault("write", path=".log", error=errno.EIO, keep=0.0))
    with pytest.raises(LogOffline):
        append(plog, data_batch(0))
    assert plog.offline is not None and plog.log_end_offset == 0


# ---- fsync -----------------------------------------------------------------------------


def test_a_failed_fsync_is_never_retried_and_recovery_keeps_exactly_what_was_acked() -> None:
    fs = SimFileSystem(seed=3)
    plog = open_log(fs)
    journal = Journal()
    for seq in range(3):
        append(plog, data_batch(seq), journal)
    plog.flush()
    journal.acked = plog.flushed_offset
    append(plog, data_batch(3), journal)
    fs.inject(Fault("fsync", path=".log"))
    with pytest.raises(LogOffline):
        plog.flush()
    assert plog.high_watermark == 3 and plog.flushed_offset == 3  # nothing more acked
    with pytest.raises(LogOffline):
        plog.flush()  # never retried: the retry would "succeed" over lost pages
    recovered = crash_and_reopen(fs)
    # The unacknowledged batch's pages were lost (zeros): recovery cuts them off.
    assert whole_batches(fs, recovered) == [0, 1, 2]
    check_log(recovered, journal)


def test_a_failed_fsync_at_a_roll_takes_the_log_offline() -> None:
    fs = SimFileSystem()
    plog = open_log(fs, segment_bytes=300)
    append(plog, data_batch(0, size=200))
    fs.inject(Fault("fsync", path=".log"))
    with pytest.raises(LogOffline):
        append(plog, data_batch(1, size=200))
    assert plog.offline is not None and len(plog.segments) == 1 and plog.log_end_offset == 1


# ---- indexes: derived data, so a failed index write never fails the append ------------


def test_an_index_that_cannot_be_written_is_rebuilt_and_the_append_goes_through() -> None:
    fs = SimFileSystem()
    plog = open_log(fs)
    journal = Journal()
    fs.inject(Fault("write", path=".index", error=errno.ENOSPC, keep=0.5))
    for seq in range(6):
        append(plog, data_batch(seq, size=80), journal)
    segment = plog.active
    assert len(segment.offset_index) >= 2
    assert not fs.exists(segment.offset_index.path)  # stale: removed, never short
    assert segment.offset_index.lookup(5)[0] > 0  # memory still has every entry
    plog.flush()  # a full sync rewrites the stale index whole
    journal.acked = plog.flushed_offset
    check_log(plog, journal, recovered=False)
    fs.remove(segment.offset_index.path)  # as if the rewrite had failed too
    recovered = crash_and_reopen(fs)
    check_log(recovered, journal)
    assert list(recovered.active.offset_index.offsets) == list(segment.offset_index.offsets)


def test_a_stale_index_is_rewritten_whole_at_the_next_roll() -> None:
    fs = SimFileSystem()
    plog = open_log(fs, segment_bytes=700)
    fs.inject(Fault("write", path="00000000000000000000.timeindex", error=errno.ENOSPC))
    for seq in range(3):
        append(plog, data_batch(seq, size=150))
    first = plog.segments[0]
    append(plog, data_batch(3, size=300))  # rolls: the old segment's indexes are synced
    assert len(plog.segments) == 2
    assert fs.read_file(first.time_index.path)  # rewritten from memory
    plog.flush()
    lm_fs_clean = open_log(fs, clean=True, segment_bytes=700)
    assert list(lm_fs_clean.segments[0].time_index.offsets) == list(first.time_index.offsets)


# ---- the transaction index: may never lack an entry ------------------------------------


def abort_marker(plog: PartitionLog) -> AppendResult:
    return plog.append_marker(PID, 0, coordinator_epoch=0, commit=False)


def test_an_abort_whose_txnindex_entry_cannot_be_written_is_not_written_at_all() -> None:
    fs = SimFileSystem()
    plog = open_log(fs)
    append(plog, data_batch(0, txn=True))
    end, lso = plog.log_end_offset, plog.last_stable_offset
    fs.inject(Fault("write", path=".txnindex", error=errno.ENOSPC))
    with pytest.raises(OutOfSpace):
        abort_marker(plog)
    assert (plog.log_end_offset, plog.last_stable_offset) == (end, lso)
    assert plog.producer_state.ongoing == {PID: 0}
    assert plog.active.txn_index.entries == []
    result = abort_marker(plog)  # the coordinator's retry
    assert result.first_offset == end
    assert [(e.producer_id, e.first_offset) for e in plog.active.txn_index.entries] == [(PID, 0)]
    plog.flush()
    assert plog.aborted_between(0, plog.log_end_offset) == [(PID, 0)]


def test_an_abort_marker_that_cannot_be_written_takes_back_its_txnindex_entry() -> None:
    fs = SimFileSystem()
    plog = open_log(fs)
    append(plog, data_batch(0, txn=True))
    plog.flush()
    fs.inject(Fault("write", path=".log", error=errno.ENOSPC))
    with pytest.raises(OutOfSpace):
        abort_marker(plog)
    assert plog.active.txn_index.entries == []
    assert fs.read_file(plog.active.txn_index.path) == b""
    assert plog.last_stable_offset == 0  # the transaction is still open
    abort_marker(plog)
    plog.flush()
    recovered = crash_and_reopen(fs)
    assert recovered.aborted_between(0, recovered.log_end_offset) == [(PID, 0)]
    assert recovered.last_stable_offset == recovered.log_end_offset


def test_an_entry_that_cannot_be_taken_back_takes_the_log_offline() -> None:
    fs = SimFileSystem()
    plog = open_log(fs)
    append(plog, data_batch(0, txn=True))
    fs.inject(Fault("write", path=".log", error=errno.ENOSPC))
    fs.inject(Fault("truncate", path=".txnindex"))
    with pytest.raises(LogOffline):
        abort_marker(plog)
    assert plog.offline is not None


# ---- producer snapshots and the checkpoint ----------------------------------------------


def factory(overrides: Mapping[str, str]) -> LogConfig:
    return LogConfig(segment_bytes=int(overrides.get("segment.bytes", 1 << 20)))


def test_a_snapshot_that_cannot_be_written_costs_a_longer_replay_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fs = SimFileSystem()
    plog = open_log(fs, segment_bytes=300)
    fs.inject(Fault("write", path=".snapshot", error=errno.ENOSPC, repeat=True))
    for seq in range(6):
        append(plog, data_batch(seq, size=100))
    assert len(plog.segments) > 2
    assert plog.producer_state.snapshot_offsets() == []
    plog.flush()
    fs.faults.clear()
    recovered = crash_and_reopen(fs)
    assert recovered.producer_state.producers[PID].last_seq == 5
    assert "producer snapshot not written" in caplog.text


def test_a_checkpoint_that_cannot_be_written_is_logged_once_and_the_shutdown_is_unclean(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fs = SimFileSystem()
    lm = LogManager(fs, ROOT, ManualClock(), factory)
    lm.load()
    lm.create_topic("t", 1)
    plog = lm.get("t", 0)
    assert plog is not None
    append(plog, data_batch(0))
    fs.inject(Fault("write", path=RECOVERY_CHECKPOINT, error=errno.ENOSPC, repeat=True))
    caplog.set_level(logging.INFO)
    assert lm.checkpoint_recovery_points() is False
    assert lm.checkpoint_recovery_points() is False
    assert caplog.text.count("recovery-point checkpoint not written") == 1
    with pytest.raises(OutOfSpace):
        lm.create_topic("u", 1)  # its old recovery point could not be cleared first
    assert "u" not in lm.topics
    lm.shutdown()
    assert not fs.exists(f"{ROOT}/{CLEAN_SHUTDOWN}")
    fs.faults.clear()
    again = LogManager(fs, ROOT, ManualClock(), factory)
    again.load()
    assert not again.clean_start
    recovered = again.get("t", 0)
    assert recovered is not None and recovered.log_end_offset == 1


def test_a_topic_whose_metadata_cannot_be_written_leaves_nothing_behind() -> None:
    fs = SimFileSystem()
    lm = LogManager(fs, ROOT, ManualClock(), factory)
    lm.load()
    fs.inject(Fault("write", path="onceflow-topics.json", error=errno.ENOSPC))
    with pytest.raises(KafkaError) as caught:
        lm.create_topic("t", 2)
    assert caught.value.code is ErrorCode.kafka_storage_error
    assert lm.topics == {} and lm.get("t", 0) is None
    assert not fs.isdir(f"{ROOT}/t-0")
    lm.create_topic("t", 2)  # space again
    assert lm.get("t", 1) is not None


def test_a_shutdown_with_an_offline_log_is_not_clean() -> None:
    fs = SimFileSystem()
    lm = LogManager(fs, ROOT, ManualClock(), factory)
    lm.load()
    lm.create_topic("t", 2)
    offline: list[str] = []
    lm.offline_listeners.append(lambda p: offline.append(p.name))
    broken = lm.get("t", 0)
    healthy = lm.get("t", 1)
    assert broken is not None and healthy is not None
    append(broken, data_batch(0))
    append(healthy, data_batch(0))
    fs.inject(Fault("fsync", path="/t-0/"))
    lm.shutdown()
    assert offline == ["t-0"]
    assert not fs.exists(f"{ROOT}/{CLEAN_SHUTDOWN}")
    assert healthy.flushed_offset == 1  # the other log was flushed all the same
