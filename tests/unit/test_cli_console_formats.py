"""The console tools' formats: lines read as Kafka's LineMessageReader reads them, records
printed as Kafka's DefaultMessageFormatter prints them, and topic selection and reports as
kafka-topics.sh makes them.
"""

from __future__ import annotations

import argparse
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import Uuid
from confluent_kafka.admin import ConfigEntry, ConfigSource

from onceflow.cli import topic_views
from onceflow.cli.common import CliError
from onceflow.cli.line_reader import LineError, LineReader, Record
from onceflow.cli.record_formatter import RecordFormatter

# --- the line reader ------------------------------------------------------------------------


def test_plain_lines_are_values() -> None:
    assert LineReader().read(b"a\tb") == Record(None, b"a\tb", [])


def test_key_and_headers() -> None:
    reader = LineReader.from_properties(
        {"parse.key": "true", "key.separator": ":", "parse.headers": "TRUE"}
    )
    assert reader.read(b"h1:v1,h2:v2\tk:v:w") == Record(
        b"k", b"v:w", [("h1", b"v1"), ("h2", b"v2")]
    )


def test_null_marker() -> None:
    reader = LineReader.from_properties({"parse.key": "true", "null.marker": "NULL"})
    assert reader.read(b"NULL\tNULL") == Record(None, None, [])


def test_missing_separator() -> None:
    reader = LineReader.from_properties({"parse.key": "true", "key.separator": ":"})
    with pytest.raises(LineError, match="has no key separator ':'"):
        reader.read(b"no separator")
    lenient = LineReader.from_properties({"parse.key": "true", "ignore.error": "true"})
    assert lenient.read(b"all value") == Record(None, b"all value", [])


def test_ambiguous_separators_are_refused() -> None:
    with pytest.raises(ValueError, match=r"headers\.delimiter and headers\.separator"):
        LineReader.from_properties({"parse.headers": "true", "headers.delimiter": ","})
    with pytest.raises(ValueError, match=r"key\.separator may not be empty"):
        LineReader.from_properties({"key.separator": ""})


# --- the formatter --------------------------------------------------------------------------


class Message:
    def __init__(self, key: bytes | None, value: bytes | None, **extra: Any) -> None:
        self._key, self._value = key, value
        self._headers = extra.get("headers")
        self._timestamp = extra.get("timestamp", (1, 1700000000000))

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def partition(self) -> int:
        return 2

    def offset(self) -> int:
        return 7

    def timestamp(self) -> tuple[int, int]:
        return self._timestamp

    def headers(self) -> Any:
        return self._headers


EVERYTHING = {
    f"print.{field}": "true" for field in ("timestamp", "partition", "offset", "headers", "key")
}


def test_value_only_by_default() -> None:
    assert RecordFormatter().format(Message(b"k", b"v")) == b"v\n"


def test_every_field_in_kafkas_order() -> None:
    formatter = RecordFormatter.from_properties(EVERYTHING)
    message = Message(b"k", b"v", headers=[("h1", b"a"), ("h2", None)])
    assert formatter.format(message) == (
        b"CreateTime:1700000000000\tPartition:2\tOffset:7\th1:a,h2:null\tk\tv\n"
    )


def test_no_headers_no_timestamp_and_nulls() -> None:
    formatter = RecordFormatter.from_properties(
        {**EVERYTHING, "null.literal": "<nil>", "key.separator": " | "}
    )
    message = Message(None, None, headers=None, timestamp=(0, -1))
    assert formatter.format(message) == (
        b"NO_TIMESTAMP | Partition:2 | Offset:7 | NO_HEADERS | <nil> | <nil>\n"
    )


def test_log_append_time_and_no_value() -> None:
    formatter = RecordFormatter.from_properties(
        {"print.timestamp": "true", "print.value": "false", "line.separator": ";"}
    )
    assert formatter.format(Message(b"k", b"v", timestamp=(2, 5))) == b"LogAppendTime:5;"


# --- kafka-topics.sh's selection and reports ------------------------------------------------


