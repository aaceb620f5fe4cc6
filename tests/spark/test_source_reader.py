"""The source's readers driven directly against the broker, without Spark: planning,
ranges that end in markers and aborted data, Arrow output, and latestOffset() with no read
limit."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.streaming.datasource import ReadAllAvailable

from onceflow.spark.options import parse_source_options
from onceflow.spark.range_reader import KafkaRange, read_range
from onceflow.spark.reader import OnceflowBatchReader, OnceflowStreamReader
from onceflow.spark.source_schema import arrow_schema, kafka_schema
from tests.spark.conftest import Kafka, source_options


def read_all(reader: OnceflowBatchReader | OnceflowStreamReader, ranges: object) -> pa.Table:
    batches = [b for r in ranges for b in reader.read(r)]  # type: ignore[attr-defined]
    return pa.Table.from_batches(batches, schema=arrow_schema(False))


def test_ranges_end_in_markers_and_aborted_data(kafka: Kafka) -> None:
    t = kafka.topic()
    kafka.txn(t, {0: [b"c0", b"c1"]}, commit=True)  # 0, 1, commit marker 2
    kafka.txn(t, {0: [b"a0", b"a1"]}, commit=False)  # 3, 4, abort marker 5
    kafka.txn(t, {0: [b"c2"]}, commit=True)  # 6, commit marker 7
    assert kafka.wait_stable(t) == {0: 8}
    opts = parse_source_options(source_options(kafka, subscribe=t))

    def values(start: int, end: int) -> list[bytes]:
        batches = list(read_range(opts, KafkaRange(t, 0, start, end)))
        assert all(b.schema.equals(arrow_schema(False)) for b in batches)
        return [v for b in batches for v in b.column("value").to_pylist()]

    assert values(0, 8) == [b"c0", b"c1", b"c2"]
    assert values(0, 2) == [b"c0", b"c1"]
    assert values(2, 6) == []  # a marker, aborted records, a marker: nothing, no waiting
    assert values(1, 7) == [b"c1", b"c2"]
    assert values(4, 5) == []  # inside aborted data
    assert values(7, 8) == []  # only the last marker


def test_batch_reader_plans_one_range_per_non_empty_partition(kafka: Kafka) -> None:
    t = kafka.topic(partitions=3)
    kafka.produce(t, [b"x", b"y"], partition=0)
    kafka.txn(t, {2: [b"z"]}, commit=True)
    kafka.wait_stable(t, 3)
    reader = OnceflowBatchReader(parse_source_options(source_options(kafka, subscribe=t)))
    ranges = reader.partitions()
    assert ranges == [KafkaRange(t, 0, 0, 2), KafkaRange(t, 2, 0, 2)]
    table = read_all(reader, ranges)
    assert sorted(table.column("value").to_pylist()) == [b"x", b"y", b"z"]
    assert set(table.column("partition").to_pylist()) == {0, 2}


def test_stream_reader_without_read_limits(kafka: Kafka) -> None:
    """latestOffset() with ReadAllAvailable ends at the last stable offsets, batch after
    batch."""
    t = kafka.topic(partitions=2)
    kafka.produce(t, [b"old"], partition=0)
    reader = OnceflowStreamReader(
        source_options(kafka, subscribe=t, startingOffsets="earliest"), kafka_schema(False)
    )
    start = reader.initialOffset()
    assert start == {t: {"0": 0, "1": 0}}
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {t: {"0": 1, "1": 0}}
    assert read_all(reader, reader.partitions(start, end)).column("value").to_pylist() == [b"old"]
    kafka.txn(t, {1: [b"new"]}, commit=True)
    kafka.wait_stable(t, 2)
    nxt = reader.latestOffset(end, ReadAllAvailable())
    assert nxt == {t: {"0": 1, "1": 2}}
    assert reader.partitions(end, nxt) == [KafkaRange(t, 1, 0, 2)]
    # Nothing new: the same offsets, so no batch.
    assert reader.latestOffset(nxt, ReadAllAvailable()) == nxt
    reader.stop()
