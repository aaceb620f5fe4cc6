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

import psutil

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


def cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and every descendant: the JVM, Spark's
    Python workers, the broker, and the children they reaped. Unlike a rate, this does not
    move with what else runs on the machine."""
    total = 0.0
    me = psutil.Process()
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def spark_runs(
    bootstrap: str, records: int, repeat: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Records/s and CPU microseconds per record (all processes, the broker's included when
    it is a child of this one) per repetition of each sink in SINKS ("batch" and "task": the
    onceflow sink at that atomicity), run in turn. A warm-up of each job runs first and is
    not counted, so Python worker start-up is not part of the figure."""
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

    def timed(sink: str, job: Any) -> float:
        cpu = cpu_seconds()
        start = time.perf_counter()
        job()
        elapsed = time.perf_counter() - start
        cpu_us[sink].append((cpu_seconds() - cpu) * 1e6 / records)
        return records / elapsed

    jobs = {
        "batch": lambda: to_onceflow("batch"),
        "task": lambda: to_onceflow("task"),
        "noop": to_noop,
    }
    rates: dict[str, list[float]] = {sink: [] for sink in SINKS}
    cpu_us: dict[str, list[float]] = {sink: [] for sink in SINKS}
    try:
        for job in jobs.values():
            job()
        for _ in range(repeat):
            for sink, job in jobs.items():
                rates[sink].append(timed(sink, job))
    finally:
        session.stop()
    return rates, cpu_us