def test_topic_names_then_regular_expressions() -> None:
    names = ["a.b", "aXb", "orders", "__consumer_offsets"]
    assert topic_views.select_topics(names, [], False) == (sorted(names), [])
    assert topic_views.select_topics(names, ["a.b"], False) == (["a.b"], [])  # a name wins
    assert topic_views.select_topics(names, ["a.*"], False) == (["a.b", "aXb"], [])
    assert topic_views.select_topics(names, ["ord", "__.*"], True) == ([], ["ord", "__.*"])


def describe_args(**flags: bool) -> argparse.Namespace:
    reports = ("under_replicated", "unavailable", "under_min_isr", "at_min_isr")
    defaults = dict.fromkeys([f"{report}_partitions" for report in reports], False)
    defaults["topics_with_overrides"] = False
    return argparse.Namespace(all_configs=False, **{**defaults, **flags})


def partition(pid: int, leader: int, isr: list[int]) -> SimpleNamespace:
    return SimpleNamespace(id=pid, leader=leader, replicas=[1, 2], isrs=isr, error=None)


TOPIC = SimpleNamespace(
    partitions={0: partition(0, 1, [1, 2]), 1: partition(1, 2, [2]), 2: partition(2, -1, [])}
)


def test_describe_lines(capsys: pytest.CaptureFixture[str]) -> None:
    topic_views.describe_one("t", TOPIC, [], "X7yP", describe_args())
    assert capsys.readouterr().out.splitlines() == [
        "Topic: t\tTopicId: X7yP\tPartitionCount: 3\tReplicationFactor: 2\tConfigs: ",
        "\tTopic: t\tPartition: 0\tLeader: 1\tReplicas: 1,2\tIsr: 1,2",
        "\tTopic: t\tPartition: 1\tLeader: 2\tReplicas: 1,2\tIsr: 2",
        "\tTopic: t\tPartition: 2\tLeader: none\tReplicas: 1,2\tIsr: ",
    ]


def test_reports_print_only_their_partitions(capsys: pytest.CaptureFixture[str]) -> None:
    topic_views.describe_one("t", TOPIC, [], None, describe_args(under_replicated_partitions=True))
    assert [line.split("\tLeader")[0] for line in capsys.readouterr().out.splitlines()] == [
        "\tTopic: t\tPartition: 1",
        "\tTopic: t\tPartition: 2",
    ]
    topic_views.describe_one("t", TOPIC, [], None, describe_args(unavailable_partitions=True))
    assert capsys.readouterr().out.count("\n") == 1
    topic_views.describe_one("t", TOPIC, [], None, describe_args(topics_with_overrides=True))
    assert capsys.readouterr().out == ""  # no overrides: not shown


def test_min_isr_reports(capsys: pytest.CaptureFixture[str]) -> None:
    configs = [ConfigEntry("min.insync.replicas", "2", source=ConfigSource.DEFAULT_CONFIG)]
    topic_views.describe_one(
        "t", TOPIC, configs, None, describe_args(under_min_isr_partitions=True)
    )
    partitions = [line.split("\t")[2] for line in capsys.readouterr().out.splitlines()]
    assert partitions == ["Partition: 1", "Partition: 2"]  # one in sync, and no leader
    topic_views.describe_one("t", TOPIC, configs, None, describe_args(at_min_isr_partitions=True))
    assert [line.split("\t")[2] for line in capsys.readouterr().out.splitlines()] == [
        "Partition: 0"
    ]
    with pytest.raises(CliError, match=r"min\.insync\.replicas is unknown"):
        topic_views.describe_one(
            "t", TOPIC, "denied", None, describe_args(at_min_isr_partitions=True)
        )


def test_topic_ids_print_as_kafka_prints_them() -> None:
    # Kafka's Uuid text is URL-safe base64 (- and _), unpadded; librdkafka's uses + and /.
    assert topic_views.kafka_uuid(Uuid(-1, 5)) == "__________8AAAAAAAAABQ"
    assert topic_views.kafka_uuid(Uuid(0, 0)) == topic_views.ZERO_TOPIC_ID
