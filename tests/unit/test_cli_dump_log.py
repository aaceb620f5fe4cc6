"""`onceflow dump-log`: segments, indexes and partition directories built in a tmp dir.

Segments are written with Onceflow's own batch builder and, once, with kafka-python's, so the
dump is checked against bytes Onceflow did not produce.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from onceflow.cli.dumpers import registry
from onceflow.cli.main import main
from onceflow.records import (
    Compression,
    ControlType,
    Record,
    build_batch,
    build_control_batch,
)

BATCH_A = build_batch(
    [(b"k0", b"v0", [("h1", b"x"), ("h2", None)]), (None, b"v1", ()), (b"k2", None, ())],
    timestamp_ms=1_000,
    base_offset=0,
    partition_leader_epoch=0,
)
BATCH_TXN = build_batch(
    [(None, b"line\nbreak", ()), (None, b"\xff\xfe", ())],
    timestamp_ms=2_000,
    base_offset=3,
    producer_id=7,
    producer_epoch=1,
    base_sequence=5,
    transactional=True,
    compression=Compression.GZIP,
)
BATCH_COMMIT = build_control_batch(
    ControlType.COMMIT,
    producer_id=7,
    producer_epoch=1,
    coordinator_epoch=3,
    timestamp_ms=3_000,
    base_offset=5,
)
SEGMENT = BATCH_A + BATCH_TXN + BATCH_COMMIT


def segment_name(base: int, suffix: str = ".log") -> str:
    return f"{base:020d}{suffix}"


def write(directory: Path, name: str, data: bytes) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_bytes(data)
    return path


def dump(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    code = main(["dump-log", *argv])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


def test_batch_and_record_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path / "orders-0", segment_name(0), SEGMENT)
    code, lines, err = dump(capsys, str(path), "--print-data-log")
    assert (code, err) == (0, "")
    assert lines[0] == f"Dumping {path}"
    assert lines[1] == "Log starting offset: 0"
    assert lines[2] == (
        "baseOffset: 0 lastOffset: 2 count: 3 baseSequence: -1 lastSequence: -1 "
        "producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false "
        f"isControl: false position: 0 CreateTime: 1000 size: {len(BATCH_A)} magic: 2 "
        f"compresscodec: none crc: {struct.unpack_from('>I', BATCH_A, 17)[0]} isvalid: true"
    )
    assert lines[3:6] == [
        "| offset: 0 CreateTime: 1000 keySize: 2 valueSize: 2 sequence: -1 "
        "headerKeys: [h1,h2] key: k0 payload: v0",
        "| offset: 1 CreateTime: 1000 keySize: -1 valueSize: 2 sequence: -1 "
        "headerKeys: [] key: null payload: v1",
        "| offset: 2 CreateTime: 1000 keySize: 2 valueSize: -1 sequence: -1 "
        "headerKeys: [] key: k2 payload: null",
    ]
    txn = lines[6]
    assert txn.startswith("baseOffset: 3 lastOffset: 4 count: 2 baseSequence: 5 lastSequence: 6 ")
    assert "producerId: 7 producerEpoch: 1 " in txn
    assert "isTransactional: true isControl: false " in txn
    assert f"position: {len(BATCH_A)} " in txn
    assert "compresscodec: gzip" in txn
    # Sequences count up per record; line breaks and bad UTF-8 are escaped, not printed raw.
    assert lines[7].endswith("sequence: 5 headerKeys: [] key: null payload: line\\nbreak")
    assert lines[8].endswith("sequence: 6 headerKeys: [] key: null payload: \\xff\\xfe")
    assert "isTransactional: true isControl: true" in lines[9]
    assert lines[10] == (
        "| offset: 5 CreateTime: 3000 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] "
        "endTxnMarker: COMMIT coordinatorEpoch: 3"
    )
    assert len(lines) == 11


def test_without_print_data_log_only_batches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, segment_name(0), SEGMENT)
    code, lines, _ = dump(capsys, str(path))
    assert code == 0
    assert [line.split(" ")[1] for line in lines[2:]] == ["0", "3", "5"]
    assert not any(line.startswith("|") for line in lines)


def test_torn_tail_stops_cleanly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    torn = BATCH_A[: len(BATCH_A) - 10]  # a whole header, but the batch is cut short
    path = write(tmp_path, segment_name(0), BATCH_A + BATCH_COMMIT + torn)
    code, lines, err = dump(capsys, str(path), "--print-data-log")
    assert (code, err) == (0, "")
    position = len(BATCH_A) + len(BATCH_COMMIT)
    assert lines[-1] == (
        f"Stopped at position {position}: torn tail: a batch of {len(BATCH_A)} bytes with only "
        f"{len(torn)} bytes left; {len(torn)} bytes not dumped"
    )
    assert sum(line.startswith("baseOffset") for line in lines) == 2
    # A torn tail fails --verify-crc: the segment does not end on a batch boundary.
    code, _, _ = dump(capsys, str(path), "--verify-crc")
    assert code == 1


def test_torn_header(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, segment_name(0), BATCH_A + BATCH_A[:20])
    code, lines, _ = dump(capsys, str(path))
    assert code == 0
    assert lines[-1] == (
        f"Stopped at position {len(BATCH_A)}: torn tail: 20 bytes, fewer than a batch header; "
        "20 bytes not dumped"
    )


def test_zero_filled_tail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, segment_name(0), BATCH_A + bytes(100))
    code, lines, _ = dump(capsys, str(path))
    assert code == 0
    assert lines[-1].startswith(f"Stopped at position {len(BATCH_A)}: magic byte 0")


def test_bad_crc_is_shown_and_the_walk_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = bytearray(BATCH_A)
    broken[-1] ^= 0xFF  # inside the CRC-covered records
    path = write(tmp_path, segment_name(0), bytes(broken) + BATCH_COMMIT)
    code, lines, _ = dump(capsys, str(path), "--print-data-log")
    assert code == 0
    assert lines[2].endswith("isvalid: false")
    assert "isvalid: true" in lines[-3]  # the commit marker after it is still dumped
    assert lines[-1] == "1 batch failed the CRC check"
    code, _, _ = dump(capsys, str(path), "--verify-crc")
    assert code == 1


def test_undecodable_records_are_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = bytearray(BATCH_A)
    struct.pack_into(">i", broken, 57, 9)  # claims 9 records, holds 3
    path = write(tmp_path, segment_name(0), bytes(broken))
    code, lines, _ = dump(capsys, str(path), "--print-data-log")
    assert code == 0
    assert lines[3].startswith("| records cannot be decoded:")


def test_empty_segment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, segment_name(0), b"")
    code, lines, _ = dump(capsys, str(path), "--verify-crc")
    assert code == 0
    assert lines == [f"Dumping {path}", "Log starting offset: 0"]


def test_directory_dumps_segments_in_offset_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "orders-3"
    second = build_batch([(None, b"later", ())], timestamp_ms=5, base_offset=100)
    write(directory, segment_name(100), second)
    write(directory, segment_name(0), SEGMENT)
    write(directory, segment_name(0, ".index"), struct.pack(">ii", 3, len(BATCH_A)))
    write(directory, "leader-epoch-checkpoint", b"0\n")
    code, lines, _ = dump(capsys, str(directory))
    assert code == 0
    dumped = [line for line in lines if line.startswith("Dumping")]
    assert dumped == [
        f"Dumping {directory / segment_name(0)}",
        f"Dumping {directory / segment_name(100)}",
    ]
    assert "Log starting offset: 100" in lines
    assert lines[-1].startswith("baseOffset: 100 ")


def test_offset_index(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    entries = struct.pack(">ii", 0, 0) + struct.pack(">ii", 3, 95) + struct.pack(">ii", 7, 4096)
    preallocated = bytes(8 * 5)
    path = write(tmp_path, segment_name(1000, ".index"), entries + preallocated + b"\x01\x02")
    code, lines, _ = dump(capsys, str(path))
    assert code == 0
    assert lines == [
        f"Dumping {path}",
        "offset: 1000 position: 0",
        "offset: 1003 position: 95",
        "offset: 1007 position: 4096",
        "5 zero-filled entries follow: unused preallocated space",
        "2 trailing bytes do not make a whole entry",
    ]


def test_time_index(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    entries = struct.pack(">qi", 1_700_000_000_000, 0) + struct.pack(">qi", 1_700_000_000_500, 42)
    path = write(tmp_path, segment_name(50, ".timeindex"), entries + bytes(12))
    code, lines, _ = dump(capsys, str(path))
    assert code == 0
    assert lines == [
        f"Dumping {path}",
        "timestamp: 1700000000000 offset: 50",
        "timestamp: 1700000000500 offset: 92",
        "1 zero-filled entries follow: unused preallocated space",
    ]


def test_index_without_base_offset_in_its_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "copy.index", struct.pack(">ii", 4, 10))
    code, lines, _ = dump(capsys, str(path))
    assert code == 0
    assert lines[1].startswith("No base offset in the file name copy.index")
    assert lines[2] == "offset: 4 position: 10"


def test_kafka_python_batch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=11,
        producer_epoch=0,
        base_sequence=0,
        batch_size=1 << 20,
    )
    builder.append(0, timestamp=1234, key=b"key", value=b"value", headers=[("trace", b"1")])
    builder.append(1, timestamp=1240, key=None, value=b"second", headers=[])
    path = write(tmp_path / "t-0", segment_name(0), bytes(builder.build()))
    code, lines, _ = dump(capsys, str(path), "--print-data-log", "--verify-crc")
    assert code == 0
    assert "count: 2 baseSequence: 0 lastSequence: 1 producerId: 11 " in lines[2]
    assert "CreateTime: 1240 " in lines[2] and lines[2].endswith("isvalid: true")
    assert lines[3] == (
        "| offset: 0 CreateTime: 1234 keySize: 3 valueSize: 5 sequence: 0 headerKeys: [trace] "
        "key: key payload: value"
    )
    assert lines[4].startswith("| offset: 1 CreateTime: 1240 keySize: -1 valueSize: 6 sequence: 1")


def test_log_append_time_batch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    batch = build_batch([(None, b"v", ())], timestamp_ms=77, log_append_time=True)
    path = write(tmp_path, segment_name(0), batch)
    _, lines, _ = dump(capsys, str(path), "--print-data-log")
    assert "LogAppendTime: 77 " in lines[2]
    assert lines[3].startswith("| offset: 0 LogAppendTime: 77 ")


def test_record_formatter_per_topic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Internal topics get decoders by registering one for the topic's directory name."""

    def decode(record: Record) -> str:
        return f"decoded: {len(record.value or b'')} bytes"

    monkeypatch.setattr(registry, "_RECORD_FORMATTERS", {})
    registry.register_record_formatter("__special")(decode)
    path = write(tmp_path / "__special-12", segment_name(0), BATCH_A)
    _, lines, _ = dump(capsys, str(path), "--print-data-log")
    assert lines[3].endswith("headerKeys: [h1,h2] decoded: 2 bytes")
    # Another topic keeps the default key/payload lines.
    other = write(tmp_path / "special-12", segment_name(0), BATCH_A)
    _, lines, _ = dump(capsys, str(other), "--print-data-log")
    assert lines[3].endswith("key: k0 payload: v0")


