"""Streaming reads (`spark.readStream.format("onceflow")`) against a real broker.

Each query writes to a foreachBatch collector in this process, so a test sees every
micro-batch exactly as Spark delivered it, and can tell a replayed or duplicated record from
a new one by its (partition, offset).
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import PythonException, StreamingQueryException
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql.streaming import StreamingQuery

from tests.helpers.clients import create_topic
from tests.helpers.txn import wait_for
from tests.spark.conftest import Kafka, source_options

QUERY_TIMEOUT_S = 90


class Collector:
    """foreachBatch sink: keeps every micro-batch in the test process, by batch id.

    Spark replays a batch that was planned but not committed; a replay must read exactly
    the records the first attempt read (the check raises inside the query, failing it).
    `fail_once_at` makes the first delivery of that batch fail after it was read, as a
    crash between reading and committing would.
    """

    def __init__(self, fail_once_at: int | None = None) -> None:
        self.batches: dict[int, list[Row]] = {}
        self.deliveries: list[int] = []
        self.fail_once_at = fail_once_at

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        rows = df.collect()
        self.deliveries.append(batch_id)
        if batch_id in self.batches:
            before = sorted(self.batches[batch_id])
            assert sorted(rows) == before, f"batch {batch_id} replayed differently"
        self.batches[batch_id] = rows
        if batch_id == self.fail_once_at:
            self.fail_once_at = None
            raise RuntimeError(f"injected failure after reading batch {batch_id}")

    @property
    def rows(self) -> list[Row]:
        return [r for _, rows in sorted(self.batches.items()) for r in rows]

    def values(self) -> list[bytes]:
        return sorted(r.value for r in self.rows)

    def assert_no_duplicates(self) -> None:
        seen = Counter((r.topic, r.partition, r.offset) for r in self.rows)
        dups = {k: n for k, n in seen.items() if n > 1}
        assert not dups, f"records delivered in more than one batch: {dups}"


def start(
    spark: SparkSession,
    options: dict[str, str],
    sink: Collector,
    checkpoint: Path | None = None,
    available_now: bool = False,
) -> StreamingQuery:
    writer = spark.readStream.format("onceflow").options(**options).load().writeStream
    writer = writer.foreachBatch(sink)
    if checkpoint is not None:
        writer = writer.option("checkpointLocation", str(checkpoint))
    if available_now:
        writer = writer.trigger(availableNow=True)
    return writer.start()


def run_available_now(
    spark: SparkSession, options: dict[str, str], sink: Collector, checkpoint: Path | None = None
) -> None:
    q = start(spark, options, sink, checkpoint, available_now=True)
    try:
        assert q.awaitTermination(QUERY_TIMEOUT_S), "an availableNow query did not finish"
    finally:
        q.stop()


def process_until(q: StreamingQuery, condition: Callable[[], bool], what: str) -> None:
    """processAllAvailable() until `condition` holds. processAllAvailable alone may return
    early when a trigger that looked at the source before new data arrived finishes just
    after the call (it then reports "no new data"); the deadline is only a safety net."""
    deadline = time.monotonic() + QUERY_TIMEOUT_S
    while True:
        q.processAllAvailable()
        if condition():
            return
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def end_offset(q: StreamingQuery) -> dict[str, Any]:
    progress = q.lastProgress
    assert progress is not None
    end = progress["sources"][0]["endOffset"]
    return dict(json.loads(end) if isinstance(end, str) else end)


def test_only_committed_data_stops_at_lso_and_resumes(spark: SparkSession, kafka: Kafka) -> None:
    """Committed, aborted and one open transaction: the query sees only committed records
    below the LSO (it does not wait at the open transaction, and ranges that end in markers
    and aborted records finish), then reads the rest once the transaction commits."""
    t = kafka.topic(partitions=2)
    kafka.txn(t, {0: [b"c0", b"c1"], 1: [b"c2"]}, commit=True)
    kafka.txn(t, {0: [b"a0", b"a1"], 1: [b"a2"]}, commit=False)
    open_txn = kafka.txn_producer()
    open_txn.begin()
    open_txn.send(t, 0, b"o0")
    open_txn.send(t, 1, b"o1")
    first_open = {p: off for p, off, _ in open_txn.flush()}
    kafka.txn(t, {0: [b"c3"], 1: [b"c4"]}, commit=True)  # after the open one: above the LSO
    # The LSO stops at the open transaction once the earlier markers are written.
    wait_for(lambda: kafka.offsets(t, 2, "lso") == first_open, 30, "LSO at the open txn")
    assert kafka.offsets(t, 2, "hw") != first_open

    sink = Collector()
    q = start(spark, source_options(kafka, subscribe=t, startingOffsets="earliest"), sink)
    try:
        at_lso = {t: {str(p): off for p, off in sorted(first_open.items())}}
        process_until(q, lambda: end_offset(q) == at_lso, "the query to reach the LSO")
        q.processAllAvailable()
        assert sink.values() == [b"c0", b"c1", b"c2"]
        assert end_offset(q) == at_lso
        # Partition 1's range [0, LSO) ends in a commit marker, aborted data and its abort
        # marker, offsets no consumer ever receives; partition 0's offsets have gaps.
        p1 = [r.offset for r in sink.rows if r.partition == 1]
        assert p1 == [0] and first_open[1] > 1

        open_txn.commit()
        hw = kafka.wait_stable(t, 2)
        at_hw = {t: {str(p): off for p, off in sorted(hw.items())}}
        process_until(q, lambda: end_offset(q) == at_hw, "the rest, once the txn committed")
        assert sink.values() == [b"c0", b"c1", b"c2", b"c3", b"c4", b"o0", b"o1"]
        sink.assert_no_duplicates()
        p0 = [r.offset for r in sink.rows if r.partition == 0]
        assert p0 == sorted(p0) and p0[-1] - p0[0] + 1 > len(p0)  # gaps from markers
        assert {r.topic for r in sink.rows} == {t}
        assert all(r.timestampType == 0 and r.timestamp is not None for r in sink.rows)
    finally:
        q.stop()


def test_restart_from_checkpoint(spark: SparkSession, kafka: Kafka, tmp_path: Path) -> None:
    """A query fails after reading a batch and before committing it, more data arrives, and
    a new query starts on the same checkpoint: Spark replays the batch from its planned
    offsets and reads exactly the same records, then goes on. Then a clean stop and a
    restart. Every committed record exactly once, nothing aborted."""
    t = kafka.topic(partitions=2)
    kafka.txn(t, {0: [b"r1-0", b"r1-1"], 1: [b"r1-2"]}, commit=True)
    kafka.txn(t, {0: [b"r1-x"]}, commit=False)
    kafka.wait_stable(t, 2)
    ckpt = tmp_path / "checkpoint"
    options = source_options(kafka, subscribe=t, startingOffsets="earliest")
    round1 = [b"r1-0", b"r1-1", b"r1-2"]
    round2 = [b"r2-0", b"r2-1", b"r2-2", b"r2-plain"]
    round3 = [b"r3-0", b"r3-1"]
    sink = Collector()

    q = start(spark, options, sink, ckpt)
    try:
        process_until(q, lambda: sink.values() == round1, "the first round")
        sink.fail_once_at = max(sink.batches) + 1
        kafka.txn(t, {0: [b"r2-0"], 1: [b"r2-1", b"r2-2"]}, commit=True)
        kafka.txn(t, {1: [b"r2-x"]}, commit=False)
        kafka.produce(t, [b"r2-plain"], partition=0)
        kafka.wait_stable(t, 2)
        with pytest.raises(StreamingQueryException, match="injected failure"):
            q.awaitTermination(QUERY_TIMEOUT_S)
    finally:
        q.stop()
    failed_batch = sink.deliveries[-1]
    # The failed batch read some of round 2 (a batch may start before all of it is there).
    failed_values = {r.value for r in sink.batches[failed_batch]}
    assert failed_values and failed_values <= set(round2)

    kafka.txn(t, {0: [b"r3-0"], 1: [b"r3-1"]}, commit=True)
    kafka.txn(t, {0: [b"r3-x"]}, commit=False)
    kafka.wait_stable(t, 2)
    # startingOffsets only applies to a new query: the checkpoint decides where this starts.
    q = start(spark, {**options, "startingOffsets": "latest"}, sink, ckpt)
    try:
        process_until(q, lambda: sink.values() == sorted(round1 + round2 + round3), "round 3")
    finally:
        q.stop()
    # Replayed from its planned offsets, with the same records (Collector checks), although
    # more data had arrived since.
    assert sink.deliveries.count(failed_batch) == 2
    assert {r.value for r in sink.batches[failed_batch]} == failed_values

    kafka.produce(t, [b"r4"], partition=1)
    q = start(spark, options, sink, ckpt)
    try:
        process_until(q, lambda: b"r4" in sink.values(), "round 4")
    finally:
        q.stop()
    assert sink.values() == sorted([*round1, *round2, *round3, b"r4"])
    sink.assert_no_duplicates()


def test_starting_offsets_latest(spark: SparkSession, kafka: Kafka) -> None:
    t = kafka.topic(partitions=2)
    kafka.produce(t, [b"old-0"], partition=0)
    kafka.txn(t, {1: [b"old-1"]}, commit=True)
    kafka.wait_stable(t, 2)
    sink = Collector()
    q = start(spark, source_options(kafka, subscribe=t), sink)  # default: latest
    try:
        q.processAllAvailable()  # the first trigger has taken the latest offsets
        assert sink.rows == []
        kafka.produce(t, [b"new-0"], partition=0)
        kafka.txn(t, {1: [b"new-1"]}, commit=True)
        kafka.wait_stable(t, 2)
        process_until(q, lambda: len(sink.rows) >= 2, "the new records")
        assert sink.values() == [b"new-0", b"new-1"]
    finally:
        q.stop()


def test_starting_offsets_json_and_available_now(spark: SparkSession, kafka: Kafka) -> None:
    t = kafka.topic(partitions=2)
    kafka.produce(t, [b"p0-%d" % i for i in range(5)], partition=0)
    kafka.produce(t, [b"p1-%d" % i for i in range(3)], partition=1)
    sink = Collector()
    starting = json.dumps({t: {"0": 2, "1": -2}})
    run_available_now(spark, source_options(kafka, subscribe=t, startingOffsets=starting), sink)
    assert sink.values() == sorted([b"p0-2", b"p0-3", b"p0-4", b"p1-0", b"p1-1", b"p1-2"])
    # -1 is latest: nothing old from partition 1.
    sink = Collector()
    starting = json.dumps({t: {"0": 4, "1": -1}})
    run_available_now(spark, source_options(kafka, subscribe=t, startingOffsets=starting), sink)
    assert sink.values() == [b"p0-4"]


def test_max_offsets_per_trigger(spark: SparkSession, kafka: Kafka) -> None:
    t = kafka.topic(partitions=1)
    kafka.produce(t, [b"v%02d" % i for i in range(25)])
    sink = Collector()
    options = source_options(
        kafka, subscribe=t, startingOffsets="earliest", maxOffsetsPerTrigger=10
    )
    run_available_now(spark, options, sink)
    assert [len(rows) for rows in sink.batches.values() if rows] == [10, 10, 5]
    assert sink.values() == [b"v%02d" % i for i in range(25)]
    sink.assert_no_duplicates()


def test_rate_limited_ends_inside_markers_and_aborted_data(
    spark: SparkSession, kafka: Kafka
) -> None:
    """maxOffsetsPerTrigger=2 over transactions: many micro-batches end on a marker or inside
    aborted data, and the next starts there. Every committed record arrives exactly once."""
    t = kafka.topic()
    committed: list[bytes] = []
    for i in range(3):
        batch = [b"c%d-%d" % (i, j) for j in range(i % 3 + 1)]
        kafka.txn(t, {0: batch}, commit=True)
        committed += batch
        kafka.txn(t, {0: [b"a%d-%d" % (i, j) for j in range(2)]}, commit=False)
    kafka.produce(t, [b"plain"])
    committed.append(b"plain")
    hw = kafka.wait_stable(t)[0]
    sink = Collector()
    options = source_options(kafka, subscribe=t, startingOffsets="earliest", maxOffsetsPerTrigger=2)
    run_available_now(spark, options, sink)
    assert sink.values() == sorted(committed)
    sink.assert_no_duplicates()
    assert all(len(rows) <= 2 for rows in sink.batches.values())
    assert len(sink.batches) >= hw // 2 - 1  # some batches hold only markers or aborted data


def test_subscribe_pattern_picks_up_new_topics_from_their_start(
    spark: SparkSession, kafka: Kafka
) -> None:
    first = kafka.topic()
    prefix = first.rsplit("-", 1)[0] + "-"
    kafka.produce(first, [b"first"])
    sink = Collector()
    pattern = f"{prefix}({first.rsplit('-', 1)[1]}|late-.*)"
    q = start(
        spark, source_options(kafka, subscribePattern=pattern, startingOffsets="earliest"), sink
    )
    try:
        process_until(q, lambda: sink.values() == [b"first"], "the first topic")
        late = f"{prefix}late-{first.rsplit('-', 1)[1]}"
        create_topic(kafka.bootstrap, late, partitions=2)
        kafka.produce(late, [b"late-0"], partition=0)
        kafka.txn(late, {1: [b"late-1"]}, commit=True)
        kafka.wait_stable(late, 2)
        process_until(q, lambda: len(sink.rows) >= 3, "the new topic")
        assert sink.values() == [b"first", b"late-0", b"late-1"]
        sink.assert_no_duplicates()
    finally:
        q.stop()


def test_fail_on_data_loss_after_retention(
    spark: SparkSession, kafka: Kafka, tmp_path: Path
) -> None:
    """A query reads, stops; retention deletes records it had not read yet. Restarted, it
    fails naming the partition and the lost offsets; with failOnDataLoss=false it goes on
    from the earliest offset that still exists."""
    t = kafka.topic(config={"segment.bytes": "1024", "retention.bytes": "2048"})
    kafka.produce(t, [b"early-%d" % i for i in range(3)])
    ckpt = tmp_path / "checkpoint"
    options = source_options(kafka, subscribe=t, startingOffsets="earliest")
    sink = Collector()
    run_available_now(spark, options, sink, ckpt)
    assert sink.values() == [b"early-0", b"early-1", b"early-2"]

    payload = b"x" * 200
    for round_ in range(12):  # one produce call per round: separate batches, many segments
        kafka.produce(t, [b"%02d-%d-" % (round_, i) + payload for i in range(3)])
    earliest = wait_for(
        lambda: (e := kafka.offsets(t, 1, "earliest")[0]) > 3 and e, 30, "retention"
    )

    with pytest.raises(StreamingQueryException) as info:
        run_available_now(spark, options, Collector(), ckpt)
    message = str(info.value)
    # Retention may have moved on since `earliest` was read: the lost range ends later.
    lost = re.search(rf"offsets 3\.\.(\d+) of {t}-0 were deleted", message)
    assert lost is not None, message
    assert int(lost.group(1)) >= earliest - 1
    assert "DataLossError" in message and "failOnDataLoss" in message

    sink = Collector()
    run_available_now(spark, {**options, "failOnDataLoss": "false"}, sink, ckpt)
    lso = kafka.offsets(t, 1, "lso")[0]
    now_earliest = kafka.offsets(t, 1, "earliest")[0]
    offsets = [r.offset for r in sink.rows]
    assert offsets == list(range(offsets[0], lso))
    assert earliest <= offsets[0] <= now_earliest

    # A batch read from offset 0 follows failOnDataLoss the same way.
    batch = source_options(kafka, subscribe=t, startingOffsets=json.dumps({t: {"0": 0}}))
    with pytest.raises(PythonException, match=rf"offsets 0\.\.\d+ of {t}-0 were deleted"):
        spark.read.format("onceflow").options(**batch).load().collect()
    rows = spark.read.format("onceflow").options(**batch, failOnDataLoss="false").load().collect()
    offsets = sorted(r.offset for r in rows)
    assert offsets == list(range(offsets[0], lso)) and offsets[0] >= now_earliest
