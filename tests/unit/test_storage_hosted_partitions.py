"""A broker of a cluster hosts some partitions of a topic: host_partition, drop_partition,
the hosted set in the topics file, and a topic deleted and created again while the broker
was away."""

from __future__ import annotations

import errno
import json
from collections.abc import Mapping

import pytest

from onceflow.clock import ManualClock
from onceflow.errors import ErrorCode, KafkaError
from onceflow.records.batch import validate_produced_batches
from onceflow.records.builder import build_batch
from onceflow.storage.fs import Fault, SimFileSystem, SimulatedCrash
from onceflow.storage.log_manager import RECOVERY_CHECKPOINT, TOPICS_FILE, LogManager
from onceflow.storage.partition_log import LogConfig, PartitionLog

ROOT = "/data"
OLD_ID = "11111111-1111-1111-1111-111111111111"
NEW_ID = "22222222-2222-2222-2222-222222222222"


def factory(overrides: Mapping[str, str]) -> LogConfig:
    if "segment.bytes" in overrides and int(overrides["segment.bytes"]) <= 0:
        raise KafkaError(ErrorCode.invalid_config, "segment.bytes must be positive")
    return LogConfig(segment_bytes=int(overrides.get("segment.bytes", 1 << 20)))


def manager(fs: SimFileSystem) -> LogManager:
    lm = LogManager(fs, ROOT, ManualClock(), factory)
    lm.load()
    return lm


def append(plog: PartitionLog, value: bytes = b"v") -> int:
    data = build_batch([(b"k", value, ())], timestamp_ms=1)
    return plog.append_batches(data, validate_produced_batches(data, 1 << 20)).first_offset


def topics_json(fs: SimFileSystem) -> dict[str, dict[str, object]]:
    topics: dict[str, dict[str, object]] = json.loads(fs.read_file(f"{ROOT}/{TOPICS_FILE}"))[
        "topics"
    ]
    return topics


def partition_dirs(fs: SimFileSystem) -> list[str]:
    return [n for n in fs.listdir(ROOT) if fs.isdir(f"{ROOT}/{n}")]


def test_hosting_some_partitions_opens_and_persists_only_those() -> None:
    fs = SimFileSystem()
    lm = manager(fs)
    plog = lm.host_partition("orders", 6, 4, {"segment.bytes": "4096"}, OLD_ID)
    assert plog.config.segment_bytes == 4096
    lm.host_partition("orders", 6, 1, {"segment.bytes": "4096"}, OLD_ID)
    append(plog, b"kept")
    lm.shutdown()
    entry = topics_json(fs)["orders"]
    assert entry["hosted"] == [1, 4] and entry["partitions"] == 6 and entry["id"] == OLD_ID
    assert partition_dirs(fs) == ["orders-1", "orders-4"]
    again = manager(fs)
    assert sorted(again.logs) == [("orders", 1), ("orders", 4)]
    assert again.get("orders", 0) is None
    info = again.topics["orders"]
    assert info.hosted == {1, 4} and info.hosted_partitions() == [1, 4]
    reopened = again.get("orders", 4)
    assert reopened is not None and reopened.log_end_offset == 1


def test_host_partition_is_idempotent() -> None:
    fs = SimFileSystem()
    lm = manager(fs)
    first = lm.host_partition("t", 3, 2, {}, OLD_ID)
    append(first)
    steps = fs.steps
    assert lm.host_partition("t", 3, 2, {}, OLD_ID) is first
    assert fs.steps == steps, "nothing written for a partition already hosted"
    assert first.log_end_offset == 1


def test_an_old_topics_file_without_hosted_sets_means_every_partition() -> None:
    fs = SimFileSystem()
    fs.makedirs(ROOT)
    old = {"version": 1, "topics": {"t": {"partitions": 2, "configs": {}, "id": OLD_ID}}}
    fs.write_file_atomic(f"{ROOT}/{TOPICS_FILE}", json.dumps(old).encode())
    lm = manager(fs)
    assert lm.topics["t"].hosted is None
    assert sorted(lm.logs) == [("t", 0), ("t", 1)]
    lm.create_topic("u", 1)
    assert "hosted" not in topics_json(fs)["t"] and "hosted" not in topics_json(fs)["u"]


