"""The exactly-once pipeline on a secured broker: SCRAM over SASL_SSL, with ACLs limited to
what the pipeline needs, and every `kafka.*` security option reaching every client the
connector makes (the driver's metadata client, the read tasks' consumers, the write tasks'
transactional producers and their ledger consumers).

The minimal ACLs of a pipeline (`pipeline_acls`, explained in docs/spark-security.md), for
a sink id S reading topic IN and writing topic OUT:

    TOPIC            IN                      LITERAL   READ      (DESCRIBE is implied)
    TOPIC            OUT                     LITERAL   WRITE     (DESCRIBE is implied)
    TOPIC            __onceflow_sink_ledger  LITERAL   READ      the ledger's offsets
    GROUP            onceflow-sink-S-        PREFIXED  READ      one ledger group per task
    TRANSACTIONAL_ID S-                      PREFIXED  WRITE     one transactional id per task
    GROUP            onceflow-spark-source   LITERAL   DESCRIBE  read tasks' coordinator lookup

The ledger topic is created here by the admin; a sink that creates it needs CREATE on it.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from pyspark.errors import AnalysisException, PythonException, StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from onceflow.cli.main import main as cli_main
from onceflow.spark import KafkaAccessError
from onceflow.spark.batch_commit import read_decision
from onceflow.spark.ledger import DEFAULT_LEDGER_TOPIC, LEDGER_GROUP_PREFIX, Ledger
from onceflow.spark.options import REDACTED, parse_source_options
from onceflow.spark.range_reader import READER_GROUP_ID
from onceflow.spark.sink_config import SinkColumns, SinkConfig
from tests.helpers.clients import QUIET_LOGGER
from tests.helpers.secure import ADMIN, SecureBroker, add_scram_user, admin, allow
from tests.helpers.secure import start_secure_broker as start_broker
from tests.helpers.txn import wait_for
from tests.integration.test_cli_security import admin_config

QUERY_TIMEOUT_S = 120
SPARK_ERRORS = (AnalysisException, PythonException)  # failed planning, failed task
TIMEOUT_S = 30
PARTITIONS = 2
MECHANISM = "SCRAM-SHA-512"
# Distinctive, so a leak is found wherever it lands.
PASSWORDS = {
    "etl": "etl-pw-5f1c2a",
    "etl-no-txn": "no-txn-pw-8d3e",
    "outsider": "outsider-pw-27b9",
    "peeker": "peeker-pw-c04d",
}
WRONG_PASSWORD = "wrong-pw-9a61"


@dataclass(frozen=True)
class Pipeline:
    input: str
    output: str
    sink_id: str


def pipeline_acls(p: Pipeline) -> list[tuple[str, str, tuple[str, ...], str]]:
    """(resource type, name, operations, pattern) of everything the pipeline does."""
    return [
        ("TOPIC", p.input, ("READ",), "LITERAL"),
        ("TOPIC", p.output, ("WRITE",), "LITERAL"),
        ("TOPIC", DEFAULT_LEDGER_TOPIC, ("READ",), "LITERAL"),
        ("GROUP", f"{LEDGER_GROUP_PREFIX}{p.sink_id}-", ("READ",), "PREFIXED"),
        ("TRANSACTIONAL_ID", f"{p.sink_id}-", ("WRITE",), "PREFIXED"),
        ("GROUP", READER_GROUP_ID, ("DESCRIBE",), "LITERAL"),
    ]


def batch_acls(p: Pipeline) -> list[tuple[str, str, tuple[str, ...], str]]:
    """What per-batch atomicity adds: TWO_PHASE_COMMIT on the tasks' ids and on the probe
    id, the decision log's group, and DESCRIBE on __transaction_state (its partition count
    colocates the tasks' ids for a completion in one request)."""
    return [
        *pipeline_acls(p),
        ("TRANSACTIONAL_ID", f"{p.sink_id}-", ("TwoPhaseCommit",), "PREFIXED"),
        (
            "TRANSACTIONAL_ID",
            f"onceflow-sink-probe-{p.sink_id}",
            ("Write", "TwoPhaseCommit"),
            "LITERAL",
        ),
        ("GROUP", f"{LEDGER_GROUP_PREFIX}decisions-{p.sink_id}", ("READ",), "LITERAL"),
        ("TOPIC", "__transaction_state", ("DESCRIBE",), "LITERAL"),
    ]


