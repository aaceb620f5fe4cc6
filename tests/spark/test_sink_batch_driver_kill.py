"""Per-batch atomicity with the Spark driver really killed inside the sink's commit of
micro-batch 1: after the tasks prepared and before the decision, after the decision and
before the completion, and after the completion (one request). The Python worker running
the commit SIGKILLs the driver's JVM, then itself (so Spark never gets to call the sink's
abort). The query then restarts from its checkpoint. A read_committed observer polls
throughout: no batch is ever seen in part, and every row is there once at the end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.broker import BrokerProcess, die_with_parent
from tests.helpers.clients import create_topic
from tests.helpers.txn import wait_for
from tests.spark.conftest import Kafka
from tests.spark.test_sink_batch_atomicity import Observer, check_looks
from tests.spark.test_sink_replay import assert_exactly_once, committed_values, write_lines

pytestmark = pytest.mark.slow

BATCHES, ROWS = 3, 60
DRIVER_TIMEOUT_S = 300

# The driver: the onceflow sink, but its commit kills the driver's process group at one
# step of one batch, once (a marker file remembers it across the restart).
DRIVER = """
import json, os, signal, sys
from pyspark.sql import SparkSession
from onceflow.spark.source import OnceflowDataSource
from onceflow.spark.writer import OnceflowStreamWriter, commit_batch, make_stream_writer

cfg = json.loads(open(sys.argv[1]).read())


class DyingWriter(OnceflowStreamWriter):
    def commit(self, messages, batchId):
        def on_step(step):
            if batchId == 1 and step == cfg["step"] and not os.path.exists(cfg["marker"]):
                open(cfg["marker"], "w").close()
                os.kill(cfg["jvm"], signal.SIGKILL)
                os.killpg(os.getpgrp(), signal.SIGKILL)

        commit_batch(self.config, messages, batchId, on_step)


class DyingSource(OnceflowDataSource):
    @classmethod
    def name(cls):
        return "onceflow_dying"

    def streamWriter(self, schema, overwrite):
        return DyingWriter(make_stream_writer(self.options, schema, overwrite).config)


spark = (
    SparkSession.builder.master("local[2]")
    .config("spark.ui.enabled", "false")
    .config("spark.ui.showConsoleProgress", "false")
    .config("spark.driver.host", "127.0.0.1")
    .config("spark.driver.bindAddress", "127.0.0.1")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
spark.dataSource.register(DyingSource)
cfg["jvm"] = spark.sparkContext._gateway.proc.pid  # spark-submit execs the JVM
q = (
    spark.readStream.format("text").option("maxFilesPerTrigger", 1).load(cfg["source"])
    .repartition(2, "value")
    .writeStream.format("onceflow_dying")
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
print(json.dumps([(p["batchId"], p["numInputRows"]) for p in q.recentProgress]))
spark.stop()
"""


def run_driver(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    return subprocess.run(
        [sys.executable, str(tmp_path / "driver.py"), str(tmp_path / "cfg.json")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=DRIVER_TIMEOUT_S,
        preexec_fn=die_with_parent,
        start_new_session=True,
    )


@pytest.mark.parametrize("step", ["prepared", "decided", "completed"])
def test_driver_killed_in_the_commit_then_restarted(
    two_pc_broker: BrokerProcess, tmp_path: Path, step: str
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
        "step": step,
    }
    (tmp_path / "cfg.json").write_text(json.dumps(cfg))
    (tmp_path / "driver.py").write_text(DRIVER)

    observer = Observer(bootstrap, topic, ROWS)
    observer.start()
    try:
        first = run_driver(tmp_path)
        assert marker.exists(), f"the driver was not killed:\n{first.stderr[-4000:]}"
        assert first.returncode != 0
        assert "the query failed" not in first.stderr  # the JVM died, not only the query
        second = run_driver(tmp_path)
        assert second.returncode == 0, f"the restart failed:\n{second.stderr[-6000:]}"
        wait_for(
            lambda: observer.looks and len(observer.looks[-1]) == BATCHES, 30, "the last batch"
        )
    finally:
        observer.stop.set()
        observer.join(30)
    check_looks(observer, BATCHES, ROWS)
    kafka = Kafka(two_pc_broker)
    assert_exactly_once(committed_values(kafka, topic), [x for b in batches for x in b])