def test_hosting_a_new_partition_of_an_all_hosted_topic_keeps_the_old_ones() -> None:
    fs = SimFileSystem()
    lm = manager(fs)
    lm.create_topic("t", 2)
    lm.host_partition("t", 3, 2)
    assert lm.topics["t"].hosted == {0, 1, 2}
    assert topics_json(fs)["t"]["partitions"] == 3
    assert sorted(manager(fs).logs) == [("t", 0), ("t", 1), ("t", 2)]


def test_dropping_with_delete_removes_the_files_and_the_hosting() -> None:
    fs = SimFileSystem()
    lm = manager(fs)
    for p in (0, 1):
        append(lm.host_partition("t", 2, p, {}, OLD_ID))
    assert lm.drop_partition("t", 0, delete=True) is True
    assert partition_dirs(fs) == ["t-1"]
    assert topics_json(fs)["t"]["hosted"] == [1]
    assert lm.drop_partition("t", 0, delete=True) is False
    assert sorted(manager(fs).logs) == [("t", 1)]
    assert lm.drop_partition("t", 1, delete=True) is True
    assert "t" not in lm.topics and topics_json(fs) == {}
    assert partition_dirs(fs) == []


def test_dropping_without_delete_closes_but_keeps_it_hosted() -> None:
    fs = SimFileSystem()
    lm = manager(fs)
    plog = lm.host_partition("t", 1, 0, {}, OLD_ID)
    append(plog, b"a")
    append(plog, b"b")
    assert lm.drop_partition("t", 0, delete=False) is True
    assert lm.get("t", 0) is None
    assert topics_json(fs)["t"]["hosted"] == [0]
    assert fs.isdir(f"{ROOT}/t-0")
    lm.checkpoint_recovery_points()
    checkpoint = fs.read_file(f"{ROOT}/{RECOVERY_CHECKPOINT}").decode()
    assert "t 0 2" in checkpoint, "its recovery point is kept"
    back = lm.host_partition("t", 1, 0, {}, OLD_ID)
    assert back is not plog and back.log_end_offset == 2
    lm.drop_partition("t", 0, delete=False)
    lm.shutdown()
    assert manager(fs).get("t", 0) is not None