PIPELINE = Pipeline("etl-in", "etl-out", "etl-sink")
BATCH = Pipeline("batch-in", "batch-out", "batch-sink")
NO_TXN = Pipeline("no-txn-in", "no-txn-out", "no-txn-sink")
PEEKED = "peeked"  # "peeker" may describe it, "outsider" nothing


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    broker = start_broker(
        tmp_path_factory.mktemp("spark-secure"), {"transaction.two.phase.commit.enable": "true"}
    )
    try:
        topics = (
            [NewTopic(DEFAULT_LEDGER_TOPIC, 1)]
            + [
                NewTopic(name, PARTITIONS)
                for p in (PIPELINE, NO_TXN, BATCH)
                for name in (p.input, p.output)
            ]
            + [NewTopic(PEEKED, PARTITIONS)]
        )
        client = admin(broker)
        for future in client.create_topics(topics).values():
            future.result(timeout=TIMEOUT_S)
        for user, password in PASSWORDS.items():
            add_scram_user(broker, user, password)
        for resource, name, ops, pattern in pipeline_acls(PIPELINE):
            allow(broker, "User:etl", resource, name, ops, pattern)
        for resource, name, ops, pattern in batch_acls(BATCH):
            if "TwoPhaseCommit" in ops:  # an operation confluent-kafka does not name
                allow_with_cli(broker, tmp_path_factory.mktemp("acl"), name, ops, pattern)
            else:
                allow(broker, "User:etl", resource, name, ops, pattern)
        for resource, name, ops, pattern in pipeline_acls(NO_TXN):
            if resource != "TRANSACTIONAL_ID":
                allow(broker, "User:etl-no-txn", resource, name, ops, pattern)
        allow(broker, "User:peeker", "TOPIC", PEEKED, ("DESCRIBE",))
        load_input(broker, PEEKED)
        yield broker
    finally:
        broker.process.stop()
        log = broker.process.log
        shown = [pw for pw in (*PASSWORDS.values(), WRONG_PASSWORD) if pw in log]
        assert not shown, "a password in the broker log"
        errors = broker.process.internal_errors()
        assert not errors, "\n".join(errors[:3])


def allow_with_cli(
    broker: SecureBroker, directory: Path, txn_id: str, operations: tuple[str, ...], pattern: str
) -> None:
    """Transactional-id ACLs for User:etl through `onceflow acls`, as the admin."""
    bootstrap = ["--bootstrap-server", broker.bootstrap("SASL_SSL")]
    bootstrap += ["--command-config", admin_config(broker, directory)]
    for operation in operations:
        argv = ["acls", "--add", "--allow-principal", "User:etl", "--transactional-id", txn_id]
        argv += ["--resource-pattern-type", pattern.lower(), "--operation", operation]
        assert cli_main([*argv, *bootstrap]) == 0


def spark_options(broker: SecureBroker, user: str, password: str | None = None) -> dict[str, str]:
    """The user's client settings as the connector's `kafka.*` options."""
    conf = broker.confluent("SASL_SSL", user, password or PASSWORDS[user], mechanism=MECHANISM)
    return {f"kafka.{key}": str(value) for key, value in conf.items()}


def admin_conf(broker: SecureBroker) -> dict[str, Any]:
    return {**broker.confluent("SASL_SSL", *ADMIN, mechanism="PLAIN"), "logger": QUIET_LOGGER}


def load_input(broker: SecureBroker, topic: str) -> list[bytes]:
    """Transactions on both partitions, one of them aborted; the committed values."""
    producer = Producer({**admin_conf(broker), "transactional.id": f"loader-{uuid.uuid4()}"})
    producer.init_transactions(TIMEOUT_S)
    committed: list[bytes] = []
    for txn, commit in enumerate((True, True, False, True, True)):
        producer.begin_transaction()
        values = [f"{txn}-{i}".encode() for i in range(40)]
        for i, value in enumerate(values):
            producer.produce(topic, value, partition=i % PARTITIONS)
        if commit:
            producer.commit_transaction(TIMEOUT_S)
            committed += values
        else:
            producer.abort_transaction(TIMEOUT_S)
    return committed


