"""Batch reads (`spark.read.format("onceflow")`) and option errors surfacing through Spark."""

from __future__ import annotations

import json

import pytest
from pyspark.errors import AnalysisException, PythonException, StreamingQueryException
from pyspark.sql import Row, SparkSession
from pyspark.sql.types import StringType, StructField, StructType

from tests.spark.conftest import Kafka, source_options

# An error while Spark plans the read (driver) or while a task reads (executor).
SPARK_ERRORS = (AnalysisException, PythonException)


def read(spark: SparkSession, options: dict[str, str]) -> list[Row]:
    rows = spark.read.format("onceflow").options(**options).load().collect()
    return sorted(rows, key=lambda r: (r.topic, r.partition, r.offset))


def values(rows: list[Row]) -> list[bytes]:
    return sorted(r.value for r in rows)


def test_batch_reads_committed_data_up_to_the_lso(spark: SparkSession, kafka: Kafka) -> None:
    t = kafka.topic(partitions=2)
    kafka.txn(t, {0: [b"c0", b"c1"], 1: [b"c2"]}, commit=True)
    kafka.txn(t, {0: [b"a0"], 1: [b"a1"]}, commit=False)
    kafka.produce(t, [b"plain"], partition=1)
    open_txn = kafka.txn_producer()
    open_txn.begin()
    open_txn.send(t, 0, b"o0")
    first_open = open_txn.flush()[0][1]
    kafka.txn(t, {0: [b"c3"]}, commit=True)
    lso = kafka.offsets(t, 2, "lso")
    assert lso[0] == first_open, lso
    hw = kafka.offsets(t, 2, "hw")

    rows = read(spark, source_options(kafka, subscribe=t))  # earliest .. latest (the LSO)
    assert values(rows) == [b"c0", b"c1", b"c2", b"plain"]
    assert [(r.partition, r.offset) for r in rows if r.partition == 1][-1][1] == hw[1] - 1

    # endingOffsets beyond the LSO asks for offsets that are not decided yet.
    beyond = json.dumps({t: {"0": hw[0], "1": -1}})
    with pytest.raises(SPARK_ERRORS, match=rf"beyond its last stable offset {lso[0]}"):
        read(spark, source_options(kafka, subscribe=t, endingOffsets=beyond))
    rows = read(
        spark, source_options(kafka, subscribe=t, endingOffsets=beyond, failOnDataLoss=False)
    )
    assert values(rows) == [b"c0", b"c1", b"c2", b"plain"]

    # JSON offsets on both ends: partition 0 from 1 up to 2 (c1), partition 1 all.
    starting = json.dumps({t: {"0": 1, "1": -2}})
    ending = json.dumps({t: {"0": 2, "1": -1}})
    rows = read(
        spark, source_options(kafka, subscribe=t, startingOffsets=starting, endingOffsets=ending)
    )
    assert values(rows) == [b"c1", b"c2", b"plain"]

    open_txn.commit()
    kafka.wait_stable(t, 2)
    rows = read(spark, source_options(kafka, subscribe=t))
    assert values(rows) == [b"c0", b"c1", b"c2", b"c3", b"o0", b"plain"]
    assert len({(r.partition, r.offset) for r in rows}) == len(rows)


def test_include_headers(spark: SparkSession, kafka: Kafka) -> None:
    t = kafka.topic()
    kafka.produce(t, [b"with"], key=b"k", headers=[("h1", b"v1"), ("h2", None), ("h1", b"again")])
    kafka.produce(t, [b"without"])
    df = spark.read.format("onceflow").options(**source_options(kafka, subscribe=t)).load()
    assert "headers" not in df.columns
    df = (
        spark.read.format("onceflow")
        .options(**source_options(kafka, subscribe=t, includeHeaders=True))
        .load()
    )
    assert df.schema["headers"].dataType.simpleString() == "array<struct<key:string,value:binary>>"
    rows = sorted(df.collect(), key=lambda r: r.offset)
    assert rows[0].key == b"k" and rows[0].value == b"with"
    assert [(h.key, h.value) for h in rows[0].headers] == [
        ("h1", b"v1"),
        ("h2", None),
        ("h1", b"again"),
    ]
    assert rows[1].headers is None and rows[1].key is None


def test_assign_and_subscribe_pattern(spark: SparkSession, kafka: Kafka) -> None:
    a, b = kafka.topic(partitions=2), kafka.topic()
    kafka.produce(a, [b"a0"], partition=0)
    kafka.produce(a, [b"a1"], partition=1)
    kafka.produce(b, [b"b0"])
    rows = read(spark, source_options(kafka, assign=json.dumps({a: [1]})))
    assert values(rows) == [b"a1"]
    rows = read(spark, source_options(kafka, assign=json.dumps({a: [1], b: [0]})))
    assert values(rows) == [b"a1", b"b0"]
    rows = read(spark, source_options(kafka, subscribePattern=f"({a}|{b})"))
    assert values(rows) == [b"a0", b"a1", b"b0"]
    rows = read(spark, source_options(kafka, subscribe=f"{a}, {b}"))
    assert values(rows) == [b"a0", b"a1", b"b0"]
    # A subscription that matches nothing reads nothing.
    assert read(spark, source_options(kafka, subscribePattern="no-such-topic-.*")) == []
    with pytest.raises(SPARK_ERRORS, match=rf"'assign' names partitions that do not exist: {a}-5"):
        read(spark, source_options(kafka, assign=json.dumps({a: [0, 5]})))
    # JSON offsets must name every subscribed partition, as in Spark.
    with pytest.raises(SPARK_ERRORS, match=rf"'startingOffsets' .* no offset for {a}-1"):
        read(spark, source_options(kafka, subscribe=a, startingOffsets=json.dumps({a: {"0": 0}})))


def test_option_errors_name_the_option(spark: SparkSession, kafka: Kafka, tmp_path: object) -> None:
    def load(**options: object) -> None:
        spark.read.format("onceflow").options(**source_options(kafka, **options)).load()

    with pytest.raises(AnalysisException, match="unknown option 'bogusoption'"):
        load(subscribe="t", bogusOption="1")
    with pytest.raises(AnalysisException, match="options 'assign' and 'subscribe' contradict"):
        load(subscribe="t", assign='{"t":[0]}')
    with pytest.raises(AnalysisException, match=r"'kafka\.group\.id' is not supported"):
        load(subscribe="t", **{"kafka.group.id": "mine"})
    with pytest.raises(Exception, match="'startingOffsets' cannot be 'latest' for a batch"):
        spark.read.format("onceflow").options(
            **source_options(kafka, subscribe="t", startingOffsets="latest")
        ).load().collect()
    with pytest.raises(Exception, match="fixed schema"):
        spark.read.format("onceflow").schema(StructType([StructField("v", StringType())])).options(
            **source_options(kafka, subscribe="t")
        ).load().collect()

    # endingOffsets is only wrong for a stream: the query fails as it starts.
    df = (
        spark.readStream.format("onceflow")
        .options(**source_options(kafka, subscribe="t", endingOffsets="latest"))
        .load()
    )
    q = df.writeStream.format("memory").queryName("option_errors").start()
    try:
        with pytest.raises(
            StreamingQueryException, match="option 'endingOffsets' applies to batch"
        ):
            q.awaitTermination(60)
    finally:
        q.stop()
