"""The CLI's Kafka tool syntax: each Kafka form and its older alias parse to the same request,
mistakes get one line saying what to type instead, and `--version` answers.
"""

from __future__ import annotations

import argparse

import pytest

from onceflow.cli.add_config import parse_add_config
from onceflow.cli.line_reader import LineReader
from onceflow.cli.main import build_parser, main, version
from onceflow.cli.record_formatter import RecordFormatter


def same_request(kafka: list[str], alias: list[str]) -> argparse.Namespace:
    """Both forms parsed by one parser (so the parsers' identities match too)."""
    parser = build_parser()
    parsed = parser.parse_args(kafka)
    assert parsed == parser.parse_args(alias)
    return parsed


def one_line_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1, err
    return err.rstrip("\n")


# --- the same request from either form --------------------------------------------------------


@pytest.mark.parametrize(
    ("kafka", "alias"),
    [
        (
            ["topics", "--create", "--topic", "orders", "--partitions", "2", "--config", "a=b"],
            ["topics", "create", "orders", "--partitions", "2", "--config", "a=b"],
        ),
        (["topics", "--list", "--exclude-internal"], ["topics", "list", "--exclude-internal"]),
        (
            ["topics", "--describe", "--topic", "a", "--topic", "b"],
            ["topics", "describe", "a", "b"],
        ),
        (["topics", "--describe"], ["topics", "describe"]),
        (
            ["topics", "--alter", "--topic", "t", "--delete-config", "retention.ms"],
            ["topics", "alter", "--delete-config", "retention.ms", "t"],
        ),
        (
            ["topics", "--delete", "--topic", "a", "--if-exists"],
            ["topics", "delete", "a", "--if-exists"],
        ),
        (
            [
                "produce",
                "--topic",
                "t",
                "--property",
                "parse.key=true",
                "--property",
                "key.separator=:",
                "--request-required-acks",
                "all",
                "--producer-property",
                "linger.ms=5",
            ],
            ["produce", "t", "--key-separator", ":", "--acks", "all", "--property", "linger.ms=5"],
        ),
        (
            [
                "consume",
                "--topic",
                "t",
                "--from-beginning",
                "--property",
                "print.key=true",
                "--property",
                "print.offset=true",
                "--property",
                "key.separator=|",
                "--consumer-property",
                "fetch.min.bytes=7",
            ],
            [
                "consume",
                "t",
                "--from-beginning",
                "--print-key",
                "--print-offset",
                "--key-separator",
                "|",
                "--property",
                "fetch.min.bytes=7",
            ],
        ),
        (
            ["produce", "--topic", "t", "--bootstrap-server", "b:1", "--command-config", "f"],
            ["produce", "--topic", "t", "--broker-list", "b:1", "--producer.config", "f"],
        ),
        (
            ["consume", "--topic", "t", "--command-config", "f"],
            ["consume", "--topic", "t", "--consumer.config", "f"],
        ),
        (["dump-log", "--files", "a.log,b.index"], ["dump-log", "a.log", "b.index"]),
        (["consume", "--include", "o.*"], ["consume", "--whitelist", "o.*"]),
        (
            ["serve", "server.properties", "--override", "node.id=2"],
            ["serve", "--config", "server.properties", "--override", "node.id=2"],
        ),
        (
            ["configs", "--entity-type", "topics", "--entity-name", "t", "--describe"],
            ["configs", "--topic", "t", "--describe"],
        ),
        (
            [
                "configs",
                "--entity-type",
                "brokers",
                "--entity-default",
                "--alter",
                "--delete-config",
                "a",
            ],
            ["configs", "--broker-defaults", "--alter", "--delete-config", "a"],
        ),
        (
            ["configs", "--entity-type", "users", "--entity-name", "alice", "--describe"],
            ["users", "--entity-type", "users", "--entity-name", "alice", "--describe"],
        ),
        (
            ["transactions", "--bootstrap-server", "b:1", "list"],
            ["transactions", "list", "--bootstrap-server", "b:1"],
        ),
    ],
)
def test_kafka_form_and_alias_give_the_same_request(kafka: list[str], alias: list[str]) -> None:
    same_request(kafka, alias)


def test_topics_kafka_form_fields() -> None:
    args = build_parser().parse_args(["topics", "--create", "--topic", "o", "--partitions", "3"])
    assert (args.topics_command, args.topic, args.topics, args.partitions) == (
        "create",
        "o",
        ["o"],
        3,
    )


def test_produce_kafka_form_fields() -> None:
    args = build_parser().parse_args(
        ["produce", "--topic", "t", "--property", "parse.key=true", "--compression-codec"]
    )
    assert args.topic == "t"
    assert args.key_separator == "\t"  # Kafka's default key.separator
    assert args.property == [("compression.codec", "gzip")]
    assert args.line_reader == LineReader(parse_key=True)


