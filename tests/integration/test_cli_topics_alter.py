"""`onceflow topics alter` and `onceflow delete-records` against a broker process: Kafka's
errors for fewer partitions, bad config values and unknown topics, changes that clients then
feel (a new partition written to, a lowered max.message.bytes refusing a batch), and a
consumer from the beginning starting at the new log start after records are deleted."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

from onceflow.cli.main import main
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import (
    admin_client,
    consume_until,
    consumer,
    create_topic,
    drain,
    produce_and_confirm,
    producer,
    topic_name,
)

Result = tuple[int, str, str]


@pytest.fixture
def bootstrap(shared_broker: BrokerProcess) -> Iterator[str]:
    yield shared_broker.bootstrap


def cli(capsys: pytest.CaptureFixture[str], bootstrap: str, *argv: str) -> Result:
    capsys.readouterr()
    code = main([*argv, "--bootstrap-server", bootstrap])
    out, err = capsys.readouterr()
    return code, out, err


def partition_count(bootstrap: str, topic: str) -> int:
    return len(admin_client(bootstrap).list_topics(timeout=10).topics[topic].partitions)


def overrides(capsys: pytest.CaptureFixture[str], bootstrap: str, topic: str) -> str:
    code, out, _ = cli(capsys, bootstrap, "topics", "describe", topic)
    assert code == 0
    return out.splitlines()[0].split("Configs: ")[1]


def test_alter_partitions(capsys: pytest.CaptureFixture[str], bootstrap: str) -> None:
    topic = create_topic(bootstrap, topic_name("alter"), partitions=3)
    for fewer in ("2", "3"):
        code, out, err = cli(capsys, bootstrap, "topics", "alter", topic, "--partitions", fewer)
        assert (code, out) == (1, "")
        assert err.startswith(f"onceflow: error: cannot alter topic {topic}: INVALID_PARTITIONS (")
    assert partition_count(bootstrap, topic) == 3

    code, out, err = cli(capsys, bootstrap, "topics", "alter", topic, "--partitions", "5")
    assert (code, out, err) == (0, f"Increased the partition count of topic {topic} to 5.\n", "")
    assert partition_count(bootstrap, topic) == 5
    delivered = produce_and_confirm(producer(bootstrap), topic, [(4, None, b"new", None)])
    assert [(p, offset) for p, offset, *_ in delivered.ok] == [(4, 0)]

    code, _, err = cli(capsys, bootstrap, "topics", "alter", "no-such-topic", "--partitions", "5")
    assert code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in err
    code, out, err = cli(
        capsys, bootstrap, "topics", "alter", "no-such-topic", "--partitions", "5", "--if-exists"
    )
    assert (code, out, err) == (0, "", "")


def test_alter_configs(capsys: pytest.CaptureFixture[str], bootstrap: str) -> None:
    topic = create_topic(bootstrap, topic_name("alter"), partitions=1)
    # Checked before anything is applied: no partition is added for a bad value.
    code, out, err = cli(
        capsys,
        bootstrap,
        "topics",
        "alter",
        topic,
        "--partitions",
        "2",
        "--config",
        "retention.ms=abc",
    )
    assert (code, out) == (1, "")
    assert f"cannot alter topic {topic}: INVALID_CONFIG (" in err and "retention.ms" in err
    assert partition_count(bootstrap, topic) == 1
    code, _, err = cli(capsys, bootstrap, "topics", "alter", topic, "--config", "no.such.key=1")
    assert code == 1 and "INVALID_CONFIG" in err

    code, out, err = cli(
        capsys,
        bootstrap,
        *["topics", "alter", topic, "--config", "max.message.bytes=2000"],
        *["--config", "retention.ms=86400000"],
    )
    assert (code, out, err) == (0, f"Completed updating config for topic {topic}.\n", "")
    assert overrides(capsys, bootstrap, topic) == "max.message.bytes=2000,retention.ms=86400000"
    refused = produce_and_confirm(producer(bootstrap), topic, [(0, None, b"x" * 5000, None)])
    assert [e.code() for e in refused.errors] == [KafkaError.MSG_SIZE_TOO_LARGE]

    code, _, _ = cli(
        capsys, bootstrap, "topics", "alter", topic, "--delete-config", "max.message.bytes"
    )
    assert code == 0
    assert overrides(capsys, bootstrap, topic) == "retention.ms=86400000"
    assert not produce_and_confirm(
        producer(bootstrap), topic, [(0, None, b"x" * 5000, None)]
    ).errors


def read_from_beginning(bootstrap: str, topic: str, partition: int, count: int) -> list[int]:
    c = consumer(bootstrap)
    c.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
    try:
        got = consume_until(c, lambda msgs: len(msgs) >= count) if count else drain(c, 1.0)
    finally:
        c.close()
    return [m.offset() for m in got]


def test_delete_records(capsys: pytest.CaptureFixture[str], bootstrap: str, tmp_path: Path) -> None:
    topic = create_topic(bootstrap, topic_name("purge"), partitions=2)
    records = [(p, None, f"{p}-{i}".encode(), None) for p in (0, 1) for i in range(10)]
    assert not produce_and_confirm(producer(bootstrap), topic, records).errors

    argv = ["delete-records", "--topic", topic, "--partition", "0", "--offset", "4"]
    code, out, err = cli(capsys, bootstrap, *argv)
    assert (code, err) == (0, "")
    assert out == (
        "Executing records delete operation\n"
        "Records delete operation completed:\n"
        f"partition: {topic}-0\tlow_watermark: 4\n"
    )
    assert read_from_beginning(bootstrap, topic, 0, 6) == [4, 5, 6, 7, 8, 9]
    assert read_from_beginning(bootstrap, topic, 1, 10) == list(range(10))

    # Kafka's file: -1 is the high watermark; an offset past it and an unknown topic fail.
    offsets = {
        "version": 1,
        "partitions": [
            {"topic": topic, "partition": 1, "offset": -1},
            {"topic": topic, "partition": 0, "offset": 50},
            {"topic": "no-such-topic", "partition": 0, "offset": 1},
        ],
    }
    path = tmp_path / "offsets.json"
    path.write_text(json.dumps(offsets))
    code, out, err = cli(capsys, bootstrap, "delete-records", "--offset-json-file", str(path))
    assert (code, err) == (1, "")
    assert out.splitlines()[2:] == [
        "partition: no-such-topic-0\terror: UNKNOWN_TOPIC_OR_PARTITION "
        "(Unknown topic or partition)",
        f"partition: {topic}-0\terror: OFFSET_OUT_OF_RANGE (Offset out of range)",
        f"partition: {topic}-1\tlow_watermark: 10",
    ]
    assert read_from_beginning(bootstrap, topic, 1, 0) == []
    assert not produce_and_confirm(producer(bootstrap), topic, [(1, None, b"later", None)]).errors
    assert read_from_beginning(bootstrap, topic, 1, 1) == [10]

    # Without --partition: every partition. A group reset to the earliest follows.
    code, out, _ = cli(capsys, bootstrap, "delete-records", "--topic", topic, "--offset", "6")
    assert code == 0 and out.splitlines()[2:] == [
        f"partition: {topic}-0\tlow_watermark: 6",
        f"partition: {topic}-1\tlow_watermark: 10",  # already above: it stays
    ]
    group = f"{topic}-g"
    argv = ["groups", "--reset-offsets", "--group", group, "--topic", f"{topic}:0", "--to-earliest"]
    code, out, _ = cli(capsys, bootstrap, *argv)
    assert code == 0 and out.split()[-4:] == [group, topic, "0", "6"]
