"""Encode a whole v2 record batch from columns: keys, values, header sections, timestamps.

The bytes are exactly what `builder.build_batch` writes record by record (Kafka's format),
but every step is numpy work over the whole batch: the zigzag varints of all lengths and
deltas are computed as arrays, each record's position follows from a cumulative sum, and
the output is filled field by field (a varint field by at most ten scatters, a key or value
column by one masked copy of its bytes). The cost is per batch and per byte; there is no
Python loop per record.

Headers, which Spark rarely has and which have no columnar form here, come as a column of
each record's encoded headers section (`header_sections`), made record by record.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

import numpy as np

from onceflow.records.batch import (
    HEADER_SIZE,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TRANSACTIONAL_FLAG,
)
from onceflow.records.builder import frame_batch, frame_in_place
from onceflow.records.column import BinaryColumn, Bytes, Ints, runs_mask
from onceflow.records.compression import Compression, codec_of, compress
from onceflow.records.record import Header, encode_varint

__all__ = ["build_column_batch", "encode_records", "header_sections", "varint_sizes"]

_VARINT_LIMITS = np.array([1 << (7 * k) for k in range(1, 10)], np.uint64)
_NO_HEADERS = 0  # a headers section of zero headers is the one byte zigzag(0)
# Beyond this many runs of one layout, the field-by-field scatters are cheaper.
_MAX_RUNS = 16


def zigzag(values: Ints) -> np.ndarray:
    """Kafka's zigzag mapping of signed values, as unsigned 64-bit."""
    return ((values << 1) ^ (values >> 63)).view(np.uint64)


def varint_sizes(raw: np.ndarray) -> Ints:
    """Bytes of each zigzagged value as a varint: 1 to 10."""
    return 1 + np.searchsorted(_VARINT_LIMITS, raw, side="right").astype(np.int64)


def _scatter_varint(out: Bytes, at: Ints, raw: np.ndarray, sizes: Ints) -> None:
    """Write each varint of `raw` (zigzagged) at `at`: one scatter per byte position."""
    width = int(sizes.max(initial=1))
    if width == 1:  # all below 128 (null keys, equal timestamps): no continuation bits
        out[at] = raw.astype(np.uint8)
        return
    remaining = raw.copy()
    for j in range(width):
        live = sizes > j
        more = sizes > j + 1
        byte = (remaining & np.uint64(0x7F)).astype(np.uint8)
        byte[more] |= 0x80
        if live.all():
            out[at + j] = byte
        else:
            out[at[live] + j] = byte[live]
        remaining >>= np.uint64(7)


def _fill(out: Bytes, at: Ints, column: BinaryColumn, sizes: Ints) -> None:
    """Copy the column's strings to `at`, each to its own place: one masked copy."""
    if column.nbytes:
        out[runs_mask(len(out), at, sizes)] = column.stream()


def _uniform_runs(sizes: Sequence[Ints]) -> list[tuple[int, int]] | None:
    """Runs [start, stop) of records whose every field has the same size in the run (the
    common case: values of one length, null or same-length keys, varints that widen only
    at a few offsets), or None when there are too many runs to pay."""
    n = len(sizes[0])
    starts = np.zeros(n, np.bool_)
    for size in sizes:
        starts[1:] |= size[1:] != size[:-1]
    bounds = np.flatnonzero(starts)
    if len(bounds) >= _MAX_RUNS:
        return None
    edges = [0, *bounds.tolist(), n]
    return list(pairwise(edges))


def _encode_run(
    out: Bytes,
    position: int,
    start: int,
    stop: int,
    raws: Sequence[np.ndarray],
    layout: Sequence[Ints],
    keys: BinaryColumn | None,
    values: BinaryColumn,
    headers: BinaryColumn | None,
) -> None:
    """Records [start, stop), all of one layout, written at `position` as the rows of a 2-D
    view: each field is a column range, filled by a strided copy (no index arrays)."""
    length_size, ts_size, delta_size, key_size, key_bytes, value_size, value_bytes = (
        int(size[start]) for size in layout
    )
    body_raw, ts_raw, delta_raw, key_raw, value_raw = (raw[start:stop] for raw in raws)
    count = stop - start
    width = length_size + 1 + ts_size + delta_size + key_size + key_bytes + value_size
    width += value_bytes + (1 if headers is None else int(headers.sizes()[start]))
    block = out[position : position + count * width].reshape(count, width)
    column = _put_varint(block, 0, body_raw, length_size)
    block[:, column] = 0  # attributes
    column += 1
    column = _put_varint(block, column, ts_raw, ts_size)
    column = _put_varint(block, column, delta_raw, delta_size)
    column = _put_varint(block, column, key_raw, key_size)
    column = _put_strings(block, column, keys, start, stop, key_bytes)
    column = _put_varint(block, column, value_raw, value_size)
    column = _put_strings(block, column, values, start, stop, value_bytes)
    if headers is None:
        block[:, column] = _NO_HEADERS
    else:
        _put_strings(block, column, headers, start, stop, width - column)


def _put_varint(block: Bytes, column: int, raw: np.ndarray, size: int) -> int:
    """Varints of one `size` into columns [column, column + size); the next column."""
    for j in range(size):
        byte = (raw >> np.uint64(7 * j)) & np.uint64(0x7F)
        if j < size - 1:
            byte |= np.uint64(0x80)
        block[:, column + j] = byte
    return column + size


