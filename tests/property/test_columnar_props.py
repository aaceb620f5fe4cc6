"""Properties of the columnar encoder (onceflow.records.columnar) and of the participant
client's columns: a batch built from columns is byte for byte the batch `build_batch`
writes record by record, and decodes back to the same records, for any keys, values
(null, empty, large), headers, timestamps and codec; column slicing, taking and
concatenation keep every string; the vectorised murmur2 is Kafka's."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from onceflow.client.errors import ConfigError
from onceflow.client.participant_columns import (
    Chunk,
    by_partition,
    murmur2_column,
    partition_target,
    split_at_size,
)
from onceflow.client.participant_records import murmur2
from onceflow.records import Compression, build_batch, decode_records
from onceflow.records.column import BinaryColumn, runs_mask
from onceflow.records.columnar import build_column_batch, header_sections

BLOB = st.none() | st.binary(max_size=80)
# A few values cross the one- and two-byte varint lengths (64 and 8192 zigzagged).
BIG = st.none() | st.integers(60, 9000).map(lambda n: b"\xab" * n)
HEADERS = st.lists(st.tuples(st.text(max_size=6), BLOB), max_size=3)
TIMESTAMP = st.integers(0, 1 << 44)
CODECS = st.sampled_from(list(Compression))


@st.composite
def rows(
    draw: st.DrawFn,
) -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]]:
    n = draw(st.integers(1, 40))
    value = st.one_of(BLOB, BIG) if draw(st.booleans()) else BLOB
    return [(draw(BLOB), draw(value), draw(HEADERS)) for _ in range(n)]


@given(
    rows(),
    st.lists(TIMESTAMP, min_size=40, max_size=40),
    CODECS,
    st.booleans(),
    st.integers(0, (1 << 31) - 1),
)
def test_a_column_batch_is_the_record_by_record_batch(
    records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    times: list[int],
    codec: Compression,
    with_headers: bool,
    sequence: int,
) -> None:
    if not with_headers:
        records = [(k, v, []) for k, v, _ in records]
    ts = times[: len(records)]
    keys = [k for k, _, _ in records]
    values = [v for _, v, _ in records]
    expected = build_batch(
        records,
        timestamp_ms=ts[0],
        timestamps=ts,
        producer_id=42,
        producer_epoch=3,
        base_sequence=sequence,
        transactional=True,
        compression=codec,
    )
    got = build_column_batch(
        BinaryColumn.of(values),
        BinaryColumn.of(keys),
        timestamps=np.array(ts, np.int64),
        headers=header_sections([h for _, _, h in records]) if with_headers else None,
        producer_id=42,
        producer_epoch=3,
        base_sequence=sequence,
        transactional=True,
        compression=codec,
    )
    assert got == expected
    decoded = decode_records(got)
    assert [(r.key, r.value, list(r.headers), r.timestamp) for r in decoded] == [
        (k, v, h, t) for (k, v, h), t in zip(records, ts, strict=True)
    ]


@given(st.lists(BLOB, min_size=1, max_size=30), st.data())
def test_take_slice_and_concat_keep_every_string(
    items: list[bytes | None], data: st.DataObject
) -> None:
    column = BinaryColumn.of(items)
    start = data.draw(st.integers(0, len(items)))
    stop = data.draw(st.integers(start, len(items)))
    picks = data.draw(st.lists(st.integers(0, len(items) - 1), max_size=30))

    def as_list(c: BinaryColumn) -> list[bytes | None]:
        lengths = c.lengths()
        return [
            None if lengths[i] < 0 else c.data[c.offsets[i] : c.offsets[i + 1]].tobytes()
            for i in range(len(c))
        ]

    assert as_list(column) == items
    assert as_list(column.slice(start, stop)) == items[start:stop]
    assert as_list(column.take(np.array(picks, np.int64))) == [items[i] for i in picks]
    parts = [column.slice(0, start), column.slice(start, stop), column.slice(stop, len(items))]
    assert as_list(BinaryColumn.concat(parts)) == items


@given(st.lists(st.binary(max_size=40), min_size=1, max_size=50))
def test_vectorised_murmur2_is_kafkas(keys: list[bytes]) -> None:
    hashes = murmur2_column(BinaryColumn.of(keys))
    assert [int(h) - (1 << 32) if h & 0x80000000 else int(h) for h in hashes] == [
        murmur2(k) for k in keys
    ]


@given(
    st.lists(st.tuples(st.none() | st.binary(max_size=8), st.integers(-1, 3)), min_size=1),
    st.booleans(),
)
def test_records_go_to_their_partition_in_order(
    rows_: list[tuple[bytes | None, int]], explicit: bool
) -> None:
    keys = BinaryColumn.of([k for k, _ in rows_])
    values = BinaryColumn.of([b"%d" % i for i in range(len(rows_))])
    chunk = Chunk(values, keys, None, np.zeros(len(rows_), np.int64))
    wanted = np.array([p for _, p in rows_], np.int64) if explicit else None
    got = {p: c for p, c in by_partition(chunk, 4, wanted, keyless=2)}
    seen: list[tuple[int, int]] = []
    for partition, part in got.items():
        indices = []
        for i in range(len(part)):
            index = int(
                part.values.data[part.values.offsets[i] : part.values.offsets[i + 1]].tobytes()
            )
            key, asked = rows_[index]
            if explicit and asked >= 0:
                assert partition == asked
            elif key is None:
                assert partition == 2
            else:
                assert partition == (murmur2(key) & 0x7FFFFFFF) % 4
            seen.append((partition, index))
            indices.append(index)
        assert indices == sorted(indices)  # a partition's records keep their order
    assert sorted(i for _, i in seen) == list(range(len(rows_)))


@given(st.lists(st.integers(1, 500), min_size=1, max_size=60), st.integers(0, 1000))
def test_batches_are_cut_at_batch_size(sizes: list[int], room: int) -> None:
    batch_size = 1000
    cuts = split_at_size(np.array(sizes, np.int64), room, batch_size).tolist()
    assert cuts[-1] == len(sizes) and cuts == sorted(cuts)
    start = 0
    for i, stop in enumerate(cuts):
        piece = sum(sizes[start:stop])
        limit = room if i == 0 else batch_size
        assert piece <= limit or stop - start == 1
        start = stop


def test_columns_of_unequal_lengths_and_bad_partitions_are_refused() -> None:
    values = BinaryColumn.of([b"a", b"b"])
    with pytest.raises(ConfigError, match="1 keys for 2 values"):
        Chunk.checked(values, BinaryColumn.of([b"k"]), None, 0)
    with pytest.raises(ConfigError, match="3 partitions for 2 values"):
        partition_target(np.zeros(3, np.int64), 2, 4, "t")
    with pytest.raises(ConfigError, match="t has 4 partitions"):
        partition_target(np.array([0, 4], np.int64), 2, 4, "t")
    with pytest.raises(ConfigError, match="t has 4 partitions"):
        partition_target(-2, 2, 4, "t")
    assert partition_target(3, 2, 4, "t") == 3
    assert partition_target(None, 2, 4, "t") is None


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), max_size=30), st.integers(0, 5))
def test_runs_mask_marks_exactly_the_runs(
    gaps_and_lengths: list[tuple[int, int]], tail: int
) -> None:
    """Runs in order, touching or empty ones included: the mask is True inside them only."""
    starts, lengths, at = [], [], 0
    for gap, length in gaps_and_lengths:
        starts.append(at + gap)
        lengths.append(length)
        at += gap + length
    total = at + tail
    expected = np.zeros(total, np.bool_)
    for start, length in zip(starts, lengths, strict=True):
        expected[start : start + length] = True
    mask = runs_mask(total, np.array(starts, np.int64), np.array(lengths, np.int64))
    assert mask.dtype == np.bool_
    assert mask.tolist() == expected.tolist()


def _as_batches(
    records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    ts: list[int],
    with_headers: bool,
) -> tuple[bytes, bytes | memoryview]:
    expected = build_batch(records, timestamp_ms=ts[0], timestamps=ts, producer_id=7)
    got = build_column_batch(
        BinaryColumn.of([v for _, v, _ in records]),
        BinaryColumn.of([k for k, _, _ in records]),
        timestamps=np.array(ts, np.int64),
        headers=header_sections([h for _, _, h in records]) if with_headers else None,
        producer_id=7,
    )
    return expected, got


@pytest.mark.parametrize("key", [None, b"k" * 5])
@pytest.mark.parametrize("with_headers", [False, True])
def test_records_of_one_layout_are_written_as_rows_byte_for_byte(
    key: bytes | None, with_headers: bool
) -> None:
    """The encoder's path for runs of records of one layout (Spark's fixed-size values):
    9,000 records, so the offset deltas cross the one-, two- and three-byte varints, and
    timestamps that step (their deltas widen too): each width is a run of its own."""
    headers: list[tuple[str, bytes | None]] = [("h", b"x")] if with_headers else []
    records = [(key, b"%08d" % i + b"v" * 92, headers) for i in range(9000)]
    ts = [1_700_000_000_000 + (i // 2000) * 50 for i in range(9000)]
    expected, got = _as_batches(records, ts, with_headers)
    assert got == expected


@given(
    st.integers(1, 300),
    st.sampled_from([None, b"", b"key"]),
    st.sampled_from([None, b"", b"v" * 70]),
    st.lists(st.integers(0, 20_000), min_size=1, max_size=4),
)
def test_runs_of_one_layout_match_the_record_by_record_batch(
    n: int, key: bytes | None, value: bytes | None, steps: list[int]
) -> None:
    records = [(key, value, []) for _ in range(n)]
    ts = [1_000_000 + steps[i * len(steps) // n] for i in range(n)]
    expected, got = _as_batches(records, ts, with_headers=False)
    assert got == expected