def test_a_topic_created_again_under_a_new_id_replaces_the_local_data(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fs = SimFileSystem()
    lm = manager(fs)
    for p in (0, 1):
        append(lm.host_partition("t", 2, p, {}, OLD_ID), b"old data")
    lm.drop_partition("t", 1, delete=False)
    lm.shutdown()
    again = manager(fs)
    plog = again.host_partition("t", 3, 0, {}, NEW_ID)
    assert plog.log_end_offset == 0, "the old topic's data is gone"
    assert "deleted and created again" in caplog.text
    assert again.topics["t"].topic_id == NEW_ID and again.topics["t"].hosted == {0}
    assert partition_dirs(fs) == ["t-0"], "the old topic's other partitions too"
    assert topics_json(fs)["t"]["id"] == NEW_ID
    third = manager(fs)
    reopened = third.get("t", 0)
    assert reopened is not None and reopened.log_end_offset == 0


def test_leftover_files_of_a_partition_not_hosted_are_not_trusted() -> None:
    fs = SimFileSystem()
    lm = manager(fs)
    lm.host_partition("t", 2, 0, {}, OLD_ID)
    fs.makedirs(f"{ROOT}/t-1")
    stray = fs.open(f"{ROOT}/t-1/{0:020d}.log")
    stray.append(build_batch([(b"k", b"stale", ())], timestamp_ms=1))
    plog = lm.host_partition("t", 2, 1, {}, OLD_ID)
    assert plog.log_end_offset == 0


def test_a_bad_config_or_partition_is_refused_before_anything_is_written() -> None:
    fs = SimFileSystem()
    lm = manager(fs)
    with pytest.raises(KafkaError):
        lm.host_partition("t", 2, 0, {"segment.bytes": "0"}, OLD_ID)
    with pytest.raises(KafkaError) as caught:
        lm.host_partition("t", 2, 2, {}, OLD_ID)
    assert caught.value.code is ErrorCode.unknown_topic_or_partition
    assert lm.topics == {} and partition_dirs(fs) == []


def test_hosting_that_cannot_write_the_topics_file_leaves_nothing_behind() -> None:
    fs = SimFileSystem()
    lm = manager(fs)
    lm.host_partition("t", 2, 0, {}, OLD_ID)
    fs.inject(Fault("write", path=TOPICS_FILE, error=errno.ENOSPC))
    with pytest.raises(KafkaError) as caught:
        lm.host_partition("t", 2, 1, {}, OLD_ID)
    assert caught.value.code is ErrorCode.kafka_storage_error
    assert lm.topics["t"].hosted == {0} and lm.get("t", 1) is None
    assert partition_dirs(fs) == ["t-0"]
    fs.inject(Fault("write", path=TOPICS_FILE, error=errno.ENOSPC))
    with pytest.raises(KafkaError):
        lm.drop_partition("t", 0, delete=True)
    assert lm.topics["t"].hosted == {0} and lm.get("t", 0) is not None
    assert lm.host_partition("t", 2, 1, {}, OLD_ID) is lm.get("t", 1)


def test_hosting_again_clears_the_old_recovery_point_first() -> None:
    """Otherwise a crash could pair the new partition's files with the old partition's
    recovery point, and recovery would skip scanning data that was never synced."""
    fs = SimFileSystem()
    lm = manager(fs)
    plog = lm.host_partition("t", 1, 0, {}, OLD_ID)
    for _ in range(5):
        append(plog)
    plog.flush()
    lm.checkpoint_recovery_points()
    assert "t 0 5" in fs.read_file(f"{ROOT}/{RECOVERY_CHECKPOINT}").decode()
    lm.drop_partition("t", 0, delete=True)
    lm.host_partition("t", 1, 0, {}, OLD_ID)
    assert "t 0 5" not in fs.read_file(f"{ROOT}/{RECOVERY_CHECKPOINT}").decode()


@pytest.mark.parametrize("operation", ["host", "drop", "replace"])
def test_a_crash_at_any_step_leaves_a_consistent_hosting(operation: str) -> None:
    """After a crash at any step the partition is either hosted (its log opens, empty
    when new) or not (no directory left), never half of each."""
    step = 1
    while True:
        fs = SimFileSystem(seed=step)
        lm = manager(fs)
        append(lm.host_partition("t", 2, 0, {}, OLD_ID), b"zero")
        lm.flush_all()
        if operation == "drop":
            append(lm.host_partition("t", 2, 1, {}, OLD_ID), b"one")
            lm.flush_all()
        fs.crash_at_step = fs.steps + step
        try:
            if operation == "host":
                lm.host_partition("t", 2, 1, {}, OLD_ID)
            elif operation == "drop":
                lm.drop_partition("t", 1, delete=True)
            else:
                lm.host_partition("t", 2, 1, {}, NEW_ID)
            finished = True
        except SimulatedCrash:
            finished = False
        fs.crash()
        after = manager(fs)
        info = after.topics.get("t")
        hosted = set() if info is None else set(info.hosted_partitions())
        assert {p for (_, p) in after.logs} == hosted
        assert partition_dirs(fs) == sorted(f"t-{p}" for p in hosted)
        one = after.get("t", 1)
        if operation == "replace":
            if info is not None and info.topic_id == NEW_ID:
                assert after.get("t", 0) is None, "no partition of the old topic survives"
                assert one is not None and one.log_end_offset == 0
            elif info is not None:
                assert one is None
        elif operation == "host" and one is not None:
            assert one.log_end_offset == 0
        elif operation == "drop" and one is not None:
            assert one.log_end_offset == 1, "still there whole, or gone"
        if finished:
            if operation == "host":
                assert hosted == {0, 1}
            elif operation == "drop":
                assert hosted == {0}
            else:
                assert info is not None and info.topic_id == NEW_ID and hosted == {1}
            break
        step += 1
    assert step > (1 if operation == "drop" else 3)  # a drop is one write, then removals
