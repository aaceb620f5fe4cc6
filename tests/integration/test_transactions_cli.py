"""`onceflow transactions` against a broker process: a hanging transaction made on purpose,
found and aborted with the CLI, and an open transaction of a real confluent-kafka
transactional producer listed and described.

The hanging transaction is made the way Kafka made them before KIP-890: with the broker's
partition verification off (`transaction.partition.verification.enable=false`), a raw
Produce writes a transactional batch for a producer id no coordinator knows. Nothing will
ever write its marker, so the last stable offset is stuck at its first offset and every
read_committed consumer stops there, even for later non-transactional records.
"""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest
from confluent_kafka import Producer, TopicPartition

from onceflow.cli.main import main
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import (
    QUIET_LOGGER,
    consume_until,
    consumer,
    create_topic,
    drain,
    topic_name,
)
from tests.helpers.txn import HANGING_PRODUCER_ID, end_offset, produce_hanging_transaction

MINUTE_MS = 60_000
OP_TIMEOUT_S = 30.0


def produce_plain(bootstrap: str, topic: str, values: list[bytes]) -> None:
    """Plain (non-transactional, non-idempotent) records to partition 0."""
    p = Producer({"bootstrap.servers": bootstrap, "logger": QUIET_LOGGER, "log_level": 0})
    for value in values:
        p.produce(topic, value, partition=0)
    assert p.flush(OP_TIMEOUT_S) == 0


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["transactions", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def table(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines() if line.strip()]


@pytest.mark.broker_overrides({"transaction.partition.verification.enable": "false"})
def test_find_and_abort_a_hanging_transaction(
    broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    bootstrap = broker.bootstrap
    topic = create_topic(bootstrap, topic_name("hang"))
    produce_hanging_transaction(bootstrap, topic, age_ms=20 * MINUTE_MS)
    later = [f"later-{i}".encode() for i in range(3)]
    produce_plain(bootstrap, topic, later)

    # Stuck: the LSO stays at the hanging transaction's first offset, below later records.
    assert end_offset(bootstrap, topic, 0, committed=False) == 5
    assert end_offset(bootstrap, topic, 0, committed=True) == 0
    reader = consumer(bootstrap, **{"isolation.level": "read_committed"})
    reader.assign([TopicPartition(topic, 0, 0)])
    try:
        assert drain(reader, 3.0) == []
    finally:
        reader.close()

    code, out, err = cli(capsys, "find-hanging", "--bootstrap-server", bootstrap, "--topic", topic)
    assert (code, err) == (0, "")
    rows = table(out)
    assert rows[0][:6] == [
        "Topic",
        "Partition",
        "ProducerId",
        "ProducerEpoch",
        "CoordinatorEpoch",
        "StartOffset",
    ]
    assert [r[:6] for r in rows[1:]] == [[topic, "0", str(HANGING_PRODUCER_ID), "0", "-1", "0"]]
    assert int(rows[1][7]) >= 20  # Duration(min)

    # The entry point a user types, in its own process.
    abort = ["abort", "--bootstrap-server", bootstrap, "--topic", topic, "--partition", "0"]
    done = subprocess.run(
        [sys.executable, "-m", "onceflow.cli.main", "transactions", *abort, "--start-offset", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert f"producer {HANGING_PRODUCER_ID}" in done.stdout

    # The ABORT marker is offset 5: the LSO reaches the end, and read_committed readers see
    # the later records but never the aborted ones.
    assert end_offset(bootstrap, topic, 0, committed=True) == 6
    assert end_offset(bootstrap, topic, 0, committed=False) == 6
    reader = consumer(bootstrap, **{"isolation.level": "read_committed"})
    reader.assign([TopicPartition(topic, 0, 0)])
    try:
        got = consume_until(reader, lambda msgs: len(msgs) >= 3, what="the later records")
        got += drain(reader, 1.0)
    finally:
        reader.close()
    assert [m.value() for m in got] == later

    code, out, _ = cli(capsys, "find-hanging", "--bootstrap-server", bootstrap, "--topic", topic)
    assert (code, out.strip()) == (0, "No hanging transactions found.")


def test_list_and_describe_an_open_transaction(
    shared_broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    bootstrap = shared_broker.bootstrap
    topic = create_topic(bootstrap, topic_name("open"), partitions=2)
    txn_id = f"cli-app-{uuid.uuid4().hex[:8]}"
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "transaction.timeout.ms": 120_000,
            "logger": QUIET_LOGGER,
            "log_level": 0,
        }
    )
    producer.init_transactions(OP_TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(topic, b"in-flight", partition=1)
    assert producer.flush(OP_TIMEOUT_S) == 0

    code, out, err = cli(capsys, "list", "--bootstrap-server", bootstrap)
    assert (code, err) == (0, "")
    listed = {r[0]: r for r in table(out)[1:]}
    assert listed[txn_id][3] == "Ongoing"
    producer_id = listed[txn_id][2]

    code, out, _ = cli(
        capsys, "describe", "--bootstrap-server", bootstrap, "--transactional-id", txn_id
    )
    assert code == 0
    header, row = table(out)
    described = dict(zip(header, row, strict=True))
    assert described["ProducerId"] == producer_id
    assert described["TransactionState"] == "Ongoing"
    assert described["TransactionTimeoutMs"] == "120000"
    assert described["TopicPartitions"] == f"{topic}-1"

    code, out, _ = cli(
        capsys,
        "describe-producers",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--partition",
        "1",
    )
    assert code == 0
    (producer_row,) = table(out)[1:]
    assert producer_row[0] == producer_id
    assert producer_row[-1] == "0"  # its open transaction starts at offset 0

    # Open, but its coordinator will end it: never hanging, however small the timeout.
    code, out, _ = cli(
        capsys,
        "find-hanging",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--max-transaction-timeout",
        "0",
    )
    assert (code, out.strip()) == (0, "No hanging transactions found.")

    producer.commit_transaction(OP_TIMEOUT_S)
    code, out, _ = cli(
        capsys, "describe", "--bootstrap-server", bootstrap, "--transactional-id", txn_id
    )
    assert code == 0
    assert table(out)[1][4] in (  # TransactionState (no TopicPartitions any more)
        "PrepareCommit",
        "CompleteCommit",
    )
    code, out, _ = cli(capsys, "list", "--bootstrap-server", bootstrap, "--state", "Ongoing")
    assert txn_id not in out


def test_describe_unknown_transactional_id(
    shared_broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(
        capsys,
        "describe",
        "--bootstrap-server",
        shared_broker.bootstrap,
        "--transactional-id",
        "never-used",
    )
    assert (code, out) == (1, "")
    assert err.strip().endswith("TRANSACTIONAL_ID_NOT_FOUND")
