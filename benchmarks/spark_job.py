"""The Spark connector's overhead: a batch job reading N records with
`spark.read.format("onceflow")` and writing them with `format("onceflow")` (one transaction
per task), against the same read writing to Spark's `noop` sink. local[2] session; the
source topic has 2 partitions, so each job runs 2 tasks."""

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


def spark_runs(bootstrap: str, records: int, repeat: int) -> tuple[list[float], list[float]]:
    """Records/s per repetition: (onceflow sink, noop sink). A warm-up of each job runs first
    and is not counted, so Python worker start-up is not part of the figure."""
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

    def to_onceflow() -> None:
        out = f"spark-out-{uuid.uuid4().hex[:8]}"
        (
            frame()
            .write.format("onceflow")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", out)
            .mode("append")
            .save()
        )

    def to_noop() -> None:
        frame().write.format("noop").mode("overwrite").save()

    def timed(job: Any) -> float:
        start = time.perf_counter()
        job()
        return records / (time.perf_counter() - start)

    onceflow_rates: list[float] = []
    noop_rates: list[float] = []
    try:
        to_noop()
        to_onceflow()
        for _ in range(repeat):
            noop_rates.append(timed(to_noop))
            onceflow_rates.append(timed(to_onceflow))
    finally:
        session.stop()
    return onceflow_rates, noop_rates