def _put_strings(
    block: Bytes, column: int, strings: BinaryColumn | None, start: int, stop: int, size: int
) -> int:
    """Strings [start, stop) of one `size` (back to back in the column's stream) into
    columns [column, column + size); the next column."""
    if strings is not None and size:
        first = int(strings.offsets[start])
        stream = strings.data[first : first + (stop - start) * size]
        block[:, column : column + size] = stream.reshape(stop - start, size)
    return column + size


def encode_records(
    values: BinaryColumn,
    keys: BinaryColumn | None = None,
    timestamp_deltas: Ints | None = None,
    headers: BinaryColumn | None = None,
    headroom: int = 0,
) -> Bytes:
    """The records section of a batch (uncompressed): record i has offset delta i, key
    `keys[i]` (null for all without `keys`), value `values[i]`, timestamp delta
    `timestamp_deltas[i]` (0 without), and headers section `headers[i]` (none without).
    `headroom` bytes are left unwritten before it (room for the batch header)."""
    n = len(values)
    if keys is not None and len(keys) != n:
        raise ValueError(f"{len(keys)} keys for {n} values")
    if headers is not None and len(headers) != n:
        raise ValueError(f"{len(headers)} header sections for {n} values")
    ts = np.zeros(n, np.int64) if timestamp_deltas is None else timestamp_deltas
    if len(ts) != n:
        raise ValueError(f"{len(ts)} timestamps for {n} values")
    key_len = np.full(n, -1, np.int64) if keys is None else keys.lengths()
    value_len = values.lengths()
    fields = [
        zigzag(ts.astype(np.int64, copy=False)),
        zigzag(np.arange(n, dtype=np.int64)),
        zigzag(key_len),
        zigzag(value_len),
    ]
    ts_size, delta_size, key_size, value_size = (varint_sizes(f) for f in fields)
    key_bytes = np.maximum(key_len, 0)
    value_bytes = np.maximum(value_len, 0)
    header_bytes = np.ones(n, np.int64) if headers is None else headers.sizes()
    # The record after its length prefix: attributes, the varints, key, value, headers.
    body = 1 + ts_size + delta_size + key_size + key_bytes + value_size + value_bytes
    body += header_bytes
    body_raw = zigzag(body)
    length_size = varint_sizes(body_raw)
    ends = np.cumsum(length_size + body)
    ends += headroom
    total = int(ends[-1]) if n else headroom
    out = np.empty(total, np.uint8)
    at = ends - body - length_size  # each record's start
    layout = [length_size, ts_size, delta_size, key_size, key_bytes, value_size, value_bytes]
    runs = _uniform_runs([*layout, header_bytes])
    if runs is not None:
        raws = [body_raw, *fields]
        for start, stop in runs:
            _encode_run(out, int(at[start]), start, stop, raws, layout, keys, values, headers)
        return out
    _scatter_varint(out, at, body_raw, length_size)
    at += length_size
    out[at] = 0  # attributes
    at += 1
    for raw, size in ((fields[0], ts_size), (fields[1], delta_size), (fields[2], key_size)):
        _scatter_varint(out, at, raw, size)
        at += size
    if keys is not None:
        _fill(out, at, keys, key_bytes)
    at += key_bytes
    _scatter_varint(out, at, fields[3], value_size)
    at += value_size
    _fill(out, at, values, value_bytes)
    at += value_bytes
    if headers is None:
        out[at] = _NO_HEADERS
    else:
        _fill(out, at, headers, header_bytes)
    return out


def header_sections(rows: Sequence[Sequence[Header] | None]) -> BinaryColumn:
    """Each record's encoded headers section (count, then name and value of each)."""
    sections = []
    for headers in rows:
        parts = [encode_varint(len(headers or ()))]
        for name, value in headers or ():
            encoded = name.encode("utf-8", "surrogateescape")
            parts += (encode_varint(len(encoded)), encoded)
            parts.append(b"\x01" if value is None else encode_varint(len(value)) + value)
        sections.append(b"".join(parts))
    return BinaryColumn.of(sections)


def build_column_batch(
    values: BinaryColumn,
    keys: BinaryColumn | None = None,
    *,
    timestamps: Ints,
    headers: BinaryColumn | None = None,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    compression: Compression | int = Compression.NONE,
) -> bytes | memoryview:
    """One v2 batch of the records `encode_records` describes, record i at timestamp
    `timestamps[i]` (CREATE_TIME; the first is the base timestamp, the largest the max).
    Byte for byte what `build_batch` makes of the same records; uncompressed, a view of
    the buffer the records were encoded into, framed where they lie."""
    count = len(values)
    if count == 0:
        raise ValueError("a record batch needs at least one record")
    if len(timestamps) != count:
        raise ValueError(f"{len(timestamps)} timestamps for {count} records")
    base_ts = int(timestamps[0])
    codec = codec_of(compression)
    framing = {
        "attributes": int(codec) | (TRANSACTIONAL_FLAG if transactional else 0),
        "count": count,
        "base_ts": base_ts,
        "max_ts": int(timestamps.max()),
        "base_offset": base_offset,
        "partition_leader_epoch": partition_leader_epoch,
        "producer_id": producer_id,
        "producer_epoch": producer_epoch,
        "base_sequence": base_sequence,
    }
    if codec is Compression.NONE:  # no copy of the records: the header goes in front
        batch = encode_records(values, keys, timestamps - base_ts, headers, HEADER_SIZE).data
        frame_in_place(batch, **framing)
        return batch
    body = encode_records(values, keys, timestamps - base_ts, headers)
    return frame_batch(compress(codec, memoryview(body.data)), **framing)