def test_consume_kafka_form_fields() -> None:
    args = build_parser().parse_args(
        ["consume", "--topic", "t", "--property", "print.timestamp=true", "--partition", "0"]
    )
    assert (args.topic, args.partition, args.print_timestamp) == ("t", 0, True)
    assert args.formatter == RecordFormatter(print_timestamp=True)
    assert args.property == []


def test_kafka_configs_add_config_syntax() -> None:
    assert parse_add_config("a=1,b=[x,y],c=") == {"a": "1", "b": "x,y", "c": ""}
    args = build_parser().parse_args(
        ["configs", "--broker", "1", "--alter", "--add-config", "log.cleaner.threads=2"]
    )
    assert (args.entity_type, args.entity_name, args.alter) == ("brokers", "1", True)


# --- one line for a mistake -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["topics", "--create", "--topic", "t", "--replica-assignment", "1:2"],
            "onceflow: error: --replica-assignment is a kafka-topics.sh option Onceflow does "
            "not support; the broker places replicas; give --replication-factor",
        ),
        (
            ["consume", "--topic", "t", "--formatter", "kafka.tools.DefaultMessageFormatter"],
            "onceflow: error: --formatter is a kafka-console-consumer.sh option Onceflow does "
            "not support; the default formatter's --property print.* keys are supported",
        ),
        (
            ["produce", "--topic", "t", "--line-reader=x"],
            "onceflow: error: --line-reader is a kafka-console-producer.sh option Onceflow "
            "does not support; the line reader's --property keys are supported",
        ),
        (
            ["topics", "--create", "--topic", "t", "--partitons", "2"],
            "onceflow: error: unknown option --partitons; did you mean --partitions?",
        ),
        (
            ["consume", "--topic", "t", "--form-beginning"],
            "onceflow: error: unknown option --form-beginning; did you mean --from-beginning?",
        ),
        (
            ["groups", "--lst"],
            "onceflow: error: unknown option --lst; did you mean --list?",
        ),
        (["topcs", "--list"], "onceflow: error: unknown command 'topcs'; did you mean 'topics'?"),
        (
            ["kafka-topics.sh", "--list"],
            "onceflow: error: kafka-topics.sh is `onceflow topics` here",
        ),
        (
            ["transactions", "lst"],
            "onceflow: error: unknown transactions action 'lst'; did you mean 'list'?",
        ),
        (
            ["topics", "--list", "--partitions", "3"],
            "onceflow topics: error: --partitions goes with --create or --alter, not --list",
        ),
        (["topics", "--create"], "onceflow topics: error: --create needs one --topic"),
        (
            [
                "produce",
                "--topic",
                "t",
                "--property",
                "parse.headers=true",
                "--property",
                "headers.separator=:",
            ],
            "onceflow produce: error: --property: headers.separator and headers.key.separator "
            "may not be equal",
        ),
        (["dump-log"], "onceflow dump-log: error: give --files PATH[,PATH...]"),
        (["consume"], "onceflow consume: error: give --topic or --include (one of them)"),
        (
            ["consume", "--topic", "t", "--include", "t.*"],
            "onceflow consume: error: give --topic or --include (one of them)",
        ),
        (
            ["consume", "--include", "t.*", "--partition", "0"],
            "onceflow consume: error: --partition goes with --topic, not --include",
        ),
        (
            ["configs", "--describe"],
            "onceflow configs: error: give --entity-type topics|brokers|users|clients (or --topic, "
            "--broker, --client)",
        ),
        (
            ["configs", "--topic", "t", "--alter"],
            "onceflow configs: error: --alter needs --add-config, --add-config-file or "
            "--delete-config",
        ),
        (
            ["configs", "--describe", "--client-metrics", "c"],
            "onceflow: error: --client-metrics is a kafka-configs.sh option Onceflow does not "
            "support",
        ),
    ],
)
def test_mistakes_get_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    assert one_line_error(capsys, *argv) == expected


def test_negative_values_are_not_options() -> None:
    args = build_parser().parse_args(["delete-records", "--topic", "t", "--offset", "-1"])
    assert args.offset == -1


def test_an_abbreviated_option_is_no_mistake() -> None:
    args = build_parser().parse_args(["topics", "--create", "--topic", "t", "--partit", "2"])
    assert args.partitions == 2


# --- --version ------------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [["--version"], ["topics", "--version"]])
def test_version(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out == f"onceflow {version()}\n"
    assert version() != "unknown"  # the package is installed with its metadata


def test_help_leads_with_kafka_form(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topics", "--help"]) == 0
    out = capsys.readouterr().out
    assert "(--create | --list | --describe | --alter | --delete)" in out
    assert main(["consume", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--property KEY=VALUE" in out and "--consumer-property" in out
    assert "--print-key" not in out.split("Also accepted")[0]
