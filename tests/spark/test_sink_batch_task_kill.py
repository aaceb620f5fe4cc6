"""Per-batch atomicity when a write task's process dies: the Python worker running attempt 0
of a task of micro-batch 1 SIGKILLs itself after it produced part of its rows (its
transaction open, nothing prepared), as an executor lost mid-task. Spark (local[2,4]:
up to four attempts per task) runs the task again; the new attempt's init fences the dead
one and aborts its transaction, and the batch is decided and completed whole. A
read_committed observer polls throughout: no batch is ever seen in part, no row twice,
and the dead attempt's rows never show.

(Speculation cannot be run on one machine: Spark never starts a speculative copy on the
host of the running attempt. A speculative attempt that aborts the chosen one is driven
directly in test_sink_batch_recovery.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import create_topic
from tests.helpers.txn import end_offsets, wait_for
from tests.spark.conftest import Kafka
from tests.spark.test_sink_batch_atomicity import Observer, check_looks
from tests.spark.test_sink_batch_driver_kill import run_driver
from tests.spark.test_sink_replay import assert_exactly_once, committed_values, write_lines

pytestmark = pytest.mark.slow

BATCHES, ROWS = 3, 2000
DRIVER_TIMEOUT_S = 300

DRIVER = """
import json, os, signal, sys
from pyspark import TaskContext
from pyspark.sql import SparkSession
from onceflow.spark.source import OnceflowDataSource
from onceflow.spark.writer import OnceflowStreamWriter, make_stream_writer

cfg = json.loads(open(sys.argv[1]).read())


class DyingWriter(OnceflowStreamWriter):
    def write(self, iterator):
        ctx = TaskContext.get()
        doomed = (
            ctx.getLocalProperty("streaming.sql.batchId") == "1"
            and ctx.attemptNumber() == 0
            and not os.path.exists(cfg["marker"])
        )
        if not doomed:
            return super().write(iterator)

        def then_die():
            import time
            batch = next(iterator)
            half = batch.num_rows // 2
            yield batch.slice(0, half // 2)
            # Past linger.ms: the producer seals and sends while producing the next rows.
            time.sleep(0.2)
            yield batch.slice(half // 2, half - half // 2)
            time.sleep(1)  # the send thread sends; then the worker dies, nothing prepared
            open(cfg["marker"], "w").close()
            os.kill(os.getpid(), signal.SIGKILL)

        return super().write(then_die())


class DyingSource(OnceflowDataSource):
    @classmethod
    def name(cls):
        return "onceflow_dying_task"

    def streamWriter(self, schema, overwrite):
        return DyingWriter(make_stream_writer(self.options, schema, overwrite).config)


spark = (
    SparkSession.builder.master("local[2,4]")
    .config("spark.ui.enabled", "false")
    .config("spark.ui.showConsoleProgress", "false")
    .config("spark.driver.host", "127.0.0.1")
    .config("spark.driver.bindAddress", "127.0.0.1")
    .config("spark.python.worker.reuse", "true")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
spark.dataSource.register(DyingSource)
q = (
    spark.readStream.format("text").option("maxFilesPerTrigger", 1).load(cfg["source"])
    .repartition(2, "value")
    .writeStream.format("onceflow_dying_task")
    .option("kafka.bootstrap.servers", cfg["bootstrap"])
    .option("topic", cfg["topic"])
    .option("atomicity", "batch")
    .option("checkpointLocation", cfg["checkpoint"])
    .trigger(availableNow=True)
    .start()
)
if not q.awaitTermination(240):
    sys.exit("the availableNow query did not finish")
if q.exception() is not None:
    sys.exit(f"the query failed: {q.exception()}")
spark.stop()
"""


def test_a_write_task_killed_mid_write_is_run_again_and_the_batch_stays_whole(
    two_pc_broker: BrokerProcess, tmp_path: Path
) -> None:
    bootstrap = two_pc_broker.bootstrap
    topic = create_topic(bootstrap, partitions=1)
    source = tmp_path / "in"
    source.mkdir()
    batches = [[f"b{b}-line{i}" for i in range(ROWS)] for b in range(BATCHES)]
    for b, lines in enumerate(batches):
        write_lines(source, f"part-{b}.txt", lines)
    marker = tmp_path / "killed"
    cfg = {
        "bootstrap": bootstrap,
        "topic": topic,
        "source": str(source),
        "checkpoint": str(tmp_path / "checkpoint"),
        "marker": str(marker),
    }
    (tmp_path / "cfg.json").write_text(json.dumps(cfg))
    (tmp_path / "driver.py").write_text(DRIVER)
    observer = Observer(bootstrap, topic, ROWS)
    observer.start()
    try:
        run = run_driver(tmp_path)
        assert marker.exists(), f"no task was killed:\n{run.stderr[-4000:]}"
        assert run.returncode == 0, f"the query failed:\n{run.stderr[-6000:]}"
        wait_for(
            lambda: observer.looks and len(observer.looks[-1]) == BATCHES, 30, "the last batch"
        )
    finally:
        observer.stop.set()
        observer.join(30)
    check_looks(observer, BATCHES, ROWS)
    kafka = Kafka(two_pc_broker)
    assert_exactly_once(committed_values(kafka, topic), [x for b in batches for x in b])
    # The dead attempt's rows are in the log, aborted: more offsets than rows and markers.
    assert end_offsets(bootstrap, topic, [0], committed=False)[0] > BATCHES * ROWS + 2 * BATCHES
