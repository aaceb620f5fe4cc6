"""The Spark connector's overhead: a batch job reading N records with
`spark.read.format("onceflow")` and writing them with `format("onceflow")` at per-batch
atomicity (two-phase transactions, one decision) and at per-task atomicity (one transaction
per task), against the same read writing to Spark's `noop` sink. local[2] session; the
source topic has 2 partitions, so each job runs 2 tasks. The broker needs
`transaction.two.phase.commit.enable` for the per-batch runs."""

from __future__ import annotations

import os
import sys
import time
import uuid
from typing import Any

from onceflow.bench import create_topic, produce

SOURCE_PARTITIONS = 2
VALUE_BYTES = 100


def spark_session() -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import onceflow.spark

    session = (
        SparkSession.builder.master("local[2]")
        .appName("onceflow-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    onceflow.spark.register(session)
    return session


SINKS = ("batch", "task", "noop")


def spark_runs(bootstrap: str, records: int, repeat: int) -> dict[str, list[float]]:
    """Records/s per repetition of each sink in SINKS ("batch" and "task": the onceflow
    sink at that atomicity), run in turn. A warm-up of each job runs first and is not
    counted, so Python worker start-up is not part of the figure."""
    source = f"spark-source-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, source, SOURCE_PARTITIONS)
    produce(bootstrap, source, records, VALUE_BYTES, partitions=SOURCE_PARTITIONS)
    session = spark_session()

    def frame() -> Any:
        return (
            session.read.format("onceflow")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", source)
            .load()
            .select("key", "value")
        )

    def to_onceflow(atomicity: str) -> None:
        # Created first: the participant client (per-batch) asks Metadata without
        # auto-creation, and both atomicities should write to the same kind of topic.
        out = f"spark-out-{uuid.uuid4().hex[:8]}"
        create_topic(bootstrap, out, SOURCE_PARTITIONS)
        (
            frame()
            .write.format("onceflow")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", out)
            .option("atomicity", atomicity)
            .mode("append")
            .save()
        )

    def to_noop() -> None:
        frame().write.format("noop").mode("overwrite").save()

    def timed(job: Any) -> float:
        start = time.perf_counter()
        job()
        return records / (time.perf_counter() - start)

    jobs = {
        "batch": lambda: to_onceflow("batch"),
        "task": lambda: to_onceflow("task"),
        "noop": to_noop,
    }
    rates: dict[str, list[float]] = {sink: [] for sink in SINKS}
    try:
        for job in jobs.values():
            job()
        for _ in range(repeat):
            for sink, job in jobs.items():
                rates[sink].append(timed(job))
    finally:
        session.stop()
    return rates
