"""The demo's Spark Structured Streaming job: payments in, clean payments and balances out.

It reads the `payments` topic read_committed through the `onceflow` source, drops invalid
payments (non-positive amounts, unknown currencies), converts amounts to euro cents with
integer arithmetic (deterministic, so a replayed micro-batch computes the same output), and
runs two queries:
- clean payments to `payments-clean`, keyed by payment id;
- running balances per account (a stateful aggregation, update mode) to `balances`.

Both write through the exactly-once `onceflow` sink. Run it as its own process (the demo
kills it with SIGKILL and starts it again from its checkpoints):

    python -m onceflow.demo.job --bootstrap-server HOST:PORT --checkpoint DIR
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Any

CLEAN_TOPIC = "payments-clean"
BALANCES_TOPIC = "balances"
PAYMENTS_TOPIC = "payments"
# The sinks' ids: their write tasks' transactional ids are `<sink id>-<task partition>`.
CLEAN_SINK_ID = "payments-clean"
BALANCES_SINK_ID = "balances"


def build_spark(app: str = "onceflow-payments") -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        # Up to 4 attempts per task, as Spark's own default on a cluster
        # (spark.task.maxFailures); plain local[2] never retries one.
        SparkSession.builder.master("local[2,4]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
        )
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def start_queries(spark: Any, bootstrap: str, checkpoint: str, max_per_trigger: int) -> list[Any]:
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from onceflow.demo.generator import CURRENCIES
    from onceflow.spark import register

    register(spark)
    schema = StructType(
        [
            StructField("id", StringType()),
            StructField("account", StringType()),
            StructField("amount_cents", LongType()),
            StructField("currency", StringType()),
        ]
    )
    payments = (
        spark.readStream.format("onceflow")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", PAYMENTS_TOPIC)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(max_per_trigger))
        .load()
    )
    parsed = payments.select(F.from_json(F.col("value").cast("string"), schema).alias("p")).select(
        "p.*"
    )
    rate = F.create_map(*[x for c, r in CURRENCIES.items() for x in (F.lit(c), F.lit(r))])
    valid = parsed.where((F.col("amount_cents") > 0) & F.col("currency").isin(list(CURRENCIES)))
    enriched = valid.withColumn(
        "amount_eur_cents", (F.col("amount_cents") * rate[F.col("currency")]) / F.lit(100)
    ).withColumn("amount_eur_cents", F.col("amount_eur_cents").cast("long"))
    clean = (
        enriched.select(
            F.col("id").cast("binary").alias("key"),
            F.to_json(F.struct("id", "account", "amount_cents", "currency", "amount_eur_cents"))
            .cast("binary")
            .alias("value"),
        )
        .writeStream.format("onceflow")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", CLEAN_TOPIC)
        .option("sinkId", CLEAN_SINK_ID)
        .option("checkpointLocation", os.path.join(checkpoint, "clean"))
        .trigger(processingTime="1 second")
        .queryName("clean")
        .start()
    )

    # Python sinks have no update mode, so the running balances go through foreachBatch:
    # a batch write with a fixed sinkId there is exactly-once per micro-batch too.
    def write_balances(updated: Any, _batch_id: int) -> None:
        (
            updated.write.format("onceflow")
            .mode("append")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", BALANCES_TOPIC)
            .option("sinkId", BALANCES_SINK_ID)
            .save()
        )

    balances = (
        enriched.groupBy("account")
        .agg(F.sum("amount_eur_cents").alias("balance_eur_cents"), F.count("*").alias("payments"))
        .select(
            F.col("account").cast("binary").alias("key"),
            F.to_json(F.struct("account", "balance_eur_cents", "payments"))
            .cast("binary")
            .alias("value"),
        )
        .writeStream.outputMode("update")
        .foreachBatch(write_balances)
        .option("checkpointLocation", os.path.join(checkpoint, "balances"))
        .trigger(processingTime="1 second")
        .queryName("balances")
        .start()
    )
    return [clean, balances]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the Onceflow payments job")
    parser.add_argument("--bootstrap-server", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=400)
    args = parser.parse_args(argv)
    spark = build_spark()
    queries = start_queries(
        spark, args.bootstrap_server, args.checkpoint, args.max_offsets_per_trigger
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("job started", flush=True)
    while not stop.wait(0.5):
        for q in queries:
            error = q.exception()
            if error is not None:
                print(f"query {q.name} failed: {error}", flush=True)
                return 1
    for q in queries:
        q.stop()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