def test_dumper_registry_rejects_a_second_dumper_for_a_suffix() -> None:
    with pytest.raises(ValueError, match=r"\.log"):
        registry.register_dumper(".log")(lambda path, options, out: 0)


def test_topic_of() -> None:
    assert registry.topic_of(Path("/d/__transaction_state-7/0.log")) == "__transaction_state"
    assert registry.topic_of(Path("/d/my-topic-0/0.log")) == "my-topic"
    assert registry.topic_of(Path("/d/segments/0.log")) is None


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d / "missing.log", "no such file or directory"),
        (lambda d: write(d, "notes.txt", b"x"), "cannot dump"),
        (lambda d: write(d / "empty-0", "notes.txt", b"x").parent, "holds no .log"),
    ],
)
def test_user_errors_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: object, message: str
) -> None:
    path = make(tmp_path)  # type: ignore[operator]
    code, lines, err = dump(capsys, str(path))
    assert code == 1
    assert lines == []
    assert err.startswith("onceflow: error: ") and message in err
    assert err.count("\n") == 1


def test_control_characters_are_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    batch = build_batch([(b"k\x00", b"a\tb\x1b[31m\x7f", ())], timestamp_ms=1)
    path = write(tmp_path, segment_name(0), batch)
    _, lines, _ = dump(capsys, str(path), "--print-data-log")
    assert lines[3].endswith("key: k\\x00 payload: a\\tb\\x1b[31m\\x7f")
