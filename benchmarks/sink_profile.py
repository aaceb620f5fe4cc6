"""Where the Spark sink's time goes: the task-side write path timed step by step, outside
Spark, on the Arrow batches Spark hands a writer (100 B binary values, null binary keys,
10,000 rows per batch: `spark.sql.execution.arrow.maxRecordsPerBatch`).

`python -m benchmarks.sink_profile [--rows N] [--repeat R]` starts a broker with two-phase
commit and, for each atomicity, runs the sink's own task function (`write_task`) as one
task would, then the driver's commit (per batch), each step timed by wrapping the
function that does it. `--cprofile` adds the hottest functions of one run. Not part of
`make bench`: it explains the spark figures, it does not replace them.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from benchmarks.common import OnceflowBroker
from benchmarks.participant import TWO_PC
from onceflow.bench import create_topic
from onceflow.spark import batch_commit, sink_tasks, writer
from onceflow.spark.sink_config import SinkColumns, SinkConfig, SinkTask

ROWS_PER_ARROW_BATCH = 10_000
VALUE_BYTES = 100


def arrow_batches(rows: int) -> list[pa.RecordBatch]:
    schema = pa.schema([("key", pa.binary()), ("value", pa.binary())])
    out = []
    for start in range(0, rows, ROWS_PER_ARROW_BATCH):
        n = min(ROWS_PER_ARROW_BATCH, rows - start)
        keys = pa.nulls(n, pa.binary())
        values = pa.array([b"v" * VALUE_BYTES] * n, pa.binary())
        out.append(pa.RecordBatch.from_arrays([keys, values], schema=schema))
    return out


class Steps:
    """Seconds per named step, summed over a run."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._undo: list[Callable[[], None]] = []

    def wrap(self, owner: Any, name: str, label: str) -> None:
        original = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[label] += time.perf_counter() - start

        setattr(owner, name, timed)
        self._undo.append(lambda: setattr(owner, name, original))

    def undo(self) -> None:
        for undo in reversed(self._undo):
            undo()


def instrument(steps: Steps) -> None:
    from onceflow.client.participant import TwoPhaseProducer

    steps.wrap(sink_tasks, "_produce_columns", "rows -> produce calls")
    steps.wrap(sink_tasks, "read_decision", "read decision log")
    steps.wrap(sink_tasks, "_ledger_entry", "ledger read")
    steps.wrap(sink_tasks, "ensure_ledger_topic", "ledger topic check")
    steps.wrap(TwoPhaseProducer, "init", "participant init")
    steps.wrap(TwoPhaseProducer, "prepare", "prepare (flush + wait)")
    steps.wrap(TwoPhaseProducer, "send_offsets", "ledger entry (flush in flight + offsets)")
    steps.wrap(TwoPhaseProducer, "commit", "commit (flush + EndTxn)")
    steps.wrap(writer, "complete_decided", "complete (driver)")
    steps.wrap(writer, "not_open", "check prepared still open (driver)")
    steps.wrap(batch_commit.DecisionLog, "record", "record decision (driver)")


def process_cpu_s(pid: int) -> float:
    """User and system CPU seconds of a process, all its threads (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_task(
    bootstrap: str, atomicity: str, rows: int, broker_pid: int | None = None
) -> dict[str, float]:
    topic = f"profile-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, 2)
    client = {"bootstrap.servers": bootstrap}
    config = SinkConfig(
        client_config=client,
        columns=SinkColumns(value="value", key="key"),
        topic=topic,
        sink_id=f"profile-{uuid.uuid4().hex[:8]}",
        atomicity="batch" if atomicity == "batch" else "task",
        # as the writer decides it on the driver: the tasks' ids on one coordinator
        colocated=batch_commit.colocation(client, "profile") if atomicity == "batch" else None,
    )
    assert config.sink_id is not None
    batches: Iterator[pa.RecordBatch] = iter(arrow_batches(rows))
    steps = Steps()
    instrument(steps)
    try:
        cpu = time.process_time(), process_cpu_s(broker_pid) if broker_pid else 0.0
        start = time.perf_counter()
        message = sink_tasks.write_task(config, SinkTask(config.sink_id, 0, 0), batches)
        steps.seconds["task total"] = time.perf_counter() - start
        if atomicity == "batch":
            start = time.perf_counter()
            writer.commit_batch(config, [message], 0)
            steps.seconds["driver commit total"] = time.perf_counter() - start
        steps.seconds["CPU: task and driver process"] = time.process_time() - cpu[0]
        if broker_pid:
            steps.seconds["CPU: broker process"] = process_cpu_s(broker_pid) - cpu[1]
    finally:
        steps.undo()
    assert message.records == rows, message
    return dict(steps.seconds)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sink_profile")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cprofile", action="store_true")
    args = parser.parse_args()
    broker = OnceflowBroker(TWO_PC)
    try:
        one_task(broker.bootstrap, "batch", 1000)  # warm-up: connections, the ledger topic
        one_task(broker.bootstrap, "task", 1000)
        for atomicity in ("batch", "task"):
            pid = broker.proc.pid if broker.proc else None
            runs = [
                one_task(broker.bootstrap, atomicity, args.rows, pid) for _ in range(args.repeat)
            ]
            print(f"\natomicity={atomicity}, {args.rows} rows, median of {args.repeat}:")
            for label in runs[0]:
                ms = statistics.median(r.get(label, 0.0) for r in runs) * 1000
                print(f"  {label:<40} {ms:9.1f} ms  {ms * 1000 / args.rows:6.2f} us/row")
            if args.cprofile:
                profiler = cProfile.Profile()
                profiler.enable()
                one_task(broker.bootstrap, atomicity, args.rows)
                profiler.disable()
                pstats.Stats(profiler).sort_stats("tottime").print_stats(15)
    finally:
        broker.close()


if __name__ == "__main__":
    main()
