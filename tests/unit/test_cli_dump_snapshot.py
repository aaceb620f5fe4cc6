"""`onceflow dump-log` on producer-state `.snapshot` files.

The snapshots are written by a real partition log on a real disk (RealFileSystem in a tmp
dir), so the dump is checked against the files a broker leaves behind.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from onceflow.cli.dumpers import dumper_for, known_suffixes, suffixes_in_directory
from onceflow.cli.main import main
from onceflow.clock import ManualClock
from onceflow.records.batch import validate_produced_batches
from onceflow.records.builder import build_batch
from onceflow.storage.fs import RealFileSystem
from onceflow.storage.partition_log import LogConfig, PartitionLog
from onceflow.storage.producer_state import (
    BatchMetadata,
    ProducerEntry,
    encode,
)
from onceflow.storage.recovery import open_partition


def dump(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    code = main(["dump-log", *argv])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


def send(plog: PartitionLog, pid: int, seq: int, count: int, ts: int, txn: bool = False) -> None:
    data = build_batch(
        [(None, b"v", ()) for _ in range(count)],
        timestamp_ms=ts,
        producer_id=pid,
        producer_epoch=2,
        base_sequence=seq,
        transactional=txn,
    )
    plog.append_batches(data, validate_produced_batches(data, 1 << 20))


def broker_snapshot(directory: Path) -> Path:
    """A partition with two producers, closed cleanly: its snapshot is at the log end."""
    plog, _ = open_partition(
        RealFileSystem(), str(directory), "orders", 0, LogConfig(), ManualClock(0), 0, False
    )
    send(plog, 7, 0, 2, ts=1_000)
    send(plog, 9, 0, 1, ts=1_500, txn=True)
    send(plog, 7, 2, 3, ts=2_000)
    plog.flush()
    plog.close()
    path = directory / f"{6:020d}.snapshot"
    assert path.exists()
    return path


def test_producers_and_their_batches(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = broker_snapshot(tmp_path / "orders-0")
    code, lines, err = dump(capsys, str(path))
    assert (code, err) == (0, "")
    assert lines == [
        f"Dumping {path}",
        "Producer state snapshot at offset: 6",
        "producerId: 7 producerEpoch: 2 coordinatorEpoch: -1 lastTimestamp: 2000 "
        "currentTxnFirstOffset: -1 lastMarkerOffset: -1 batches: 2",
        "| firstSequence: 0 lastSequence: 1 lastOffset: 1 offsetDelta: 1 timestamp: 1000",
        "| firstSequence: 2 lastSequence: 4 lastOffset: 5 offsetDelta: 2 timestamp: 2000",
        "producerId: 9 producerEpoch: 2 coordinatorEpoch: -1 lastTimestamp: 1500 "
        "currentTxnFirstOffset: 2 lastMarkerOffset: -1 batches: 1",
        "| firstSequence: 0 lastSequence: 0 lastOffset: 2 offsetDelta: 0 timestamp: 1500",
        "2 producers",
    ]


def test_empty_snapshot_and_a_producer_without_batches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / f"{0:020d}.snapshot"
    empty.write_bytes(encode({}))
    entry = ProducerEntry(1 << 40, 32_767, coordinator_epoch=3, last_timestamp=-1)
    bare = tmp_path / "copy.snapshot"  # no offset in the name: no offset line
    bare.write_bytes(encode({entry.producer_id: entry}))
    code, lines, _ = dump(capsys, str(empty), str(bare))
    assert code == 0
    assert lines == [
        f"Dumping {empty}",
        "Producer state snapshot at offset: 0",
        "0 producers",
        f"Dumping {bare}",
        f"producerId: {1 << 40} producerEpoch: 32767 coordinatorEpoch: 3 lastTimestamp: -1 "
        "currentTxnFirstOffset: -1 lastMarkerOffset: -1 batches: 0",
        "1 producer",
    ]


def test_sequences_past_the_wrap(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    entry = ProducerEntry(4, 0, last_timestamp=10)
    entry.batches.append(BatchMetadata((1 << 31) - 2, 1, 103, 3, 10))
    path = tmp_path / f"{104:020d}.snapshot"
    path.write_bytes(encode({4: entry}))
    code, lines, _ = dump(capsys, str(path))
    assert code == 0
    assert lines[3] == (
        "| firstSequence: 2147483646 lastSequence: 1 lastOffset: 103 offsetDelta: 3 timestamp: 10"
    )


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda d: d[:-3], "CRC mismatch"),
        (lambda d: d[:5], "truncated"),
        (lambda d: b"", "truncated"),
        (lambda d: d[:10] + bytes([d[10] ^ 0x40]) + d[11:], "CRC mismatch"),
        (lambda d: b"\x00\x09" + d[2:], "unknown version 9"),
    ],
    ids=["cut short", "header cut", "empty", "bit flip", "wrong version"],
)
def test_a_corrupt_snapshot_is_reported_clearly(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    damage: object,
    reason: str,
) -> None:
    assert callable(damage)
    good = broker_snapshot(tmp_path / "orders-0")
    bad = damage(good.read_bytes())
    assert isinstance(bad, bytes)
    good.write_bytes(bad)
    code, lines, err = dump(capsys, str(good))
    assert (code, err) == (1, "")
    assert lines[1] == "Producer state snapshot at offset: 6"
    assert lines[2].startswith(f"Corrupt producer snapshot ({len(bad)} bytes): {reason}")
    assert "skips and deletes it at startup" in lines[2]
    assert len(lines) == 3


def test_snapshot_is_a_known_suffix_but_not_part_of_a_directory_dump(tmp_path: Path) -> None:
    assert ".snapshot" in known_suffixes()
    assert ".snapshot" not in suffixes_in_directory()
    assert dumper_for(tmp_path / f"{0:020d}.snapshot") is not None
