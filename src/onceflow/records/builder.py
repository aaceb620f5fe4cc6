"""Build v2 record batches: for internal topics, control markers, the CLI and tests.

Produced data never passes through here; the broker stores a producer's bytes as sent.
"""

from __future__ import annotations

from collections.abc import Sequence

from onceflow.records.batch import (
    CONTROL_FLAG,
    CRC_OFFSET,
    CURRENT_MAGIC,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG,
    BatchHeader,
    compute_crc,
)
from onceflow.records.compression import Compression, codec_of, compress
from onceflow.records.record import Header, Record, encode_record

__all__ = ["RecordInput", "build_batch", "frame_batch", "frame_in_place", "rebuild_batch"]

# (key, value, headers); None is a null key or value.
RecordInput = tuple[bytes | None, bytes | None, Sequence[Header]]


def build_batch(
    records: Sequence[RecordInput],
    *,
    timestamp_ms: int,
    timestamps: Sequence[int] | None = None,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    control: bool = False,
    compression: Compression | int = Compression.NONE,
    log_append_time: bool = False,
) -> bytes:
    """One v2 batch holding `records` at consecutive offsets from `base_offset`.

    Every record gets `timestamp_ms` unless `timestamps` gives one per record; the first
    becomes baseTimestamp and the largest maxTimestamp. With `log_append_time` the batch is
    marked LOG_APPEND_TIME and maxTimestamp is `timestamp_ms`, the time readers will see.
    Raises ValueError for an empty batch or mismatched timestamps: those are caller bugs.
    """
    count = len(records)
    if count == 0:
        raise ValueError("a record batch needs at least one record")
    times = [timestamp_ms] * count if timestamps is None else list(timestamps)
    if len(times) != count:
        raise ValueError(f"{len(times)} timestamps for {count} records")
    codec = codec_of(compression)
    base_ts = times[0]
    body = b"".join(
        encode_record(delta, ts - base_ts, key, value, headers)
        for delta, ((key, value, headers), ts) in enumerate(zip(records, times, strict=True))
    )
    if codec is not Compression.NONE:
        body = compress(codec, body)
    attributes = int(codec)
    if log_append_time:
        attributes |= TIMESTAMP_TYPE_MASK
    if transactional:
        attributes |= TRANSACTIONAL_FLAG
    if control:
        attributes |= CONTROL_FLAG
    return frame_batch(
        body,
        attributes=attributes,
        count=count,
        base_ts=base_ts,
        max_ts=timestamp_ms if log_append_time else max(times),
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )


def frame_batch(section: bytes | bytearray | memoryview, **framing: int) -> bytes:
    """A v2 batch of `framing["count"]` records at consecutive offsets, around their encoded
    (and perhaps compressed) records section: `frame_in_place` on a copy of it."""
    out = bytearray(HEADER_SIZE + len(section))
    out[HEADER_SIZE:] = section
    frame_in_place(out, **framing)
    return bytes(out)


def frame_in_place(
    batch: bytearray | memoryview,
    *,
    attributes: int,
    count: int,
    base_ts: int,
    max_ts: int,
    base_offset: int,
    partition_leader_epoch: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
) -> None:
    """Write the header and CRC-32C of a v2 batch whose records section already follows
    HEADER_SIZE bytes left free at the start of `batch` (no copy of the records)."""
    size = len(batch)
    HEADER.pack_into(
        batch,
        0,
        base_offset,
        size - LOG_OVERHEAD,
        partition_leader_epoch,
        CURRENT_MAGIC,
        0,  # crc, filled in below
        attributes,
        count - 1,
        base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    )
    batch[CRC_OFFSET : CRC_OFFSET + 4] = compute_crc(batch, 0, size).to_bytes(4, "big")


def rebuild_batch(original: BatchHeader, records: Sequence[Record]) -> bytes:
    """A batch holding only `records` of `original`, as the log cleaner writes it.

    Offsets, the base timestamp, lastOffsetDelta, the producer fields and the attributes stay
    those of the original, so offsets never move and producer state survives compaction.
    recordCount shrinks; that a count is below lastOffsetDelta + 1 is how Kafka marks a
    compacted batch too.
    """
    if not records:
        raise ValueError("a compacted batch keeps at least one record")
    base = original.base_offset
    base_ts = original.base_timestamp
    body = b"".join(
        encode_record(r.offset - base, r.timestamp - base_ts, r.key, r.value, r.headers)
        for r in records
    )
    codec = codec_of(original.compression)
    if codec is not Compression.NONE:
        body = compress(codec, body)
    size = HEADER_SIZE + len(body)
    out = bytearray(size)
    HEADER.pack_into(
        out,
        0,
        base,
        size - LOG_OVERHEAD,
        original.partition_leader_epoch,
        CURRENT_MAGIC,
        0,
        original.attributes,
        original.last_offset_delta,
        base_ts,
        original.max_timestamp,
        original.producer_id,
        original.producer_epoch,
        original.base_sequence,
        len(records),
    )
    out[HEADER_SIZE:] = body
    out[CRC_OFFSET : CRC_OFFSET + 4] = compute_crc(out, 0, size).to_bytes(4, "big")
    return bytes(out)
