"""Spark tests: one local[2] SparkSession and one Onceflow broker for the whole session.

The session's Python workers run this interpreter (`PYSPARK_PYTHON`), so they import the
same `onceflow` as the tests. The broker enforces retention every 200 ms, so a test can
watch retention delete data. `kafka` is a small toolbox for test data: topics, plain and
transactional producers, and ListOffsets.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest
from confluent_kafka import IsolationLevel, TopicPartition
from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]
from pyspark.sql import SparkSession

import onceflow.spark
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import admin_client, create_topic, produce_and_confirm, producer
from tests.helpers.txn import TxnProducer, make_txn_producer, wait_for

SPARK_BROKER_OVERRIDES: dict[str, str] = {
    "log.retention.check.interval.ms": "200",
    "log.segment.delete.delay.ms": "0",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
}


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("onceflow-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.streaming.numRecentProgressUpdates", "20")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    onceflow.spark.register(session)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def spark_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("spark-broker") / "data", SPARK_BROKER_OVERRIDES)
    b.start()
    try:
        yield b
    finally:
        try:
            if b.running:
                code = b.stop()
                assert code == 0, f"broker exited with {code}; its log:\n{b.log_tail()}"
        finally:
            b.kill()
        errors = b.internal_errors()
        assert not errors, "the broker logged internal errors:\n" + "\n---\n".join(errors[:5])


@pytest.fixture(scope="session")
def two_pc_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker with two-phase commit (KIP-939) on, for the sink's per-batch atomicity."""
    overrides = {**SPARK_BROKER_OVERRIDES, "transaction.two.phase.commit.enable": "true"}
    b = BrokerProcess(tmp_path_factory.mktemp("spark-2pc-broker") / "data", overrides)
    b.start()
    try:
        yield b
    finally:
        try:
            if b.running:
                assert b.stop() == 0, f"broker failed; its log:\n{b.log_tail()}"
        finally:
            b.kill()
        errors = b.internal_errors()
        assert not errors, "the broker logged internal errors:\n" + "\n---\n".join(errors[:5])


class Kafka:
    """Test data on the session's broker, through confluent-kafka."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker
        self._producers: list[TxnProducer] = []

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    def topic(self, partitions: int = 1, config: Mapping[str, str] | None = None) -> str:
        name = f"spark-{uuid.uuid4().hex[:10]}"
        return create_topic(self.bootstrap, name, partitions=partitions, config=config)

    def produce(
        self,
        topic: str,
        values: Sequence[bytes],
        partition: int = 0,
        key: bytes | None = None,
        headers: list[tuple[str, bytes | None]] | None = None,
    ) -> list[int]:
        """Plain (non-transactional) records; returns their offsets."""
        p = producer(self.bootstrap)
        out = produce_and_confirm(p, topic, [(partition, key, v, headers) for v in values])
        assert not out.errors, out.errors
        return sorted(o[1] for o in out.ok)

    def txn_producer(self) -> TxnProducer:
        p = make_txn_producer("confluent", self.bootstrap, f"spark-test-{uuid.uuid4().hex[:8]}")
        p.init()
        self._producers.append(p)
        return p

    def txn(
        self, topic: str, values_by_partition: Mapping[int, Sequence[bytes]], commit: bool
    ) -> None:
        """One transaction over the given partitions, written out, then committed or
        aborted (aborted records do reach the log, so readers must skip them)."""
        p = self.txn_producer()
        p.begin()
        for partition, values in values_by_partition.items():
            for v in values:
                p.send(topic, partition, v)
        p.flush()
        if commit:
            p.commit()
        else:
            p.abort()

    def offsets(self, topic: str, partitions: int, spec: str) -> dict[int, int]:
        """ListOffsets: 'earliest' (log start), 'lso' (read_committed) or 'hw'."""
        admin = admin_client(self.bootstrap)
        level = IsolationLevel.READ_UNCOMMITTED if spec == "hw" else IsolationLevel.READ_COMMITTED
        what = OffsetSpec.earliest() if spec == "earliest" else OffsetSpec.latest()
        futures = admin.list_offsets(
            {TopicPartition(topic, p): what for p in range(partitions)},
            isolation_level=level,
            request_timeout=20,
        )
        return {tp.partition: f.result(timeout=20).offset for tp, f in futures.items()}

    def wait_stable(self, topic: str, partitions: int = 1) -> dict[int, int]:
        """Wait until every transaction on the topic is decided and its markers written."""

        def stable() -> dict[int, int] | None:
            lso, hw = self.offsets(topic, partitions, "lso"), self.offsets(topic, partitions, "hw")
            return hw if lso == hw else None

        return wait_for(stable, 30, f"LSO == high watermark on {topic}")

    def close(self) -> None:
        for p in self._producers:
            p.close()


@pytest.fixture
def kafka(spark_broker: BrokerProcess) -> Iterator[Kafka]:
    k = Kafka(spark_broker)
    mark = spark_broker.log_size()
    try:
        yield k
    finally:
        k.close()
    errors = spark_broker.internal_errors(mark)
    assert not errors, "the broker logged internal errors:\n" + "\n---\n".join(errors[:5])


def source_options(kafka: Kafka, **extra: Any) -> dict[str, str]:
    """Options of a read from the session's broker."""
    return {"kafka.bootstrap.servers": kafka.bootstrap, **{k: str(v) for k, v in extra.items()}}
