"""A write task that fails part-way through its transaction and that Spark retries: the
output is exactly once.

Spark's local[N] master never retries a task, so this test runs its own driver in a
subprocess with master local[2, 4] (up to 4 attempts per task). The driver registers
`onceflow_flaky`, the onceflow data source with a fault injected into the rows a write
task receives: on attempt 0 of a chosen batch, after some rows were produced inside the
task's transaction and reached the broker, the input fails ("raise": the task's write
raises, as when an upstream expression fails) or the Python worker dies on the spot
("crash": nothing is cleaned up, the transaction stays open until the retry's
init_transactions() aborts it). Spark retries the task as attempt 1, which writes.

Checked by reading read_committed: every input line exactly once. Read read_uncommitted,
the log also holds the failed attempts' records, which shows that each failure happened
mid-transaction and was aborted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from tests.helpers.broker import die_with_parent
from tests.helpers.txn import read_records
from tests.spark.conftest import Kafka

DRIVER_TIMEOUT_S = 300
ROWS_BEFORE_FAILURE = 10

DRIVER = r'''
"""Spark driver for test_sink_retry: master local[2, 4], so failed tasks are retried."""
import json
import os
import sys
import time
from pathlib import Path

cfg = json.loads(Path(sys.argv[1]).read_text())
os.environ["PYSPARK_PYTHON"] = sys.executable

from pyspark import TaskContext
from pyspark.sql import SparkSession

from onceflow.spark.source import OnceflowDataSource
from onceflow.spark.writer import (
    OnceflowBatchWriter,
    OnceflowStreamWriter,
    make_stream_writer,
    make_writer,
)

BOOTSTRAP = cfg["bootstrap"]
MARKERS = Path(cfg["markers"])
ROWS_BEFORE_FAILURE = cfg["rows_before_failure"]
# Record batches of at most 16 bytes, a row each: the writer seals and sends every row as it
# comes (it looks at linger.ms only when given rows), so the rows before a failure are on
# the broker, inside the open transaction.
BATCH_SIZE = "16"


def high_watermark(topic):
    # Imported here: cloudpickle ships this function to the workers by value, and cannot
    # pickle confluent-kafka's C types by value.
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
    futures = admin.list_offsets(
        {TopicPartition(topic, 0): OffsetSpec.latest()},
        isolation_level=IsolationLevel.READ_UNCOMMITTED,
        request_timeout=20,
    )
    return next(iter(futures.values())).result(timeout=20).offset


def failing(rows, plan, topic):
    """The task's input, failing on attempt 0 of a planned batch (-1: a batch write)."""
    ctx = TaskContext.get()
    batch = ctx.getLocalProperty("streaming.sql.batchId") or "-1"
    kind = plan.get(batch)
    if kind is None or ctx.attemptNumber() > 0:
        yield from rows
        return
    start = high_watermark(topic)
    sent = 0
    for rb in rows:
        yield rb
        sent += rb.num_rows
        if sent >= ROWS_BEFORE_FAILURE:
            break
    # Resumed here only when the writer asks for more, so every row yielded was produced;
    # wait until they are on the broker, inside the task's open transaction.
    deadline = time.monotonic() + 30
    while high_watermark(topic) < start + sent and time.monotonic() < deadline:
        time.sleep(0.05)
    (MARKERS / f"{kind}-batch{batch}").touch()
    if kind == "crash":
        os._exit(17)
    raise RuntimeError(f"injected failure in batch {batch}, attempt 0")


def split(options):
    opts = dict(options)
    return opts, json.loads(opts.pop("test.fail"))


class FlakyStreamWriter(OnceflowStreamWriter):
    def __init__(self, config, plan):
        super().__init__(config)
        self.plan = plan

    def write(self, iterator):
        return super().write(failing(iterator, self.plan, self.config.topic))


class FlakyBatchWriter(OnceflowBatchWriter):
    def __init__(self, config, plan):
        super().__init__(config)
        self.plan = plan

    def write(self, iterator):
        return super().write(failing(iterator, self.plan, self.config.topic))


class FlakySource(OnceflowDataSource):
    @classmethod
    def name(cls):
        return "onceflow_flaky"

    def streamWriter(self, schema, overwrite):
        opts, plan = split(self.options)
        return FlakyStreamWriter(make_stream_writer(opts, schema, overwrite).config, plan)

    def writer(self, schema, overwrite):
        opts, plan = split(self.options)
        return FlakyBatchWriter(make_writer(opts, schema, overwrite).config, plan)


