"""The log start offset past the first segment (DeleteRecords): reads, time lookups, the last
stable offset with a transaction open below it, retention, truncation, and its checkpoint
through clean restarts, crashes and a recreated topic."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import pytest

from onceflow.clock import ManualClock
from onceflow.errors import ErrorCode, KafkaError
from onceflow.records.batch import validate_produced_batches
from onceflow.records.builder import build_batch
from onceflow.storage import offset_checkpoint
from onceflow.storage.fs import RealFileSystem, SimFileSystem
from onceflow.storage.log_manager import LogManager
from onceflow.storage.partition_log import LogConfig, PartitionLog

PID = 77


def factory(overrides: Mapping[str, str]) -> LogConfig:
    return LogConfig(
        segment_bytes=int(overrides.get("segment.bytes", 1 << 20)),
        cleanup_delete=overrides.get("cleanup.policy", "delete") == "delete",
        cleanup_compact=overrides.get("cleanup.policy", "delete") == "compact",
        index_interval_bytes=128,
    )


def manager(path: str, fs: RealFileSystem | SimFileSystem | None = None) -> LogManager:
    lm = LogManager(fs or RealFileSystem(), path, ManualClock(), factory)
    lm.load()
    return lm


def append(plog: PartitionLog, count: int = 1, *, transactional: bool = False) -> int:
    data = build_batch(
        [(b"k", b"v" * 40, []) for _ in range(count)],
        timestamp_ms=plog.clock.now_ms(),
        producer_id=PID if transactional else -1,
        producer_epoch=0 if transactional else -1,
        base_sequence=plog.log_end_offset if transactional else -1,
        transactional=transactional,
    )
    return plog.append_batches(data, validate_produced_batches(data, 1 << 20)).first_offset


def topic_log(lm: LogManager, name: str = "t", **configs: str) -> PartitionLog:
    lm.create_topic(name, 1, configs)
    plog = lm.get(name, 0)
    assert plog is not None
    return plog


def filled(lm: LogManager, records: int, **configs: str) -> PartitionLog:
    plog = topic_log(lm, **configs)
    for _ in range(records):
        append(plog)
    plog.flush()
    return plog


def out_of_range(plog: PartitionLog, offset: int) -> bool:
    with pytest.raises(KafkaError) as failed:
        plog.read(offset, 1 << 20, plog.high_watermark, True)
    return failed.value.code is ErrorCode.offset_out_of_range


def test_reads_below_the_new_start_are_out_of_range(tmp_path: Path) -> None:
    plog = filled(manager(str(tmp_path)), 10)
    assert plog.increment_log_start_offset(4)
    assert plog.log_start_offset == 4 and plog.segments[0].base_offset == 0
    assert out_of_range(plog, 3) and out_of_range(plog, 0)
    result = plog.read(4, 1 << 20, plog.high_watermark, True)
    assert result.region is not None and result.log_start_offset == 4
    assert not plog.increment_log_start_offset(2)  # never back
    assert plog.log_start_offset == 4
    with pytest.raises(KafkaError) as beyond:
        plog.increment_log_start_offset(11)
    assert beyond.value.code is ErrorCode.offset_out_of_range
    assert plog.increment_log_start_offset(10)  # up to the high watermark: an empty log
    assert plog.read(10, 1 << 20, plog.high_watermark, True).region is None


def test_time_lookup_never_answers_below_the_start(tmp_path: Path) -> None:
    plog = filled(manager(str(tmp_path)), 6)
    plog.increment_log_start_offset(3)
    found = plog.offset_for_timestamp(0)
    assert found is not None and found[0] == 3


def test_an_open_transaction_below_the_start_holds_the_lso_there(tmp_path: Path) -> None:
    plog = topic_log(manager(str(tmp_path)))
    append(plog, 2, transactional=True)  # offsets 0-1, left open
    for _ in range(4):
        append(plog)
    plog.flush()
    assert plog.last_stable_offset == 0
    plog.increment_log_start_offset(3)
    assert plog.last_stable_offset == 3
    plog.append_marker(PID, 0, 0, commit=False)
    plog.flush()
    assert plog.last_stable_offset == plog.high_watermark == 7
    # The aborted transaction is still known to readers from the start.
    assert [e.first_offset for e in plog.segments[0].txn_index.entries] == [0]


def test_retention_deletes_the_segments_wholly_below_whatever_the_policy(tmp_path: Path) -> None:
    lm = manager(str(tmp_path))
    plog = filled(lm, 20, **{"segment.bytes": "300", "cleanup.policy": "compact"})
    bases = [s.base_offset for s in plog.segments]
    assert len(bases) > 3
    cut = bases[2] + 1  # inside the third segment
    plog.increment_log_start_offset(cut)
    assert lm.enforce_retention() == 2
    assert plog.segments[0].base_offset == bases[2]
    assert plog.log_start_offset == cut  # not the base of the first segment kept
    assert lm.enforce_retention() == 0
    plog.increment_log_start_offset(plog.high_watermark)
    lm.enforce_retention()
    assert len(plog.segments) == 1  # never the active one


def test_truncation_below_the_start_brings_it_down(tmp_path: Path) -> None:
    plog = filled(manager(str(tmp_path)), 10)
    plog.increment_log_start_offset(8)
    plog.truncate_to(5)
    assert (plog.log_start_offset, plog.log_end_offset) == (5, 5)
    plog.truncate_fully_and_start_at(50)
    assert (plog.log_start_offset, plog.log_end_offset) == (50, 50)


def test_the_start_survives_a_clean_restart_and_a_recreated_topic_forgets_it(
    tmp_path: Path,
) -> None:
    path = str(tmp_path)
    lm = manager(path)
    filled(lm, 10).increment_log_start_offset(6)
    lm.shutdown()
    lm = manager(path)
    plog = lm.get("t", 0)
    assert plog is not None and plog.log_start_offset == 6 and out_of_range(plog, 5)
    lm.delete_topic("t")
    again = topic_log(lm)
    assert again.log_start_offset == 0
    for _ in range(3):
        append(again)
    again.flush()
    # Nor cut to an empty log at the old topic's start by a crash (no shutdown) now.
    restarted = manager(path).get("t", 0)
    assert restarted is not None and restarted.log_start_offset == 0
    assert restarted.log_end_offset == 3


def test_the_start_survives_a_crash(tmp_path: Path) -> None:
    fs = SimFileSystem()
    lm = manager("/data", fs)
    plog = filled(lm, 10)
    assert plog.increment_log_start_offset(7)
    assert not lm.log_start_checkpoint_failing
    fs.crash()
    plog = manager("/data", fs).get("t", 0)
    assert plog is not None and plog.log_start_offset == 7
    assert out_of_range(plog, 6)


def test_a_log_that_ends_below_its_checkpointed_start_starts_empty_there(tmp_path: Path) -> None:
    path = str(tmp_path)
    lm = manager(path)
    filled(lm, 5)
    lm.shutdown()
    checkpoint = os.path.join(path, offset_checkpoint.LOG_START_CHECKPOINT)
    offset_checkpoint.write(RealFileSystem(), checkpoint, {("t", 0): 40})
    plog = manager(path).get("t", 0)
    assert plog is not None
    assert (plog.log_start_offset, plog.log_end_offset) == (40, 40)


def test_checkpoint_format_round_trip() -> None:
    offsets = {("a b", 0): 5, ("t", 12): 1 << 40}
    assert offset_checkpoint.decode(offset_checkpoint.encode(offsets)) == offsets
    with pytest.raises(ValueError):
        offset_checkpoint.decode(b"0\n2\nt 0 5\n")
