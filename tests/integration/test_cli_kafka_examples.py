"""Kafka's documented tool invocations (quickstart and operations docs), typed as `onceflow`
commands against a broker process, with their output checked against the Kafka tools'
formats: kafka-topics.sh's describe lines, the console consumer's DefaultMessageFormatter
fields, kafka-consumer-groups.sh's table, kafka-configs.sh's describe.
"""

from __future__ import annotations

import io
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from onceflow.cli.main import main
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import topic_name

Result = tuple[int, str, str]


@pytest.fixture
def bootstrap(shared_broker: BrokerProcess) -> Iterator[str]:
    yield shared_broker.bootstrap


def kafka(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    bootstrap: str,
    *argv: str,
    stdin: bytes = b"",
) -> Result:
    """A Kafka tool's command line, `--bootstrap-server` first as Kafka's docs write it."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    capsys.readouterr()
    code = main([argv[0], "--bootstrap-server", bootstrap, *argv[1:]])
    out, err = capsys.readouterr()
    return code, out, err


def ok(result: Result) -> str:
    code, out, err = result
    assert code == 0, err
    return out


def test_topics(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, bootstrap: str
) -> None:
    topic = topic_name("quickstart-events")
    run = lambda *argv: kafka(capsys, monkeypatch, bootstrap, "topics", *argv)  # noqa: E731
    assert ok(run("--create", "--topic", topic)) == f"Created topic {topic}.\n"
    assert topic in ok(run("--list")).splitlines()
    lines = ok(run("--describe", "--topic", topic)).splitlines()
    assert re.fullmatch(
        rf"Topic: {topic}\tTopicId: [A-Za-z0-9_-]{{22}}\tPartitionCount: 1\t"
        r"ReplicationFactor: 1\tConfigs: ",
        lines[0],
    ), lines[0]
    assert re.fullmatch(
        rf"\tTopic: {topic}\tPartition: 0\tLeader: (\d+)\tReplicas: \1\tIsr: \1", lines[1]
    ), lines[1]
    # The alias form asks the same and prints the same.
    assert ok(run("describe", topic)).splitlines()[:2] == lines[:2]
    # Operations: add partitions, report (none under-replicated on one broker), delete.
    assert ok(run("--alter", "--topic", topic, "--partitions", "3")) == (
        f"Increased the partition count of topic {topic} to 3.\n"
    )
    assert ok(run("--describe", "--topic", topic, "--under-replicated-partitions")) == ""
    assert ok(run("--describe", "--topic", topic, "--under-min-isr-partitions")) == ""
    at_min = ok(run("--describe", "--topic", topic, "--at-min-isr-partitions"))  # min ISR 1
    assert at_min.count(f"\tTopic: {topic}\tPartition: ") == 3
    assert ok(run("--describe", "--topic", f"{topic[:-3]}.*")).count("\tPartition: ") == 3
    code, _, err = run("--create", "--topic", topic, "--replica-assignment", "1:2")
    assert (code, err.count("\n")) == (2, 1)
    assert "kafka-topics.sh option Onceflow does not support" in err
    assert ok(run("--create", "--topic", topic, "--if-not-exists")) == ""
    ok(run("--delete", "--topic", topic))
    assert topic not in ok(run("--list")).splitlines()
    code, _, err = run("--describe", "--topic", topic)
    assert (code, err) == (1, f"onceflow: error: no such topic: {topic}\n")


def test_console_producer_and_consumer(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, bootstrap: str
) -> None:
    topic = topic_name("console")
    ok(kafka(capsys, monkeypatch, bootstrap, "topics", "--create", "--topic", topic))
    produced = kafka(
        capsys,
        monkeypatch,
        bootstrap,
        "produce",
        "--topic",
        topic,
        "--property",
        "parse.key=true",
        "--property",
        "key.separator=:",
        stdin=b"k1:first\nk2:second\n",
    )
    assert ok(produced) == ""
    with_headers = kafka(
        capsys,
        monkeypatch,
        bootstrap,
        "produce",
        "--topic",
        topic,
        "--property",
        "parse.headers=true",
        "--property",
        "parse.key=true",
        stdin=b"h1:x,h2:y\tk3\tthird\n",
    )
    assert ok(with_headers) == ""
    consume = ["consume", "--topic", topic, "--from-beginning", "--max-messages", "3"]
    assert ok(kafka(capsys, monkeypatch, bootstrap, *consume)) == "first\nsecond\nthird\n"
    keys = ok(kafka(capsys, monkeypatch, bootstrap, *consume, "--property", "print.key=true"))
    assert keys == "k1\tfirst\nk2\tsecond\nk3\tthird\n"
    every = [
        f"--property=print.{field}=true"
        for field in ("timestamp", "partition", "offset", "headers", "key")
    ]
    lines = ok(kafka(capsys, monkeypatch, bootstrap, *consume, *every)).splitlines()
    expected = [
        r"0\tNO_HEADERS\tk1\tfirst",
        r"1\tNO_HEADERS\tk2\tsecond",
        r"2\th1:x,h2:y\tk3\tthird",
    ]
    for line, tail in zip(lines, expected, strict=True):
        assert re.fullmatch(rf"CreateTime:\d{{13}}\tPartition:0\tOffset:{tail}", line), line
    # Kafka's --partition/--offset and a custom separator.
    one = kafka(
        capsys,
        monkeypatch,
        bootstrap,
        "consume",
        "--topic",
        topic,
        "--partition",
        "0",
        "--offset",
        "1",
        "--max-messages",
        "1",
        "--property",
        "print.offset=true",
        "--property",
        "key.separator= | ",
    )
    assert ok(one) == "Offset:1 | second\n"
    # Topics by pattern (--include), matching whole names: the topic, not one named longer.
    ok(kafka(capsys, monkeypatch, bootstrap, "topics", "--create", "--topic", f"{topic}-x"))
    pattern = ["consume", "--include", f"{topic[:-4]}.{{4}}", "--from-beginning"]
    included = kafka(capsys, monkeypatch, bootstrap, *pattern, "--timeout-ms", "8000")
    assert sorted(ok(included).splitlines()) == ["first", "second", "third"]


def test_consumer_groups(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, bootstrap: str
) -> None:
    topic, group = topic_name("groups"), topic_name("my-group")
    ok(kafka(capsys, monkeypatch, bootstrap, "topics", "--create", "--topic", topic))
    ok(kafka(capsys, monkeypatch, bootstrap, "produce", "--topic", topic, stdin=b"a\nb\n"))
    consume = ["consume", "--topic", topic, "--group", group, "--from-beginning"]
    assert ok(kafka(capsys, monkeypatch, bootstrap, *consume, "--max-messages", "2")) == "a\nb\n"
    assert group in ok(kafka(capsys, monkeypatch, bootstrap, "groups", "--list")).splitlines()
    out = ok(kafka(capsys, monkeypatch, bootstrap, "groups", "--describe", "--group", group))
    rows = [line.split() for line in out.splitlines() if line.strip()]
    header = "GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID"
    assert rows[0] == header.split()
    assert rows[1][:6] == [group, topic, "0", "2", "2", "0"]


def test_configs_and_delete_records(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    bootstrap: str,
    tmp_path: Path,
) -> None:
    topic = topic_name("configs")
    ok(kafka(capsys, monkeypatch, bootstrap, "topics", "--create", "--topic", topic))
    entity = ["configs", "--entity-type", "topics", "--entity-name", topic]
    altered = kafka(
        capsys, monkeypatch, bootstrap, *entity, "--alter", "--add-config", "retention.ms=60000"
    )
    assert ok(altered) == f"Completed updating config for topic {topic}.\n"
    lines = ok(kafka(capsys, monkeypatch, bootstrap, *entity, "--describe")).splitlines()
    assert lines[0] == f"Dynamic configs for topic {topic} are:"
    assert lines[1].startswith("  retention.ms=60000 sensitive=false synonyms={")
    described = ok(kafka(capsys, monkeypatch, bootstrap, "topics", "--describe", "--topic", topic))
    assert described.splitlines()[0].endswith("\tConfigs: retention.ms=60000")
    deleted = kafka(
        capsys, monkeypatch, bootstrap, *entity, "--alter", "--delete-config", "retention.ms"
    )
    ok(deleted)
    assert ok(kafka(capsys, monkeypatch, bootstrap, *entity, "--describe")).count("\n") == 1

    ok(kafka(capsys, monkeypatch, bootstrap, "produce", "--topic", topic, stdin=b"a\nb\nc\n"))
    offsets = tmp_path / "offsets.json"
    document = {"partitions": [{"topic": topic, "partition": 0, "offset": 2}], "version": 1}
    offsets.write_text(json.dumps(document))
    ok(kafka(capsys, monkeypatch, bootstrap, "delete-records", "--offset-json-file", str(offsets)))
    rest = ["consume", "--topic", topic, "--from-beginning", "--max-messages", "1"]
    assert ok(kafka(capsys, monkeypatch, bootstrap, *rest)) == "c\n"


def test_transactions_in_kafkas_order(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, bootstrap: str
) -> None:
    out = ok(kafka(capsys, monkeypatch, bootstrap, "transactions", "list"))
    assert out.split()[:3] == ["TransactionalId", "Coordinator", "ProducerId"]
