"""Record batch v2 headers: parsed with struct, never re-encoded.

A batch stays the bytes its producer sent. The broker reads the 61-byte header, checks the
CRC-32C (which covers attributes..end), and rewrites only `baseOffset` and
`partitionLeaderEpoch`, both outside the CRC. All work here is per batch, never per record.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

import crc32c as _crc32c

from onceflow.errors import ErrorCode, KafkaError

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordCount
HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes not counted by batchLength
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21  # the CRC covers from here to the end of the batch
MAX_TIMESTAMP_OFFSET = 35
CURRENT_MAGIC = 2

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20
DELETE_HORIZON_FLAG = 0x40

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

_BASE_AND_EPOCH = struct.Struct(">q")
_ATTRIBUTES = struct.Struct(">h")
_CRC = struct.Struct(">I")
_EPOCH = struct.Struct(">i")
_LENGTH = struct.Struct(">i")


class BatchHeader(NamedTuple):
    """The fixed header of one v2 record batch."""

    base_offset: int
    batch_length: int  # bytes after the length field
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """The batch's whole size on disk and on the wire."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        """The sequence of the batch's last record, wrapping at 2^31 - 1 like Kafka's."""
        if self.base_sequence < 0:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (1 << 31)


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the header at `pos`. The caller has checked that 61 bytes are there."""
    return BatchHeader._make(HEADER.unpack_from(buf, pos))


def compute_crc(buf: bytes | bytearray | memoryview, pos: int, size: int) -> int:
    """CRC-32C of a batch's attributes..end, as stored in its header."""
    view = memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + size]
    return int(_crc32c.crc32c(view))


class InvalidBatch(KafkaError):
    """A produced batch that must be rejected with the carried error code."""


def validate_produced_batches(
    data: bytes | bytearray | memoryview, max_message_bytes: int
) -> list[BatchHeader]:
    """Check every batch of a Produce request's partition data, as Kafka's LogValidator does.

    Raises InvalidBatch with Kafka's error code for the first problem: a length that does not
    fit, an old magic, a bad CRC, an inconsistent record count, a control batch from a client,
    or a batch over `message.max.bytes`. Returns the headers in order.
    """
    headers: list[BatchHeader] = []
    end = len(data)
    if end == 0:
        raise InvalidBatch(ErrorCode.invalid_record, "no record batch in the request")
    pos = 0
    while pos < end:
        if end - pos < LOG_OVERHEAD + 5:
            raise InvalidBatch(ErrorCode.corrupt_message, "truncated batch header")
        magic = data[pos + MAGIC_OFFSET]
        if magic != CURRENT_MAGIC:
            raise InvalidBatch(
                ErrorCode.unsupported_for_message_format,
                f"record batch magic {magic} is not supported; only magic 2",
            )
        if end - pos < HEADER_SIZE:
            raise InvalidBatch(ErrorCode.corrupt_message, "truncated batch header")
        header = parse_header(data, pos)
        size = header.size
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + size > end:
            raise InvalidBatch(
                ErrorCode.corrupt_message, f"batch length {header.batch_length} does not fit"
            )
        if size > max_message_bytes:
            raise InvalidBatch(
                ErrorCode.message_too_large,
                f"batch of {size} bytes is larger than message.max.bytes={max_message_bytes}",
            )
        if compute_crc(data, pos, size) != header.crc:
            raise InvalidBatch(ErrorCode.corrupt_message, "CRC-32C mismatch")
        if header.record_count <= 0 or header.last_offset_delta + 1 != header.record_count:
            raise InvalidBatch(
                ErrorCode.invalid_record,
                f"inconsistent record count {header.record_count} for "
                f"last offset delta {header.last_offset_delta}",
            )
        if header.is_control:
            raise InvalidBatch(
                ErrorCode.invalid_record, "clients are not allowed to write control records"
            )
        if header.has_producer_id and header.base_sequence < 0:
            raise InvalidBatch(ErrorCode.invalid_record, "producer id without a base sequence")
        if header.is_transactional and not header.has_producer_id:
            raise InvalidBatch(ErrorCode.invalid_record, "transactional batch without producer")
        headers.append(header)
        pos += size
    return headers


def assign_offsets(
    data: bytes | bytearray | memoryview,
    headers: list[BatchHeader],
    first_offset: int,
    leader_epoch: int,
) -> bytearray:
    """Copy the batches once, rewriting each baseOffset and partitionLeaderEpoch in place.

    Neither field is covered by the CRC, so the producer's CRC stays valid.
    """
    out = bytearray(data)
    pos = 0
    offset = first_offset
    for header in headers:
        _BASE_AND_EPOCH.pack_into(out, pos, offset)
        _EPOCH.pack_into(out, pos + LOG_OVERHEAD, leader_epoch)
        offset += header.last_offset_delta + 1
        pos += header.size
    return out


class ScannedBatch(NamedTuple):
    position: int
    header: BatchHeader


def scan_batches(
    buf: bytes | bytearray | memoryview, start: int = 0, *, verify_crc: bool = True
) -> tuple[list[ScannedBatch], int]:
    """Walk whole, valid batches from `start`; stop at the first torn or corrupt one.

    Returns the batches and the position just past the last valid one. Recovery truncates
    a segment there: a partial batch is never served.
    """
    batches: list[ScannedBatch] = []
    end = len(buf)
    pos = start
    while end - pos >= HEADER_SIZE:
        if buf[pos + MAGIC_OFFSET] != CURRENT_MAGIC:
            break
        header = parse_header(buf, pos)
        size = header.size
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + size > end:
            break
        if verify_crc and compute_crc(buf, pos, size) != header.crc:
            break
        batches.append(ScannedBatch(pos, header))
        pos += size
    return batches, pos


def iter_batches(buf: bytes | bytearray | memoryview, start: int = 0) -> Iterator[ScannedBatch]:
    """Iterate the batches of trusted bytes (already validated), without CRC checks."""
    batches, _ = scan_batches(buf, start, verify_crc=False)
    return iter(batches)


def read_batch_length(buf: bytes | bytearray | memoryview, pos: int) -> int:
    """The whole size of the batch at `pos`, from its length field."""
    (length,) = _LENGTH.unpack_from(buf, pos + 8)
    return int(length) + LOG_OVERHEAD


def stamp_log_append_time(
    buf: bytearray, headers: list[BatchHeader], now_ms: int
) -> list[BatchHeader]:
    """Mark every batch LOG_APPEND_TIME with `now_ms` as its max timestamp, as Kafka does for
    topics with message.timestamp.type=LogAppendTime. Both fields are under the CRC, so each
    batch's CRC is computed again (per batch, in C)."""
    out: list[BatchHeader] = []
    pos = 0
    for header in headers:
        attributes = header.attributes | TIMESTAMP_TYPE_MASK
        _ATTRIBUTES.pack_into(buf, pos + ATTRIBUTES_OFFSET, attributes)
        _BASE_AND_EPOCH.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, now_ms)
        crc = compute_crc(buf, pos, header.size)
        _CRC.pack_into(buf, pos + CRC_OFFSET, crc)
        out.append(header._replace(attributes=attributes, max_timestamp=now_ms, crc=crc))
        pos += header.size
    return out
