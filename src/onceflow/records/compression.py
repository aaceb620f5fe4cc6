"""The four Kafka compression codecs, all through cramjam, so one wheel covers them.

Snappy is the odd one: Java clients wrap raw snappy blocks in xerial framing, librdkafka and
kafka-python may send either, so decompression accepts both and compression writes raw snappy
like librdkafka. LZ4 is the standard frame format. Any decoder failure becomes
CORRUPT_MESSAGE, so callers only ever see a KafkaError.
"""

from __future__ import annotations

import struct
from enum import IntEnum

import cramjam

from onceflow.errors import ErrorCode, KafkaError

__all__ = ["Compression", "codec_of", "compress", "decompress"]

Buffer = bytes | bytearray | memoryview


class Compression(IntEnum):
    """Codec ids as stored in bits 0-2 of a batch's attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE = len(XERIAL_MAGIC) + 8  # magic, version int32, compatible version int32
_BLOCK_LENGTH = struct.Struct(">i")


def codec_of(codec: int) -> Compression:
    """The codec for an id, or UNSUPPORTED_COMPRESSION_TYPE, as Kafka answers for ids 5-7."""
    try:
        return Compression(codec)
    except ValueError:
        raise KafkaError(
            ErrorCode.unsupported_compression_type, f"unknown compression codec {codec}"
        ) from None


def compress(codec: int, data: Buffer) -> bytes:
    """Compress a batch's records section with `codec`."""
    kind = codec_of(codec)
    if kind is Compression.NONE:
        return bytes(data)
    if kind is Compression.GZIP:
        return bytes(cramjam.gzip.compress(data))
    if kind is Compression.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if kind is Compression.LZ4:
        return bytes(cramjam.lz4.compress(data))
    return bytes(cramjam.zstd.compress(data))


def decompress(codec: int, data: Buffer) -> bytes:
    """Decompress a batch's records section; garbage raises KafkaError(CORRUPT_MESSAGE)."""
    kind = codec_of(codec)
    if kind is Compression.NONE:
        return bytes(data)
    try:
        if kind is Compression.GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if kind is Compression.SNAPPY:
            return _snappy_decompress(data)
        if kind is Compression.LZ4:
            return bytes(cramjam.lz4.decompress(data))
        return bytes(cramjam.zstd.decompress(data))
    except (cramjam.DecompressionError, ValueError, TypeError, OverflowError) as exc:
        raise KafkaError(
            ErrorCode.corrupt_message, f"cannot decompress {kind.name}: {exc}"
        ) from None


def _snappy_decompress(data: Buffer) -> bytes:
    view = memoryview(data)
    if view[: len(XERIAL_MAGIC)] != XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(view))
    # Xerial: after the header, blocks of int32 length + raw snappy, until the end.
    parts: list[bytes] = []
    pos = _XERIAL_HEADER_SIZE
    end = len(view)
    if end < pos:
        raise KafkaError(ErrorCode.corrupt_message, "truncated xerial snappy header")
    while pos < end:
        if end - pos < _BLOCK_LENGTH.size:
            raise KafkaError(ErrorCode.corrupt_message, "truncated xerial snappy block length")
        (length,) = _BLOCK_LENGTH.unpack_from(view, pos)
        pos += _BLOCK_LENGTH.size
        if length < 0 or pos + length > end:
            raise KafkaError(ErrorCode.corrupt_message, f"xerial snappy block of {length} bytes")
        parts.append(bytes(cramjam.snappy.decompress_raw(view[pos : pos + length])))
        pos += length
    return b"".join(parts)
