"""LogManager on a real directory: topics, checkpoints, clean shutdown, retention."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import pytest

from onceflow.clock import ManualClock
from onceflow.errors import ErrorCode, KafkaError
from onceflow.records.batch import scan_batches, validate_produced_batches
from onceflow.records.builder import build_batch
from onceflow.storage.fs import RealFileSystem
from onceflow.storage.log_manager import (
    CLEAN_SHUTDOWN,
    RECOVERY_CHECKPOINT,
    TOPICS_FILE,
    LogManager,
)
from onceflow.storage.offset_checkpoint import LOG_START_CHECKPOINT
from onceflow.storage.partition_log import LogConfig, PartitionLog

HOUR = 3_600_000


def factory(overrides: Mapping[str, str]) -> LogConfig:
    """A tiny subset of topic configs, enough for these tests."""
    return LogConfig(
        segment_bytes=int(overrides.get("segment.bytes", 1 << 20)),
        retention_ms=int(overrides.get("retention.ms", 7 * 24 * HOUR)),
        retention_bytes=int(overrides.get("retention.bytes", -1)),
        cleanup_delete=overrides.get("cleanup.policy", "delete") == "delete",
        index_interval_bytes=128,
    )


def manager(path: Path, clock: ManualClock | None = None) -> LogManager:
    lm = LogManager(RealFileSystem(), str(path), clock or ManualClock(), factory)
    lm.load()
    return lm


def append(plog: PartitionLog, ts: int | None = None, value: bytes = b"v" * 30) -> int:
    now = plog.clock.now_ms() if ts is None else ts
    data = build_batch([(b"k", value, [])], timestamp_ms=now)
    return plog.append_batches(data, validate_produced_batches(data, 1 << 20)).first_offset


def log_bytes(plog: PartitionLog) -> bytes:
    return b"".join(s.read_bytes(0, s.size) for s in plog.segments)


def get(lm: LogManager, topic: str, partition: int = 0) -> PartitionLog:
    plog = lm.get(topic, partition)
    assert plog is not None
    return plog


def test_create_topic_makes_partition_dirs_and_survives_a_reload(tmp_path: Path) -> None:
    lm = manager(tmp_path)
    info = lm.create_topic("orders", 3, {"segment.bytes": "4096"})
    assert sorted(os.listdir(tmp_path)) == sorted(
        [TOPICS_FILE, RECOVERY_CHECKPOINT, LOG_START_CHECKPOINT, "orders-0", "orders-1", "orders-2"]
    )
    assert f"{0:020d}.log" in os.listdir(tmp_path / "orders-1")
    assert get(lm, "orders", 2).config.segment_bytes == 4096
    for i in range(5):
        append(get(lm, "orders", 1), value=b"%d" % i)
    lm.shutdown()

    again = manager(tmp_path)
    assert again.clean_start
    reloaded = again.topics["orders"]
    assert (reloaded.partitions, reloaded.configs, reloaded.topic_id) == (
        3,
        {"segment.bytes": "4096"},
        info.topic_id,
    )
    assert get(again, "orders", 1).log_end_offset == 5
    assert get(again, "orders", 0).log_end_offset == 0
    assert {(p.topic, p.partition) for p in again} == {("orders", p) for p in range(3)}


def test_create_existing_and_delete_unknown_topics_fail_with_kafka_codes(tmp_path: Path) -> None:
    lm = manager(tmp_path)
    lm.create_topic("a", 1)
    with pytest.raises(KafkaError) as exists:
        lm.create_topic("a", 2)
    assert exists.value.code == ErrorCode.topic_already_exists
    with pytest.raises(KafkaError) as unknown:
        lm.delete_topic("nope")
    assert unknown.value.code == ErrorCode.unknown_topic_or_partition


def test_delete_topic_removes_its_files_and_it_stays_gone(tmp_path: Path) -> None:
    lm = manager(tmp_path)
    lm.create_topic("keep", 1)
    lm.create_topic("drop", 2)
    append(get(lm, "drop", 1))
    lm.delete_topic("drop")
    assert lm.get("drop", 0) is None
    assert not (tmp_path / "drop-0").exists() and not (tmp_path / "drop-1").exists()
    lm.shutdown()
    again = manager(tmp_path)
    assert set(again.topics) == {"keep"}


def test_load_removes_directories_of_no_topic(tmp_path: Path) -> None:
    """A topic deleted in metadata whose files outlived a crash is removed at startup."""
    lm = manager(tmp_path)
    lm.create_topic("a", 1)
    lm.shutdown()
    (tmp_path / "ghost-0").mkdir()
    (tmp_path / "ghost-0" / f"{0:020d}.log").write_bytes(b"")
    manager(tmp_path)
    assert not (tmp_path / "ghost-0").exists()
    assert (tmp_path / "a-0").exists()


def test_recreated_topic_starts_empty(tmp_path: Path) -> None:
    lm = manager(tmp_path)
    lm.create_topic("t", 1)
    for _ in range(3):
        append(get(lm, "t"))
    lm.delete_topic("t")
    lm.create_topic("t", 1)
    assert get(lm, "t").log_end_offset == 0
    append(get(lm, "t"))
    get(lm, "t").flush()
    lm.checkpoint_recovery_points()
    assert manager(tmp_path).get("t", 0) is not None


def test_recovery_point_checkpoint_round_trip(tmp_path: Path) -> None:
    lm = manager(tmp_path)
    lm.create_topic("a b", 2)  # the format splits from the right: odd names survive
    lm.create_topic("c", 1)
    for _ in range(4):
        append(get(lm, "a b", 1))
    append(get(lm, "c"))
    get(lm, "a b", 1).flush()
    lm.checkpoint_recovery_points()
    text = (tmp_path / RECOVERY_CHECKPOINT).read_text()
    lines = text.splitlines()
    assert lines[:2] == ["0", "3"]
    assert sorted(lines[2:]) == ["a b 0 0", "a b 1 4", "c 0 0"]
    assert lm._read_checkpoint() == {("a b", 0): 0, ("a b", 1): 4, ("c", 0): 0}


def test_unreadable_checkpoint_means_recover_everything(tmp_path: Path) -> None:
    lm = manager(tmp_path)
    lm.create_topic("t", 1)
    for _ in range(3):
        append(get(lm, "t"))
    get(lm, "t").flush()
    lm.checkpoint_recovery_points()
    (tmp_path / RECOVERY_CHECKPOINT).write_bytes(b"\xff\xfenot a checkpoint")
    assert lm._read_checkpoint() == {}
    again = manager(tmp_path)
    assert not again.clean_start
    assert get(again, "t").log_end_offset == 3


def test_clean_shutdown_marker_is_written_then_consumed(tmp_path: Path) -> None:
    lm = manager(tmp_path)
    assert not lm.clean_start
    lm.create_topic("t", 1)
    for _ in range(10):
        append(get(lm, "t"))
    before = log_bytes(get(lm, "t"))
    lm.shutdown()
    assert (tmp_path / CLEAN_SHUTDOWN).exists()
    again = manager(tmp_path)
    assert again.clean_start
    assert not (tmp_path / CLEAN_SHUTDOWN).exists(), "a crash from now on is not clean"
    assert log_bytes(get(again, "t")) == before
    assert get(again, "t").high_watermark == 10
    # Without another clean shutdown the next start is a recovery.
    third = manager(tmp_path)
    assert not third.clean_start
    assert log_bytes(get(third, "t")) == before


def test_unclean_start_recovers_a_torn_tail(tmp_path: Path) -> None:
    lm = manager(tmp_path)
    lm.create_topic("t", 1)
    for _ in range(4):
        append(get(lm, "t"))
    get(lm, "t").flush()
    lm.checkpoint_recovery_points()
    intact = log_bytes(get(lm, "t"))
    get(lm, "t").close()
    with open(tmp_path / "t-0" / f"{0:020d}.log", "ab") as f:
        f.write(intact[:40])  # half a batch, as a crash mid-write leaves it
    again = manager(tmp_path)
    plog = get(again, "t")
    assert log_bytes(plog) == intact
    assert plog.log_end_offset == 4
    assert append(plog) == 4


def test_retention_by_time_deletes_old_segments_and_moves_log_start(tmp_path: Path) -> None:
    clock = ManualClock()
    lm = manager(tmp_path, clock)
    lm.create_topic("t", 1, {"segment.bytes": "300", "retention.ms": str(HOUR)})
    plog = get(lm, "t")
    for _ in range(12):
        append(plog)
        clock.advance(10 * 60_000)  # ten minutes between batches
    plog.flush()
    segments = len(plog.segments)
    assert segments > 3
    now = clock.now_ms()
    expected = 0
    for segment in plog.segments[:-1]:
        if now - segment.max_timestamp <= HOUR:
            break
        expected += 1
    deleted = lm.enforce_retention()
    assert deleted == expected > 0
    assert len(plog.segments) == segments - deleted
    assert plog.log_start_offset == plog.segments[0].base_offset > 0
    first = plog.segments[0]
    assert first is plog.active or now - first.max_timestamp <= HOUR
    # Deleted files are gone from disk.
    names = os.listdir(tmp_path / "t-0")
    assert f"{0:020d}.log" not in names and f"{0:020d}.index" not in names


def test_retention_never_deletes_the_active_segment(tmp_path: Path) -> None:
    clock = ManualClock()
    lm = manager(tmp_path, clock)
    lm.create_topic("t", 1, {"retention.ms": "1000"})
    plog = get(lm, "t")
    for _ in range(3):
        append(plog)
    plog.flush()
    clock.advance(10 * HOUR)
    assert lm.enforce_retention() == 0
    assert plog.log_end_offset == 3 and len(plog.segments) == 1


def test_retention_never_deletes_unflushed_data(tmp_path: Path) -> None:
    clock = ManualClock()
    lm = manager(tmp_path, clock)
    lm.create_topic("t", 1, {"segment.bytes": "300", "retention.ms": "1000"})
    plog = get(lm, "t")
    for _ in range(3):
        append(plog)
    plog.flush()
    for _ in range(6):
        append(plog)
    clock.advance(10 * HOUR)
    lm.enforce_retention()
    assert plog.segments[0].next_offset > plog.flushed_offset or len(plog.segments) == 1
    assert plog.log_start_offset <= plog.flushed_offset
    plog.flush()
    lm.enforce_retention()
    assert len(plog.segments) == 1, "once flushed, every old segment may go"
    assert plog.log_start_offset == plog.active.base_offset


def test_retention_by_bytes_keeps_the_newest_segments_within_the_limit(tmp_path: Path) -> None:
    clock = ManualClock()
    lm = manager(tmp_path, clock)
    lm.create_topic("t", 1, {"segment.bytes": "300", "retention.bytes": "700"})
    plog = get(lm, "t")
    for _ in range(20):
        append(plog)
    plog.flush()
    total = plog.size_bytes
    assert total > 1400
    deleted = lm.enforce_retention()
    assert deleted > 0
    assert plog.size_bytes <= 700 + plog.segments[0].size, "only whole segments are deleted"
    assert plog.size_bytes - plog.segments[0].size < 700 or len(plog.segments) == 1
    assert plog.log_end_offset == 20
    start = plog.log_start_offset
    lm.shutdown()
    assert get(manager(tmp_path, clock), "t").log_start_offset == start


def test_retention_skips_topics_without_the_delete_policy(tmp_path: Path) -> None:
    clock = ManualClock()
    lm = manager(tmp_path, clock)
    lm.create_topic(
        "c", 1, {"segment.bytes": "300", "retention.bytes": "0", "cleanup.policy": "compact"}
    )
    plog = get(lm, "c")
    for _ in range(10):
        append(plog)
    plog.flush()
    assert lm.enforce_retention() == 0
    assert plog.log_start_offset == 0


def test_reload_after_shutdown_serves_the_same_batches(tmp_path: Path) -> None:
    lm = manager(tmp_path)
    lm.create_topic("t", 1, {"segment.bytes": "400"})
    for _ in range(15):
        append(get(lm, "t"))
    lm.shutdown()
    plog = get(manager(tmp_path), "t")
    region = plog.read(0, 1 << 20, plog.high_watermark, True).region
    assert region is not None
    batches, end = scan_batches(region.read())
    assert end == region.size
    assert batches[0].header.base_offset == 0


def test_load_leaves_directories_that_are_not_partitions_alone(tmp_path: Path) -> None:
    """A log dir at a mount root has lost+found; operators keep notes. Neither is ours."""
    lm = manager(tmp_path)
    lm.create_topic("a", 1)
    lm.shutdown()
    for name in ("lost+found", "backup", "a-b-c"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "keep.txt").write_text("mine")
    manager(tmp_path)
    for name in ("lost+found", "backup", "a-b-c"):
        assert (tmp_path / name / "keep.txt").read_text() == "mine"


def test_after_a_crash_recovery_scans_only_what_the_last_roll_left(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A roll syncs the old segment and moves the checkpointed recovery point, so recovery
    after kill -9 (simulated: the manager is dropped without shutdown) validates only the
    active segment, however many segments the log has."""
    lm = manager(tmp_path)
    lm.create_topic("big", 1, {"segment.bytes": "600"})
    plog = get(lm, "big")
    for _ in range(200):
        append(plog)
    assert len(plog.segments) > 10
    expected = log_bytes(plog)
    del lm, plog  # no flush, no checkpoint, no clean-shutdown marker: a crash
    caplog.set_level("INFO", logger="onceflow.storage.log_manager")
    reopened = manager(tmp_path)
    plog = get(reopened, "big")
    assert log_bytes(plog) == expected
    scans = [r.getMessage() for r in caplog.records if "recovered big-0" in r.getMessage()]
    assert scans == [scans[0]] and "scanned 1 segments" in scans[0], scans
