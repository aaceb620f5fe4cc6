"""`onceflow delete-records` (Kafka's JSON offsets file and the --topic form) and `onceflow
topics alter` (validated before anything is applied), without a broker."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from onceflow.cli import topics
from onceflow.cli.common import CliError
from onceflow.cli.delete_records import parse_offset_json
from onceflow.cli.main import build_parser, main


def test_kafkas_offsets_file() -> None:
    text = (
        '{"partitions": [{"topic": "a", "partition": 0, "offset": 5},'
        ' {"topic": "a", "partition": 1, "offset": -1}], "version": 1}'
    )
    assert parse_offset_json(text) == {("a", 0): 5, ("a", 1): -1}
    assert parse_offset_json('{"partitions": []}') == {}  # version 1 when absent


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "The input string is not a valid JSON"),
        ('{"partitions": [], "version": 2}', "Not supported version field value 2"),
        ('{"version": 1}', "Missing partitions field"),
        ('{"partitions": [{"topic": "a", "partition": 0}]}', "needs a topic, partition and offset"),
        ('{"partitions": [{"topic": "a", "partition": "0", "offset": 1}]}', "needs a topic"),
        (
            '{"partitions": [{"topic": "a", "partition": 0, "offset": 1},'
            ' {"topic": "a", "partition": 0, "offset": 2}]}',
            "Offset json file contains duplicate topic partitions: a-0",
        ),
    ],
)
def test_bad_offsets_files(text: str, message: str) -> None:
    with pytest.raises(CliError, match=message):
        parse_offset_json(text)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "give either --offset-json-file or --topic"),
        (["--topic", "t"], "--topic needs --offset"),
        (["--offset-json-file", "f", "--topic", "t", "--offset", "1"], "give either"),
        (["--offset-json-file", "f", "--offset", "1"], "go with --topic"),
        (["--topic", "t", "--offset", "-2"], "expected an offset >= 0, or -1"),
        (["--topic", "t", "--offset", "1", "--partition", "-1"], "expected an integer >= 0"),
    ],
)
def test_delete_records_usage(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(["delete-records", "--bootstrap-server", "127.0.0.1:1", *argv]) == 2
    assert message in capsys.readouterr().err


def test_a_bad_file_fails_before_connecting(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "offsets.json"
    path.write_text('{"partitions": [{"topic": "a", "partition": 0, "offset": 1}], "version": 3}')
    argv = ["delete-records", "--bootstrap-server", "127.0.0.1:1", "--offset-json-file"]
    assert main([*argv, str(path)]) == 1
    assert capsys.readouterr().err == "onceflow: error: Not supported version field value 3\n"
    assert main([*argv, str(tmp_path / "missing.json")]) == 1
    assert "cannot read" in capsys.readouterr().err


# --- topics alter -------------------------------------------------------------------------


def test_topics_alter_options() -> None:
    configs = ["--config", "retention.ms=1000", "--config", "cleanup.policy=compact,delete"]
    args = build_parser().parse_args(
        ["topics", "alter", "t", "--partitions", "6", *configs, "--delete-config", "segment.ms"]
    )
    assert (args.topic, args.partitions) == ("t", 6)
    assert args.config == [("retention.ms", "1000"), ("cleanup.policy", "compact,delete")]
    assert args.delete_config == ["segment.ms"]


def test_topics_alter_needs_a_change(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topics", "alter", "t"]) == 2
    assert "give --partitions, --config or --delete-config" in capsys.readouterr().err
    assert main(["topics", "alter", "t", "--partitions", "0"]) == 2


def failed(code: int, message: str) -> Future[Any]:
    future: Future[Any] = Future()
    future.set_exception(KafkaException(KafkaError(code, message)))
    return future


def done() -> Future[Any]:
    future: Future[Any] = Future()
    future.set_result(None)
    return future


class AlterAdmin:
    """Records each call; the config change is refused (INVALID_CONFIG)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, bool]] = []

    def create_partitions(self, new: list[Any], **kwargs: Any) -> dict[str, Future[Any]]:
        self.calls.append(("create_partitions", kwargs["validate_only"]))
        return {new[0].topic: done()}

    def incremental_alter_configs(self, resources: list[Any], **kwargs: Any) -> dict[Any, Any]:
        self.calls.append(("incremental_alter_configs", kwargs["validate_only"]))
        return {resources[0]: failed(40, "Invalid value 'x' for configuration retention.ms")}


def test_a_refused_config_adds_no_partitions(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    admin = AlterAdmin()
    monkeypatch.setattr(topics, "connect_admin", lambda args: admin)
    argv = ["topics", "alter", "t", "--partitions", "4", "--config", "retention.ms=x"]
    assert main(argv) == 1
    assert admin.calls == [("create_partitions", True), ("incremental_alter_configs", True)]
    assert capsys.readouterr().err == (
        "onceflow: error: cannot alter topic t: INVALID_CONFIG "
        "(Invalid value 'x' for configuration retention.ms)\n"
    )
