"""Records inside a v2 batch: zigzag varints, one record's layout, and batch decoding.

The broker itself never needs this for produced data (batches stay bytes). It serves the
internal topics, control markers, the CLI and tests, which need keys and values. Every
malformed input raises KafkaError(CORRUPT_MESSAGE), so a bad segment or request can never
surface as an IndexError deep in a handler.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from onceflow.errors import ErrorCode, KafkaError
from onceflow.records.batch import (
    CURRENT_MAGIC,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    TIMESTAMP_TYPE_MASK,
    compute_crc,
    parse_header,
)
from onceflow.records.compression import Compression, decompress

__all__ = [
    "Header",
    "Record",
    "decode_records",
    "encode_record",
    "encode_varint",
    "read_varint",
]

Buffer = bytes | bytearray | memoryview
Header = tuple[str, bytes | None]

VARINT_MAX_BYTES = 5  # int32
VARLONG_MAX_BYTES = 10  # int64


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record with its absolute offset and timestamp."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


def _corrupt(message: str) -> KafkaError:
    return KafkaError(ErrorCode.corrupt_message, message)


def encode_varint(value: int) -> bytes:
    """Zigzag varint (or varlong: same encoding, just longer), as Kafka writes it."""
    raw = (value << 1) ^ (value >> 63)
    if raw < 0x80:
        return bytes((raw,))
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def read_varint(buf: bytes, pos: int, max_bytes: int = VARINT_MAX_BYTES) -> tuple[int, int]:
    """Decode a zigzag varint at `pos`; returns (value, position after it).

    `max_bytes` is 5 for a varint and 10 for a varlong, so an endless run of continuation
    bytes is caught early.
    """
    if pos >= len(buf):
        raise _corrupt("truncated varint")
    byte = buf[pos]
    if byte < 0x80:  # the common one-byte case
        return (byte >> 1) ^ -(byte & 1), pos + 1
    raw = 0
    shift = 0
    limit = min(len(buf), pos + max_bytes)
    while pos < limit:
        byte = buf[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
    raise _corrupt("truncated or overlong varint")


def _encode_bytes(data: bytes | None) -> bytes:
    if data is None:
        return b"\x01"  # zigzag(-1)
    return encode_varint(len(data)) + data


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header] = (),
) -> bytes:
    """One record, length prefix included. Attributes are always 0: Kafka defines none.

    Header keys are UTF-8; surrogateescape lets keys decoded from foreign bytes round trip.
    """
    parts = [
        b"\x00",
        encode_varint(timestamp_delta),
        encode_varint(offset_delta),
        _encode_bytes(key),
        _encode_bytes(value),
        encode_varint(len(headers)),
    ]
    for name, header_value in headers:
        parts.append(_encode_bytes(name.encode("utf-8", "surrogateescape")))
        parts.append(_encode_bytes(header_value))
    body = b"".join(parts)
    return encode_varint(len(body)) + body


def _read_bytes(buf: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    length, pos = read_varint(buf, pos)
    if length < 0:
        if length != -1:
            raise _corrupt(f"negative length {length}")
        return None, pos
    stop = pos + length
    if stop > end:
        raise _corrupt(f"field of {length} bytes overruns its record")
    return buf[pos:stop], stop


def decode_records(batch: Buffer, *, verify_crc: bool = True) -> list[Record]:
    """Decode every record of the batch at the start of `batch` (trailing bytes are ignored).

    Decompresses the records section when the attributes say so. With LOG_APPEND_TIME every
    record reports the batch's maxTimestamp, as Kafka's consumers see it. Control batches
    decode like any other; control.py interprets their one record.
    """
    if len(batch) < HEADER_SIZE:
        raise _corrupt(f"batch of {len(batch)} bytes is shorter than its header")
    if batch[MAGIC_OFFSET] != CURRENT_MAGIC:
        raise _corrupt(f"record batch magic {batch[MAGIC_OFFSET]} is not 2")
    header = parse_header(batch)
    size = header.size
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or size > len(batch):
        raise _corrupt(f"batch length {header.batch_length} does not fit {len(batch)} bytes")
    if verify_crc and compute_crc(batch, 0, size) != header.crc:
        raise _corrupt("CRC-32C mismatch")
    if header.record_count < 0:
        raise _corrupt(f"negative record count {header.record_count}")
    if header.compression > Compression.ZSTD:
        raise _corrupt(f"unknown compression codec {header.compression}")
    buf = decompress(header.compression, memoryview(batch)[HEADER_SIZE:size])
    log_append_time = bool(header.attributes & TIMESTAMP_TYPE_MASK)
    base_offset = header.base_offset
    base_ts = header.base_timestamp
    max_ts = header.max_timestamp
    records: list[Record] = []
    pos = 0
    end = len(buf)
    for _ in range(header.record_count):
        length, pos = read_varint(buf, pos)
        if length <= 0 or pos + length > end:
            raise _corrupt(f"record length {length} does not fit the batch")
        offset_delta, ts_delta, key, value, headers = _decode_one(buf, pos, pos + length)
        pos += length
        timestamp = max_ts if log_append_time else base_ts + ts_delta
        records.append(Record(base_offset + offset_delta, timestamp, key, value, headers))
    if pos != end:
        raise _corrupt(f"{end - pos} bytes after the last of {header.record_count} records")
    return records


def _decode_one(
    buf: bytes, pos: int, end: int
) -> tuple[int, int, bytes | None, bytes | None, tuple[Header, ...]]:
    """The fields of the record in buf[pos:end], after its length prefix."""
    pos += 1  # attributes: unused in v2
    ts_delta, pos = read_varint(buf, pos, VARLONG_MAX_BYTES)
    offset_delta, pos = read_varint(buf, pos)
    key, pos = _read_bytes(buf, pos, end)
    value, pos = _read_bytes(buf, pos, end)
    count, pos = read_varint(buf, pos)
    if count < 0:
        raise _corrupt(f"negative header count {count}")
    headers: list[Header] = []
    for _ in range(count):
        name, pos = _read_bytes(buf, pos, end)
        if name is None:
            raise _corrupt("null header key")
        header_value, pos = _read_bytes(buf, pos, end)
        headers.append((name.decode("utf-8", "surrogateescape"), header_value))
    if pos != end:
        raise _corrupt("record length does not match its fields")
    return offset_delta, ts_delta, key, value, tuple(headers)
