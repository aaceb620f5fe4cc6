"""Per-batch atomicity inside Spark: the option's default and refusal, and a streaming query
watched by a read_committed observer polling throughout: the driver completes the tasks'
prepared transactions in one CompleteTransactions request, so at every look of the
observer each micro-batch is there whole or not at all, and every row is there once."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from pyspark.sql import SparkSession

from onceflow.spark import writer
from onceflow.spark.batch_commit import read_decision
from onceflow.spark.ledger import DEFAULT_LEDGER_TOPIC
from onceflow.spark.options import OptionError
from onceflow.spark.writer import make_stream_writer, make_writer
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import QUIET_LOGGER, create_topic
from tests.helpers.txn import wait_for
from tests.spark.conftest import Kafka
from tests.spark.test_sink_replay import (
    assert_exactly_once,
    committed_values,
    run_to_end,
    write_lines,
)
from tests.spark.test_sink_task import VALUE_SCHEMA

BATCHES, ROWS = 5, 60


def test_default_is_the_strongest_the_broker_supports(
    spark_broker: BrokerProcess, two_pc_broker: BrokerProcess
) -> None:
    off = {"kafka.bootstrap.servers": spark_broker.bootstrap, "topic": "t"}
    on = {"kafka.bootstrap.servers": two_pc_broker.bootstrap, "topic": "t"}
    assert make_stream_writer(off, VALUE_SCHEMA, overwrite=False).config.atomicity == "task"
    assert make_stream_writer(on, VALUE_SCHEMA, overwrite=False).config.atomicity == "batch"
    assert make_writer(on, VALUE_SCHEMA, overwrite=False).config.atomicity == "batch"
    chosen = {**on, "atomicity": "Task"}
    assert make_stream_writer(chosen, VALUE_SCHEMA, overwrite=False).config.atomicity == "task"
    with pytest.raises(OptionError, match="'batch' or 'task'"):
        make_stream_writer({**on, "atomicity": "row"}, VALUE_SCHEMA, overwrite=False)


def test_a_query_asks_the_broker_once_not_per_micro_batch(
    two_pc_broker: BrokerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark makes a streaming writer for every micro-batch; only the first asks the broker,
    so a later micro-batch is planned while the probe's coordinator is moving."""
    options = {"kafka.bootstrap.servers": two_pc_broker.bootstrap, "topic": "cached"}
    first = make_stream_writer(options, VALUE_SCHEMA, overwrite=False).config

    def unanswered(*_args: object) -> None:
        raise AssertionError("the broker was asked again")

    monkeypatch.setattr(writer, "choose_atomicity", unanswered)
    monkeypatch.setattr(writer, "colocation", unanswered)
    again = make_stream_writer(options, VALUE_SCHEMA, overwrite=False).config
    assert (again.atomicity, again.colocated) == (first.atomicity, first.colocated)
    assert first.atomicity == "batch" and first.colocated is not None
    other = {**options, "sinkId": "named"}  # another sink asks for itself
    with pytest.raises(AssertionError, match="asked again"):
        make_stream_writer(other, VALUE_SCHEMA, overwrite=False)


def test_batch_against_a_broker_without_two_phase_commit_fails_at_start(
    spark: SparkSession, kafka: Kafka, tmp_path: Path
) -> None:
    options = {"kafka.bootstrap.servers": kafka.bootstrap, "topic": "t", "atomicity": "batch"}
    with pytest.raises(OptionError, match=r"needs a broker with two-phase commit \(KIP-939\)"):
        make_stream_writer(options, VALUE_SCHEMA, overwrite=False)
    source = tmp_path / "in"
    source.mkdir()
    write_lines(source, "part-0.txt", ["a", "b"])
    with pytest.raises(Exception, match="two-phase commit"):
        run_to_end(spark, source, tmp_path / "checkpoint", options)


