"""The Spark connector's overhead: a batch job reading N records with
`spark.read.format("onceflow")` and writing them with `format("onceflow")` at per-batch
atomicity (two-phase transactions, one decision) and at per-task atomicity (one transaction
per task), against the same read writing to Spark's `noop` sink. local[2] session; the
source topic has 2 partitions, so each job runs 2 tasks. The broker needs
`transaction.two.phase.commit.enable` for the per-batch runs.

A fourth sink, `discard` (benchmarks/discard_sink.py), is a Python data source writer that
writes nothing: what any sink on Spark's Python data source API costs before it does
anything, so the onceflow sink's own cost is the distance from it."""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import psutil

from onceflow.bench import create_topic, produce

SOURCE_PARTITIONS = 2
VALUE_BYTES = 100


def spark_session() -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # Spark's Python workers import the discard sink by its module path.
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    from pyspark.sql import SparkSession

    import onceflow.spark
    from benchmarks.discard_sink import DiscardDataSource

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
    session.dataSource.register(DiscardDataSource)
    return session


SINKS = ("batch", "task", "discard", "noop")
# Spark reuses its Python workers but gives each a different role from job to job (a read
# task's, a write task's), and a worker imports a sink's modules the first time it writes
# with it (about 0.1 s for the onceflow sink). After one round of warm-up jobs a timed job
# still found such a worker one time in two, its write task starting after the other had
# finished; three rounds leave none (traced with per-task timestamps, 2026-11-29).
WARM_UP_ROUNDS = 3
ONCEFLOW_SINKS = ("batch", "task")


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
    onceflow sink at that atomicity), run in turn. WARM_UP_ROUNDS of each job run first,
    not counted, so neither a worker's start nor its first import of a sink is part of it."""
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

    def new_topic() -> str:
        # An existing topic, created before the clock starts, as a pipeline writes to.
        out = f"spark-out-{uuid.uuid4().hex[:8]}"
        create_topic(bootstrap, out, SOURCE_PARTITIONS)
        return out

    def to_onceflow(atomicity: str, out: str) -> None:
        (
            frame()
            .write.format("onceflow")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", out)
            .option("atomicity", atomicity)
            .mode("append")
            .save()
        )

    def to_noop(_out: str) -> None:
        frame().write.format("noop").mode("overwrite").save()

    def to_discard(_out: str) -> None:
        frame().write.format("discard").mode("append").save()

    def timed(sink: str, job: Callable[[str], None]) -> float:
        out = new_topic() if sink in ONCEFLOW_SINKS else ""
        cpu = cpu_seconds()
        start = time.perf_counter()
        job(out)
        elapsed = time.perf_counter() - start
        cpu_us[sink].append((cpu_seconds() - cpu) * 1e6 / records)
        return records / elapsed

    jobs: dict[str, Callable[[str], None]] = {
        "batch": lambda out: to_onceflow("batch", out),
        "task": lambda out: to_onceflow("task", out),
        "discard": to_discard,
        "noop": to_noop,
    }
    rates: dict[str, list[float]] = {sink: [] for sink in SINKS}
    cpu_us: dict[str, list[float]] = {sink: [] for sink in SINKS}
    try:
        for _ in range(WARM_UP_ROUNDS):  # not counted
            for sink, job in jobs.items():
                job(new_topic() if sink in ONCEFLOW_SINKS else "")
        for _ in range(repeat):
            for sink, job in jobs.items():
                rates[sink].append(timed(sink, job))
    finally:
        session.stop()
    return rates, cpu_us