spark = (
    SparkSession.builder.master("local[2, 4]")
    .appName("onceflow-sink-retry")
    .config("spark.ui.enabled", "false")
    .config("spark.ui.showConsoleProgress", "false")
    .config("spark.driver.host", "127.0.0.1")
    .config("spark.driver.bindAddress", "127.0.0.1")
    .config("spark.sql.execution.arrow.maxRecordsPerBatch", "5")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
spark.dataSource.register(FlakySource)

q = (
    spark.readStream.format("text")
    .option("maxFilesPerTrigger", 1)
    .load(cfg["source"])
    .coalesce(1)
    .writeStream.format("onceflow_flaky")
    .option("kafka.bootstrap.servers", BOOTSTRAP)
    .option("kafka.batch.size", BATCH_SIZE)
    .option("topic", cfg["stream_topic"])
    .option("test.fail", json.dumps({"1": "raise", "2": "crash"}))
    .option("checkpointLocation", cfg["checkpoint"])
    .trigger(availableNow=True)
    .start()
)
if not q.awaitTermination(240):
    sys.exit("the availableNow query did not finish")
if q.exception() is not None:
    sys.exit(f"the query failed: {q.exception()}")
batches = sorted(p["batchId"] for p in q.recentProgress)

rows = [(f"w{i}",) for i in range(cfg["batch_rows"])]
(
    spark.createDataFrame(rows, "value string")
    .coalesce(1)
    .write.format("onceflow_flaky")
    .option("kafka.bootstrap.servers", BOOTSTRAP)
    .option("kafka.batch.size", BATCH_SIZE)
    .option("topic", cfg["batch_topic"])
    .option("test.fail", json.dumps({"-1": "crash"}))
    .mode("append")
    .save()
)
print(json.dumps({"stream_batches": batches}))
spark.stop()
'''


def values(kafka: Kafka, topic: str, committed: bool) -> list[bytes]:
    ends = kafka.wait_stable(topic, 1)
    if not ends[0]:
        return []
    recs = read_records("confluent", kafka.bootstrap, topic, ends, committed=committed)
    return [r.value for r in recs if r.value is not None]


def test_failed_tasks_retried_by_spark_write_exactly_once(kafka: Kafka, tmp_path: Path) -> None:
    stream_topic, batch_topic = kafka.topic(), kafka.topic()
    source, markers = tmp_path / "in", tmp_path / "markers"
    source.mkdir()
    markers.mkdir()
    lines = [[f"b{b}-line{i}" for i in range(30)] for b in range(3)]
    for b, batch in enumerate(lines):
        (source / f"part-{b}.txt").write_text("".join(f"{x}\n" for x in batch))
    cfg = {
        "bootstrap": kafka.bootstrap,
        "source": str(source),
        "checkpoint": str(tmp_path / "checkpoint"),
        "markers": str(markers),
        "stream_topic": stream_topic,
        "batch_topic": batch_topic,
        "batch_rows": 40,
        "rows_before_failure": ROWS_BEFORE_FAILURE,
    }
    (tmp_path / "cfg.json").write_text(json.dumps(cfg))
    (tmp_path / "driver.py").write_text(DRIVER)

    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.run(
        [sys.executable, str(tmp_path / "driver.py"), str(tmp_path / "cfg.json")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=DRIVER_TIMEOUT_S,
        preexec_fn=die_with_parent,
    )
    assert proc.returncode == 0, f"driver failed ({proc.returncode}):\n{proc.stderr[-6000:]}"
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"stream_batches": [0, 1, 2]}
    # Each planned failure happened, mid-transaction.
    assert sorted(p.name for p in markers.iterdir()) == [
        "crash-batch-1",
        "crash-batch2",
        "raise-batch1",
    ]

    expected_stream = sorted(x.encode() for batch in lines for x in batch)
    got = values(kafka, stream_topic, committed=True)
    assert not [v for v, n in Counter(got).items() if n > 1], "duplicates in the stream output"
    assert sorted(got) == expected_stream
    raw = values(kafka, stream_topic, committed=False)
    assert len(raw) >= len(expected_stream) + 2 * ROWS_BEFORE_FAILURE  # the aborted attempts

    expected_batch = sorted(f"w{i}".encode() for i in range(40))
    got = values(kafka, batch_topic, committed=True)
    assert sorted(got) == expected_batch
    assert len(values(kafka, batch_topic, committed=False)) >= 40 + ROWS_BEFORE_FAILURE