class Observer(threading.Thread):
    """A read_committed consumer polling one partition throughout. Whenever it has caught
    up with the last stable offset it notes, per batch, how many of its rows it has seen."""

    def __init__(self, bootstrap: str, topic: str, rows: int) -> None:
        super().__init__(daemon=True)
        self.rows = rows
        self.seen = Counter[int]()
        # Per look, the counts in the order the batches first showed up (file names do not
        # give Spark's order: files written at once are picked in any order).
        self.looks: list[list[int]] = []
        self.stop = threading.Event()
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"observer-{topic}",
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
                "enable.auto.commit": False,
                "logger": QUIET_LOGGER,
            }
        )
        self._consumer.assign([TopicPartition(topic, 0, 0)])

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                msg = self._consumer.poll(0.05)
                if msg is None:
                    continue
                err = msg.error()
                if err is None:
                    self.seen[int(bytes(msg.value()).split(b"-")[0][1:])] += 1
                elif err.code() == KafkaError._PARTITION_EOF:
                    self.looks.append(list(self.seen.values()))
        finally:
            self._consumer.close()


def check_looks(observer: Observer, batches: int, rows: int) -> None:
    """At each look (the observer caught up with the last stable offset), every batch is
    whole, none seen in part; the last look sees them all."""
    assert observer.looks[-1] == [rows] * batches
    for look in observer.looks:
        assert all(n <= rows for n in look), f"a row seen twice: {look}"
        assert all(n == rows for n in look), f"a batch seen in part: {look}"


def test_a_reader_sees_each_micro_batch_whole_or_not_at_all(
    spark: SparkSession, two_pc_broker: BrokerProcess, tmp_path: Path
) -> None:
    bootstrap = two_pc_broker.bootstrap
    out = create_topic(bootstrap, partitions=1)
    source = tmp_path / "in"
    source.mkdir()
    batches = [[f"b{b}-line{i}" for i in range(ROWS)] for b in range(BATCHES)]
    for b, lines in enumerate(batches):
        write_lines(source, f"part-{b}.txt", lines)
    observer = Observer(bootstrap, out, ROWS)
    observer.start()
    options = {"kafka.bootstrap.servers": bootstrap, "topic": out}  # the default: batch
    try:
        query = run_to_end(spark, source, tmp_path / "checkpoint", options)
        wait_for(
            lambda: observer.looks and len(observer.looks[-1]) == BATCHES, 30, "the last batch"
        )
    finally:
        observer.stop.set()
        observer.join(30)
    kafka = Kafka(two_pc_broker)
    assert_exactly_once(committed_values(kafka, out), [x for b in batches for x in b])
    decision = read_decision({"bootstrap.servers": bootstrap}, DEFAULT_LEDGER_TOPIC, query.id, 20)
    assert decision is not None and decision.batch_id == BATCHES - 1  # per batch it was
    check_looks(observer, BATCHES, ROWS)


def test_a_batch_write_commits_all_its_tasks_at_once(
    spark: SparkSession, two_pc_broker: BrokerProcess
) -> None:
    """`df.write` takes the same default: its tasks prepare, the driver decides (batch 0 of
    the write's sink id) and completes them."""
    bootstrap = two_pc_broker.bootstrap
    out = create_topic(bootstrap, partitions=3)
    rows = [(f"k{i}", f"v{i}") for i in range(40)]
    df = spark.createDataFrame(rows, "key string, value string").repartition(3)
    sink = f"nightly-{out}"
    options = {"kafka.bootstrap.servers": bootstrap, "topic": out, "sinkId": sink}
    df.write.format("onceflow").options(**options).mode("append").save()
    df.write.format("onceflow").options(**options).mode("append").save()  # writes nothing
    kafka = Kafka(two_pc_broker)
    assert_exactly_once(committed_values(kafka, out, 3), [v for _, v in rows])
    decision = read_decision({"bootstrap.servers": bootstrap}, DEFAULT_LEDGER_TOPIC, sink, 20)
    assert decision is not None and decision.batch_id == 0 and len(decision.prepared) == 3