def committed_output(broker: SecureBroker, topic: str) -> list[bytes]:
    """Every value a read_committed consumer sees, up to each partition's end."""
    consumer = Consumer(
        {
            **admin_conf(broker),
            "group.id": "checker",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        ends = {tp.partition: consumer.get_watermark_offsets(tp, TIMEOUT_S)[1] for tp in tps}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        values: list[bytes] = []

        def reached() -> bool:
            for msg in consumer.consume(500, 0.2):
                assert msg.error() is None, msg.error()
                values.append(msg.value())
            positions = consumer.position(tps)
            return all(tp.offset >= ends[tp.partition] for tp in positions if ends[tp.partition])

        wait_for(reached, TIMEOUT_S, f"the end of {topic}")
        return values
    finally:
        consumer.close()


def start_pipeline(
    spark: SparkSession,
    options: dict[str, str],
    p: Pipeline,
    checkpoint: Path,
    atomicity: str = "task",
) -> Any:
    """Read read_committed, transform, write transactionally: several micro-batches."""
    source = (
        spark.readStream.format("onceflow")
        .options(**options)
        .option("subscribe", p.input)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", 120)
        .load()
    )
    return (
        source.select(F.concat(F.col("value").cast("string"), F.lit("!")).alias("value"))
        .writeStream.format("onceflow")
        .options(**options)
        .option("topic", p.output)
        .option("sinkId", p.sink_id)
        .option("atomicity", atomicity)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def test_exactly_once_pipeline_over_sasl_ssl_with_scram_and_minimal_acls(
    spark: SparkSession,
    secure: SecureBroker,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    committed = load_input(secure, PIPELINE.input)
    q = start_pipeline(spark, spark_options(secure, "etl"), PIPELINE, tmp_path / "checkpoint")
    try:
        assert q.awaitTermination(QUERY_TIMEOUT_S), "the availableNow query did not finish"
        q.explain(True)
    finally:
        q.stop()
    assert q.exception() is None

    got = committed_output(secure, PIPELINE.output)
    dups = {v: n for v, n in Counter(got).items() if n > 1}
    assert not dups, f"duplicated: {dups}"
    assert sorted(got) == sorted(v + b"!" for v in committed)  # no loss, nothing aborted
    # Several micro-batches, so each task ran several transactions and ledger entries.
    assert sum(1 for p in q.recentProgress if p["numInputRows"]) > 1
    # The ACLs above are enough: the broker denied the pipeline nothing.
    assert "Principal = User:etl is Denied" not in secure.process.log
    # Neither the query's progress (source and sink descriptions) nor its plan shows it.
    shown = json.dumps(q.recentProgress, default=str) + capsys.readouterr().out
    assert "MicroBatchScan" in shown
    assert PASSWORDS["etl"] not in shown


def test_per_batch_atomicity_over_sasl_ssl_with_its_acls(
    spark: SparkSession, secure: SecureBroker, tmp_path: Path
) -> None:
    """The participant client of per-batch atomicity speaks the sink's SASL_SSL settings;
    with the ACLs `batch_acls` lists, every micro-batch is decided and completed at once."""
    committed = load_input(secure, BATCH.input)
    options = spark_options(secure, "etl")
    q = start_pipeline(spark, options, BATCH, tmp_path / "checkpoint", atomicity="batch")
    try:
        assert q.awaitTermination(QUERY_TIMEOUT_S), "the availableNow query did not finish"
    finally:
        q.stop()
    assert q.exception() is None
    got = committed_output(secure, BATCH.output)
    assert sorted(got) == sorted(v + b"!" for v in committed)  # once each, nothing aborted
    last = read_decision(
        {k.removeprefix("kafka."): v for k, v in options.items()},
        DEFAULT_LEDGER_TOPIC,
        BATCH.sink_id,
        TIMEOUT_S,
    )
    assert last is not None and last.colocated is not None  # decided, completed at once
    assert last.batch_id == max(p["batchId"] for p in q.recentProgress if p["numInputRows"])
    assert "Principal = User:etl is Denied" not in secure.process.log


def test_without_write_on_the_transactional_id_the_query_fails_clearly(
    spark: SparkSession, secure: SecureBroker, tmp_path: Path
) -> None:
    load_input(secure, NO_TXN.input)
    options = spark_options(secure, "etl-no-txn")
    q = start_pipeline(spark, options, NO_TXN, tmp_path / "checkpoint")
    try:
        with pytest.raises(StreamingQueryException) as failed:
            q.awaitTermination(QUERY_TIMEOUT_S)
    finally:
        q.stop()
    message = str(failed.value)
    assert "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" in message
    assert f"transactional id '{NO_TXN.sink_id}-" in message
    assert PASSWORDS["etl-no-txn"] not in message
    # The audit line the exactly-once test looks for (and must not find for its user).
    denied = "Principal = User:etl-no-txn is Denied operation = DESCRIBE"
    assert f"{denied} from host = 127.0.0.1 on resource = TRANSACTIONAL_ID" in secure.process.log
    assert committed_output(secure, NO_TXN.output) == []


def test_a_refused_login_or_a_denied_read_fails_the_read_clearly(
    spark: SparkSession, secure: SecureBroker
) -> None:
    def read(user: str, password: str | None = None, **extra: str) -> list[Any]:
        options = {**spark_options(secure, user, password), "subscribe": PEEKED}
        return spark.read.format("onceflow").options(**options, **extra).load().collect()

    # A wrong password fails at once, not after the metadata time-out as a transport error.
    with pytest.raises(SPARK_ERRORS, match="cannot log in to Kafka: _AUTHENTICATION") as bad:
        read("etl", WRONG_PASSWORD)
    assert WRONG_PASSWORD not in str(bad.value)
    # A topic the principal may not describe is denied, not a topic that does not exist.
    denied = rf"cannot describe topic '{PEEKED}': TOPIC_AUTHORIZATION_FAILED"
    with pytest.raises(SPARK_ERRORS, match=denied):
        read("outsider")
    # DESCRIBE without READ: planning works, the read task is denied; never counted as
    # data loss, even with failOnDataLoss=false, and never waited out.
    denied = rf"reading {PEEKED}-\d: TOPIC_AUTHORIZATION_FAILED"
    with pytest.raises(SPARK_ERRORS, match=denied):
        read("peeker", failOnDataLoss="false", **{"kafkaConsumer.pollTimeoutMs": "60000"})


def test_the_sink_ledger_names_a_missing_acl_at_once(secure: SecureBroker) -> None:
    """Without an ACL on the ledger topic or on the task's ledger group, the write task
    fails naming it (librdkafka alone would wait out the timeout, then say "timed out")."""
    conf = {k[len("kafka.") :]: v for k, v in spark_options(secure, "outsider").items()}
    ledger = Ledger(conf, DEFAULT_LEDGER_TOPIC, f"{PIPELINE.sink_id}-0", TIMEOUT_S, QUIET_LOGGER)
    try:
        with pytest.raises(KafkaAccessError, match=r"ledger topic .*TOPIC_AUTHORIZATION_FAILED"):
            ledger.ensure_topic()
        group = f"{LEDGER_GROUP_PREFIX}{PIPELINE.sink_id}-0"
        with pytest.raises(KafkaAccessError, match=f"'{group}': GROUP_AUTHORIZATION_FAILED"):
            ledger.read()
    finally:
        ledger.close()


def test_client_settings_never_show_a_secret() -> None:
    secrets = {
        "kafka.sasl.password": "pw-1",
        "kafka.ssl.key.password": "pw-2",
        "kafka.sasl.jaas.config": 'ScramLoginModule required username="u" password="pw-3";',
        "kafka.ssl.key.pem": "-----BEGIN PRIVATE KEY-----pw-4",
        "kafka.sasl.oauthbearer.client.secret": "pw-5",
    }
    options = {"kafka.bootstrap.servers": "h:1", "kafka.sasl.username": "u", **secrets}
    source = parse_source_options({**options, "subscribe": "t"})
    sink = SinkConfig(client_config=source.kafka, columns=SinkColumns(value="value"))
    plain = SinkConfig(client_config=dict(source.kafka), columns=SinkColumns(value="value"))
    for shown in (repr(source), str(source.kafka), repr(sink), repr(plain)):
        assert not any(f"pw-{i}" in shown for i in range(1, 6)), shown
        assert REDACTED in shown and "'sasl.username': 'u'" in shown
    # Only the representation is redacted: the clients get the values.
    assert source.kafka["sasl.password"] == "pw-1"
