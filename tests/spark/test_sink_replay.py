"""The sink inside Spark (the session's local[2] SparkSession): a micro-batch replayed after
the driver died between the sink's commit and Spark's commit log writes nothing twice;
batch writes are transactional per task; bad options fail the query with their name.

Input comes from Spark's file source, so these tests depend on the sink alone. Output is
read read_committed, up to the last stable offset.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from onceflow.spark.ledger import DEFAULT_LEDGER_TOPIC, ledger_group
from tests.helpers.clients import QUIET_LOGGER
from tests.helpers.txn import read_records
from tests.spark.conftest import Kafka

QUERY_TIMEOUT_S = 120


def committed_values(kafka: Kafka, topic: str, partitions: int = 1) -> list[bytes]:
    """Every value a read_committed consumer sees, once no transaction is open."""
    ends = kafka.wait_stable(topic, partitions)
    nonempty = {p: end for p, end in ends.items() if end}
    if not nonempty:
        return []
    recs = read_records("confluent", kafka.bootstrap, topic, nonempty, committed=True)
    return [r.value for r in recs if r.value is not None]


def assert_exactly_once(got: list[bytes], expected: list[str]) -> None:
    counts = Counter(got)
    dups = {v: n for v, n in counts.items() if n > 1}
    assert not dups, f"duplicated in the output: {dict(list(dups.items())[:10])}"
    assert sorted(got) == sorted(e.encode() for e in expected)


def write_lines(directory: Path, name: str, lines: list[str]) -> None:
    # Write aside, then rename: the file source must never see a half-written file.
    tmp = directory.parent / f".{name}.tmp"
    tmp.write_text("".join(f"{line}\n" for line in lines))
    tmp.rename(directory / name)


def run_to_end(
    spark: SparkSession,
    source_dir: Path,
    checkpoint: Path,
    options: dict[str, str],
    via_foreach_batch: bool = False,
) -> StreamingQuery:
    """One availableNow run of the query: file source, one file per micro-batch, two write
    tasks per batch (a hash partitioning, stable under replay). Written by the streaming
    sink, or by a batch write of each micro-batch inside foreachBatch (the way to write
    Spark's update output mode, which Python streaming sinks do not support)."""
    stream = (
        spark.readStream.format("text")
        .option("maxFilesPerTrigger", 1)
        .load(str(source_dir))
        .repartition(2, "value")
        .writeStream
    )
    if via_foreach_batch:

        def write_batch(df: DataFrame, _batch_id: int) -> None:
            df.write.format("onceflow").options(**options).mode("append").save()

        stream = stream.foreachBatch(write_batch)
    else:
        stream = stream.format("onceflow").options(**options)
    q = stream.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    try:
        assert q.awaitTermination(QUERY_TIMEOUT_S), "the availableNow query did not finish"
    finally:
        q.stop()
    assert q.exception() is None, q.exception()
    return q


def ledger_entry(bootstrap: str, transactional_id: str) -> int | None:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": ledger_group(transactional_id),
            "isolation.level": "read_committed",
            "logger": QUIET_LOGGER,
        }
    )
    try:
        (tp,) = c.committed([TopicPartition(DEFAULT_LEDGER_TOPIC, 0)], timeout=20)
        return tp.offset if tp.offset >= 0 else None
    finally:
        c.close()


@pytest.mark.parametrize("via_foreach_batch", [False, True], ids=["sink", "foreachBatch"])
def test_batch_replayed_after_driver_death_writes_nothing_twice(
    spark: SparkSession, kafka: Kafka, tmp_path: Path, via_foreach_batch: bool
) -> None:
    """Batches 0-2 run and commit. Then the driver "dies" between the sink's commit of
    batch 2 and Spark's commit log entry for it: the checkpoint has offsets/2 but no
    commits/2. The restarted query replays batch 2 (same input, same sink id) and goes on
    with batch 3. The output holds every line exactly once.

    The streaming sink's id defaults to the query id; a batch write inside foreachBatch
    names its sink with `sinkId` and takes the micro-batch id from Spark."""
    out = kafka.topic(partitions=2)
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()
    batches = [[f"b{b}-line{i}" for i in range(25)] for b in range(4)]
    for b in range(3):
        write_lines(source, f"part-{b}.txt", batches[b])
    options = {"kafka.bootstrap.servers": kafka.bootstrap, "topic": out}
    if via_foreach_batch:
        options["sinkId"] = f"per-batch-{out}"

    first = run_to_end(spark, source, checkpoint, options, via_foreach_batch)
    assert sorted((checkpoint / "commits").glob("[0-9]*")) == [
        checkpoint / "commits" / str(b) for b in range(3)
    ]
    assert_exactly_once(committed_values(kafka, out, 2), [x for b in batches[:3] for x in b])

    # The driver died after the sink committed batch 2, before Spark logged its commit.
    (checkpoint / "commits" / "2").unlink()
    (checkpoint / "commits" / ".2.crc").unlink(missing_ok=True)  # the local FS's checksum
    write_lines(source, "part-3.txt", batches[3])

    second = run_to_end(spark, source, checkpoint, options, via_foreach_batch)
    assert second.id == first.id  # the default sink id, so the same transactional ids
    replayed = [p for p in second.recentProgress if p["batchId"] == 2]
    assert replayed and replayed[0]["numInputRows"] == 25, "Spark did not replay batch 2"
    assert (checkpoint / "commits" / "3").exists()

    assert_exactly_once(committed_values(kafka, out, 2), [x for b in batches for x in b])
    # Both write tasks of every batch are in the ledger: the next batch for each is 4.
    sink_id = options.get("sinkId", str(first.id))
    for partition in (0, 1):
        assert ledger_entry(kafka.bootstrap, f"{sink_id}-{partition}") == 4


def test_batch_write_is_transactional_and_resumable_with_a_sink_id(
    spark: SparkSession, kafka: Kafka
) -> None:
    out = kafka.topic(partitions=3)
    rows = [(f"k{i}", f"v{i}") for i in range(40)]
    df = spark.createDataFrame(rows, "key string, value string").repartition(3)
    base = {"kafka.bootstrap.servers": kafka.bootstrap, "topic": out}

    df.write.format("onceflow").options(**base).mode("append").save()
    assert_exactly_once(committed_values(kafka, out, 3), [v for _, v in rows])

    # Without a sink id every write is new: the same rows again are written again.
    df.write.format("onceflow").options(**base).mode("append").save()
    assert len(committed_values(kafka, out, 3)) == 80

    # With a sink id, re-running a write that completed writes nothing.
    other = kafka.topic(partitions=1)
    named = {**base, "topic": other, "sinkId": f"nightly-{other}"}
    df.write.format("onceflow").options(**named).mode("append").save()
    df.write.format("onceflow").options(**named).mode("append").save()
    assert_exactly_once(committed_values(kafka, other, 1), [v for _, v in rows])


def test_bad_option_fails_the_write_naming_it(spark: SparkSession, kafka: Kafka) -> None:
    df = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(Exception, match="unknown option 'colour'"):
        (
            df.write.format("onceflow")
            .option("kafka.bootstrap.servers", kafka.bootstrap)
            .option("topic", "t")
            .option("colour", "blue")
            .mode("append")
            .save()
        )
    with pytest.raises(Exception, match="overwrite"):
        (
            df.write.format("onceflow")
            .option("kafka.bootstrap.servers", kafka.bootstrap)
            .option("topic", "t")
            .mode("overwrite")
            .save()
        )
