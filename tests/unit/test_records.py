"""Concrete cases for onceflow.records, cross-checked against real clients' batch code."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import cramjam
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
from aiokafka.record.memory_records import MemoryRecords as AioRecords
from kafka.record.default_records import DefaultRecordBatch as KpBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder

from onceflow.errors import ErrorCode, KafkaError
from onceflow.records import (
    Compression,
    ControlType,
    InvalidBatch,
    Record,
    assign_offsets,
    build_batch,
    build_control_batch,
    compress,
    compute_crc,
    decode_records,
    decompress,
    parse_control_record,
    parse_header,
    scan_batches,
    validate_produced_batches,
)
from onceflow.records.batch import CRC_OFFSET, HEADER_SIZE, MAGIC_OFFSET
from onceflow.records.compression import XERIAL_MAGIC
from onceflow.records.record import (
    VARLONG_MAX_BYTES,
    encode_record,
    encode_varint,
    read_varint,
)

CODECS = list(Compression)
BIG = 1 << 20


def with_crc(buf: bytearray) -> bytes:
    """Re-seal a hand-edited batch so only the edit, not the CRC, is wrong."""
    buf[CRC_OFFSET : CRC_OFFSET + 4] = compute_crc(buf, 0, len(buf)).to_bytes(4, "big")
    return bytes(buf)


def sample(count: int = 3, **kwargs: Any) -> bytes:
    records = [(b"k%d" % i, b"value-%d" % i, [("h", b"x")]) for i in range(count)]
    return build_batch(records, timestamp_ms=1_000, **kwargs)


# --- varints -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (-1, b"\x01"),
        (1, b"\x02"),
        (63, b"\x7e"),
        (-64, b"\x7f"),
        (64, b"\x80\x01"),
        (300, b"\xd8\x04"),
        ((1 << 31) - 1, b"\xfe\xff\xff\xff\x0f"),
        (-(1 << 31), b"\xff\xff\xff\xff\x0f"),
    ],
)
def test_varint_known_encodings(value: int, encoded: bytes) -> None:
    assert encode_varint(value) == encoded
    assert read_varint(encoded, 0) == (value, len(encoded))


def test_varlong_extremes() -> None:
    for value in ((1 << 63) - 1, -(1 << 63)):
        encoded = encode_varint(value)
        assert len(encoded) == VARLONG_MAX_BYTES
        assert read_varint(encoded, 0, VARLONG_MAX_BYTES) == (value, VARLONG_MAX_BYTES)


@pytest.mark.parametrize("data", [b"", b"\x80", b"\xff\xff\xff\xff\xff\x01"])
def test_varint_truncated_or_overlong(data: bytes) -> None:
    with pytest.raises(KafkaError) as exc:
        read_varint(data, 0)
    assert exc.value.code is ErrorCode.corrupt_message


# --- real clients' batches -----------------------------------------------------------------


def test_decode_matches_kafka_python() -> None:
    builder = KpBuilder(
        magic=2,
        compression_type=0,
        is_transactional=1,
        producer_id=42,
        producer_epoch=3,
        base_sequence=17,
        batch_size=BIG,
    )
    builder.append(0, timestamp=5_000, key=b"a", value=b"1", headers=[])
    builder.append(1, timestamp=4_990, key=None, value=b"2", headers=[("h", b"v"), ("n", None)])
    builder.append(2, timestamp=5_020, key=b"c", value=None, headers=[])
    raw = bytes(builder.build())

    header = parse_header(raw)
    theirs = KpBatch(raw)
    assert theirs.validate_crc()
    assert header.crc == theirs.crc == compute_crc(raw, 0, len(raw))
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, 17)
    assert header.is_transactional and not header.is_control
    assert header.last_offset_delta == theirs.last_offset_delta == 2
    assert header.max_timestamp == theirs.max_timestamp == 5_020
    assert header.size == len(raw)
    assert decode_records(raw) == [
        Record(0, 5_000, b"a", b"1", ()),
        Record(1, 4_990, None, b"2", (("h", b"v"), ("n", None))),
        Record(2, 5_020, b"c", None, ()),
    ]


@pytest.mark.parametrize("codec", CODECS)
def test_decode_aiokafka_batches_every_codec(codec: Compression) -> None:
    # aiokafka writes xerial-framed snappy, as Java clients do.
    builder = AioBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=BIG,
    )
    for i in range(20):
        builder.append(i, timestamp=100 + i, key=b"key", value=b"v" * 200, headers=[])
    raw = bytes(builder.build())
    assert parse_header(raw).compression == codec
    if codec is Compression.SNAPPY:
        assert raw[HEADER_SIZE:].startswith(XERIAL_MAGIC)
    records = decode_records(raw)
    assert [r.offset for r in records] == list(range(20))
    assert [r.timestamp for r in records] == [100 + i for i in range(20)]
    assert all(r.value == b"v" * 200 for r in records)


@pytest.mark.parametrize("codec", CODECS)
def test_our_batches_read_by_aiokafka(codec: Compression) -> None:
    records = [(b"k%d" % i, b"payload" * 30, [("trace", b"t%d" % i)]) for i in range(5)]
    raw = build_batch(
        records,
        timestamp_ms=0,
        timestamps=[10, 7, 30, 20, 11],
        base_offset=100,
        producer_id=9,
        producer_epoch=1,
        base_sequence=50,
        transactional=True,
        compression=codec,
    )
    batch = AioRecords(raw).next_batch()
    assert batch is not None and batch.validate_crc()
    assert batch.compression_type == codec
    assert (batch.base_offset, batch.max_timestamp, batch.last_offset_delta) == (100, 30, 4)
    assert [(r.offset, r.timestamp, r.key, r.headers) for r in batch] == [
        (100 + i, ts, b"k%d" % i, [("trace", b"t%d" % i)])
        for i, ts in enumerate([10, 7, 30, 20, 11])
    ]


def test_our_batch_read_by_kafka_python() -> None:
    raw = sample(4, base_offset=5, compression=Compression.GZIP)
    theirs = KpBatch(raw)
    assert theirs.validate_crc()
    assert [(r.offset, r.key, r.value) for r in theirs] == [
        (5 + i, b"k%d" % i, b"value-%d" % i) for i in range(4)
    ]


# --- builder and decoder -----------------------------------------------------------------------


def test_header_fields_of_built_batch() -> None:
    raw = build_batch(
        [(None, b"a", []), (b"k", None, [])],
        timestamp_ms=77,
        base_offset=10,
        partition_leader_epoch=4,
        producer_id=8,
        producer_epoch=2,
        base_sequence=0,
    )
    header = parse_header(raw)
    assert header.size == len(raw)
    assert (header.base_offset, header.partition_leader_epoch) == (10, 4)
    assert (header.record_count, header.last_offset_delta, header.next_offset) == (2, 1, 12)
    assert (header.base_timestamp, header.max_timestamp) == (77, 77)
    assert header.attributes == 0
    assert header.crc == compute_crc(raw, 0, len(raw))


def test_log_append_time_reports_max_timestamp() -> None:
    raw = build_batch(
        [(b"a", b"1", []), (b"b", b"2", [])],
        timestamp_ms=9_000,
        timestamps=[1, 2],
        log_append_time=True,
    )
    header = parse_header(raw)
    assert header.attributes & 0x08
    assert header.max_timestamp == 9_000
    assert [r.timestamp for r in decode_records(raw)] == [9_000, 9_000]


def test_builder_rejects_caller_bugs() -> None:
    with pytest.raises(ValueError):
        build_batch([], timestamp_ms=0)
    with pytest.raises(ValueError):
        build_batch([(b"k", b"v", [])], timestamp_ms=0, timestamps=[1, 2])
    with pytest.raises(KafkaError) as exc:
        build_batch([(b"k", b"v", [])], timestamp_ms=0, compression=6)
    assert exc.value.code is ErrorCode.unsupported_compression_type


def test_decode_ignores_bytes_after_the_batch() -> None:
    raw = sample(2)
    assert decode_records(raw + b"\x00" * 5) == decode_records(raw)


def test_assign_offsets_keeps_crc() -> None:
    first, second = sample(2), sample(3)
    data = first + second
    headers = validate_produced_batches(data, BIG)
    moved = assign_offsets(data, headers, 1_000, leader_epoch=7)
    batches, end = scan_batches(moved)
    assert end == len(moved)
    assert [b.header.base_offset for b in batches] == [1_000, 1_002]
    assert all(b.header.partition_leader_epoch == 7 for b in batches)
    assert [r.offset for r in decode_records(moved[len(first) :])] == [1_002, 1_003, 1_004]


# --- corrupt input ------------------------------------------------------------------------


def _records_section_batch(section: bytes, count: int) -> bytes:
    """A batch whose records section is `section`, with a valid header and CRC."""
    raw = bytearray(sample(1)[:HEADER_SIZE]) + section
    struct.pack_into(">i", raw, 8, len(raw) - 12)
    struct.pack_into(">i", raw, 57, count)
    return with_crc(raw)


@pytest.mark.parametrize(
    "mangle",
    [
        pytest.param(lambda raw: raw[:40], id="shorter-than-header"),
        pytest.param(lambda raw: raw[:-1], id="truncated-body"),
        pytest.param(lambda raw: raw[:-1] + bytes([raw[-1] ^ 1]), id="bad-crc"),
        pytest.param(
            lambda raw: raw[:MAGIC_OFFSET] + b"\x01" + raw[MAGIC_OFFSET + 1 :], id="magic-1"
        ),
        pytest.param(
            lambda raw: with_crc(bytearray(raw[:57] + b"\x00\x00\x00\x05" + raw[61:])),
            id="more-records-than-present",
        ),
        pytest.param(
            lambda raw: with_crc(bytearray(raw[:57] + b"\x00\x00\x00\x01" + raw[61:])),
            id="fewer-records-than-present",
        ),
        pytest.param(
            lambda raw: with_crc(bytearray(raw[:57] + b"\xff\xff\xff\xff" + raw[61:])),
            id="negative-record-count",
        ),
    ],
)
def test_corrupt_batches_raise_corrupt_message(mangle: Callable[[bytes], bytes]) -> None:
    raw = mangle(sample(3))
    with pytest.raises(KafkaError) as exc:
        decode_records(raw)
    assert exc.value.code is ErrorCode.corrupt_message


def _rec(body: bytes) -> bytes:
    return encode_varint(len(body)) + body


@pytest.mark.parametrize(
    "record",
    [
        pytest.param(_rec(b"\x00\x00\x00\x03\x01\x00"), id="key-length-below-minus-one"),
        pytest.param(_rec(b"\x00\x00\x00\x01\x01\x02\x01\x01"), id="null-header-key"),
        pytest.param(_rec(b"\x00\x00\x00\x01\x01\x00\x00"), id="length-exceeds-fields"),
        pytest.param(_rec(b"\x00\x00\x00\xc8\x01ab\x01\x00"), id="key-overruns-record"),
        pytest.param(_rec(b"\x00\x00\x00\x01\x01\x01"), id="negative-header-count"),
        pytest.param(_rec(b"\x00\x00\x00\x01\x01"), id="fields-overrun-record"),
        pytest.param(b"\x20\x00\x00\x00", id="length-overruns-section"),
        pytest.param(b"\x00", id="zero-length"),
    ],
)
def test_malformed_records_raise_corrupt_message(record: bytes) -> None:
    with pytest.raises(KafkaError) as exc:
        decode_records(_records_section_batch(record, 1))
    assert exc.value.code is ErrorCode.corrupt_message


def test_hand_built_record_decodes() -> None:
    # Guards the corrupt cases above: the same layout, well formed, decodes.
    record = encode_record(0, 0, None, None, [("h", None)])
    assert decode_records(_records_section_batch(record, 1))[0].headers == (("h", None),)


def test_compressed_garbage_is_corrupt_even_without_crc_check() -> None:
    raw = bytearray(sample(3, compression=Compression.ZSTD))
    raw[HEADER_SIZE + 8] ^= 0xFF
    with pytest.raises(KafkaError) as exc:
        decode_records(bytes(raw), verify_crc=False)
    assert exc.value.code is ErrorCode.corrupt_message


# --- compression ---------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("data", [b"", b"x", b"abc" * 5_000])
def test_codec_round_trip(codec: Compression, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data


def test_snappy_writes_raw_and_reads_xerial() -> None:
    data = bytes(range(256)) * 300
    assert compress(Compression.SNAPPY, data) == bytes(cramjam.snappy.compress_raw(data))
    blocks = [data[:30_000], data[30_000:60_000], data[60_000:]]
    xerial = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
    for block in blocks:
        packed = bytes(cramjam.snappy.compress_raw(block))
        xerial += struct.pack(">i", len(packed)) + packed
    assert decompress(Compression.SNAPPY, xerial) == data
    assert decompress(Compression.SNAPPY, XERIAL_MAGIC + struct.pack(">ii", 1, 1)) == b""


@pytest.mark.parametrize(
    "data",
    [
        XERIAL_MAGIC + b"\x00\x00\x00\x01",  # header cut short
        XERIAL_MAGIC + struct.pack(">iii", 1, 1, 50) + b"short",  # block overruns
        XERIAL_MAGIC + struct.pack(">iii", 1, 1, -4),  # negative block length
        XERIAL_MAGIC + struct.pack(">ii", 1, 1) + b"\x00\x00",  # torn block length
    ],
)
def test_bad_xerial_is_corrupt(data: bytes) -> None:
    with pytest.raises(KafkaError) as exc:
        decompress(Compression.SNAPPY, data)
    assert exc.value.code is ErrorCode.corrupt_message


@pytest.mark.parametrize("codec", [c for c in CODECS if c is not Compression.NONE])
@pytest.mark.parametrize("data", [b"", b"garbage input", b"\xff" * 64])
def test_garbage_is_corrupt(codec: Compression, data: bytes) -> None:
    with pytest.raises(KafkaError) as exc:
        decompress(codec, data)
    assert exc.value.code is ErrorCode.corrupt_message


@pytest.mark.parametrize("codec", [5, 7, -1])
def test_unknown_codec(codec: int) -> None:
    for op in (compress, decompress):
        with pytest.raises(KafkaError) as exc:
            op(codec, b"data")
        assert exc.value.code is ErrorCode.unsupported_compression_type


# --- control batches ------------------------------------------------------------------------


@pytest.mark.parametrize("control_type", list(ControlType))
def test_control_batch_round_trip(control_type: ControlType) -> None:
    raw = build_control_batch(
        control_type,
        producer_id=1234,
        producer_epoch=5,
        coordinator_epoch=17,
        base_offset=99,
        timestamp_ms=1_700_000_000_000,
        partition_leader_epoch=3,
    )
    header = parse_header(raw)
    assert header.attributes == 0x30
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (1234, 5, -1)
    assert (header.base_offset, header.record_count, header.last_offset_delta) == (99, 1, 0)
    assert header.partition_leader_epoch == 3
    assert parse_control_record(raw) == (control_type, 17)
    (record,) = decode_records(raw)
    assert record.key == struct.pack(">hh", 0, control_type)
    assert record.value == struct.pack(">hi", 0, 17)
    theirs = KpBatch(raw)
    assert theirs.validate_crc() and theirs.is_control_batch and theirs.is_transactional


def _control_like(key: bytes | None, value: bytes | None, *, control: bool = True) -> bytes:
    return build_batch(
        [(key, value, [])],
        timestamp_ms=0,
        producer_id=1,
        producer_epoch=0,
        transactional=True,
        control=control,
    )


def test_control_record_newer_versions_read_as_v0() -> None:
    raw = _control_like(struct.pack(">hhx", 1, 1), struct.pack(">hiq", 2, 8, 0))
    assert parse_control_record(raw) == (ControlType.COMMIT, 8)


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(_control_like(b"\x00\x00\x00", struct.pack(">hi", 0, 1)), id="short-key"),
        pytest.param(_control_like(None, struct.pack(">hi", 0, 1)), id="null-key"),
        pytest.param(_control_like(struct.pack(">hh", 0, 1), b"\x00" * 5), id="short-value"),
        pytest.param(_control_like(struct.pack(">hh", 0, 1), None), id="null-value"),
        pytest.param(
            _control_like(struct.pack(">hh", -1, 1), struct.pack(">hi", 0, 1)), id="neg-version"
        ),
        pytest.param(
            _control_like(struct.pack(">hh", 0, 2), struct.pack(">hi", 0, 1)), id="raft-type"
        ),
        pytest.param(
            _control_like(struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 1), control=False),
            id="not-control",
        ),
        pytest.param(
            build_batch(
                [(struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 1), [])] * 2,
                timestamp_ms=0,
                control=True,
            ),
            id="two-records",
        ),
        pytest.param(b"\x00" * 10, id="garbage"),
    ],
)
def test_malformed_control_records(raw: bytes) -> None:
    with pytest.raises(KafkaError) as exc:
        parse_control_record(raw)
    assert exc.value.code is ErrorCode.corrupt_message


# --- validate_produced_batches and scan_batches -----------------------------------------


def _validation_error(data: bytes, max_bytes: int = BIG) -> ErrorCode:
    with pytest.raises(InvalidBatch) as exc:
        validate_produced_batches(data, max_bytes)
    return exc.value.code


def test_validate_accepts_client_batches() -> None:
    data = sample(2, producer_id=3, producer_epoch=0, base_sequence=0) + sample(1)
    headers = validate_produced_batches(data, BIG)
    assert [h.record_count for h in headers] == [2, 1]


def test_validate_error_codes() -> None:
    raw = sample(3)
    bad_crc = bytearray(raw)
    bad_crc[-1] ^= 0x01
    assert _validation_error(bytes(bad_crc)) is ErrorCode.corrupt_message

    old_magic = bytearray(raw)
    old_magic[MAGIC_OFFSET] = 1
    assert _validation_error(bytes(old_magic)) is ErrorCode.unsupported_for_message_format

    assert _validation_error(raw[:-3]) is ErrorCode.corrupt_message
    assert _validation_error(raw[:30]) is ErrorCode.corrupt_message
    assert _validation_error(raw + raw[:20]) is ErrorCode.corrupt_message
    assert _validation_error(raw, max_bytes=len(raw) - 1) is ErrorCode.message_too_large
    assert _validation_error(b"") is ErrorCode.invalid_record

    marker = build_control_batch(
        ControlType.ABORT, producer_id=1, producer_epoch=0, coordinator_epoch=0, timestamp_ms=0
    )
    assert _validation_error(marker) is ErrorCode.invalid_record

    miscounted = bytearray(raw)
    struct.pack_into(">i", miscounted, 57, 2)  # recordCount 2, lastOffsetDelta 2
    assert _validation_error(with_crc(miscounted)) is ErrorCode.invalid_record


def test_scan_batches_stops_at_torn_tail() -> None:
    first, second, third = sample(1), sample(2), sample(3)
    log = first + second + third
    whole, end = scan_batches(log)
    assert [b.position for b in whole] == [0, len(first), len(first) + len(second)]
    assert end == len(log)

    torn = log[: len(first) + len(second) + len(third) // 2]
    batches, end = scan_batches(torn)
    assert [b.position for b in batches] == [0, len(first)]
    assert end == len(first) + len(second)


def test_scan_batches_stops_at_bad_crc() -> None:
    first, second = sample(1), bytearray(sample(2))
    second[-1] ^= 0x80
    batches, end = scan_batches(first + bytes(second))
    assert len(batches) == 1 and end == len(first)
    assert len(scan_batches(first + bytes(second), verify_crc=False)[0]) == 2
