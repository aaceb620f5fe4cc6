"""The `onceflow` command line: argument parsing of every command, and serve's config.

Usage errors must keep argparse's exit code 2, user errors exit 1 with one line on stderr,
and `serve` must let each named option override the same key from the config file.
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from onceflow.cli import serve
from onceflow.cli.main import build_parser, main
from onceflow.config import BrokerConfig, Listener


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def usage_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run main, expect exit 2, return stderr."""
    assert main(list(argv)) == 2
    return capsys.readouterr().err


# --- top level ------------------------------------------------------------------------------


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in ("serve", "topics", "produce", "consume", "dump-log", "bench", "acls", "users"):
        assert command in out


def test_missing_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert "required" in usage_error(capsys)


def test_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert "invalid choice" in usage_error(capsys, "frobnicate")


def test_runs_as_a_module() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "onceflow.cli.main", "dump-log", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0
    assert "--print-data-log" in done.stdout


# --- serve ----------------------------------------------------------------------------------


def test_serve_options() -> None:
    args = parse(
        "serve",
        "--config",
        "server.properties",
        "--data-dir",
        "/var/data",
        "--listener",
        "0.0.0.0:9093",
        "--advertised-listener",
        "broker.example:9093",
        "--node-id",
        "4",
        "--override",
        "num.partitions=3",
        "--override",
        "log.retention.ms=a=b",
    )
    assert args.config == "server.properties"
    assert args.override == [("num.partitions", "3"), ("log.retention.ms", "a=b")]
    assert serve.serve_overrides(args) == {
        "num.partitions": "3",
        "log.retention.ms": "a=b",
        "log.dirs": "/var/data",
        "listeners": "0.0.0.0:9093",
        "advertised.listeners": "broker.example:9093",
        "node.id": "4",
    }


def test_serve_defaults_set_no_keys() -> None:
    args = parse("serve")
    assert args.config is None
    assert serve.serve_overrides(args) == {}


@pytest.mark.parametrize(
    "argv",
    [
        ["serve", "--listener", "no-port"],
        ["serve", "--listener", "host:99999"],
        ["serve", "--listener", "::1:9092"],
        ["serve", "--advertised-listener", "host:"],
        ["serve", "--node-id", "-1"],
        ["serve", "--node-id", "one"],
        ["serve", "--override", "novalue"],
        ["serve", "--override", "=x"],
    ],
)
def test_serve_bad_options(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    assert "error" in usage_error(capsys, *argv)


def test_ipv6_listener_in_brackets() -> None:
    assert parse("serve", "--listener", "[::1]:9092").listener == "[::1]:9092"


def test_named_options_override_file_and_overrides(tmp_path: Path) -> None:
    config_file = tmp_path / "server.properties"
    config_file.write_text(
        "node.id=5\nlog.dirs=/from/file\nlisteners=PLAINTEXT://127.0.0.1:9000\nnum.partitions=2\n"
    )
    args = parse(
        "serve",
        "--config",
        str(config_file),
        "--node-id",
        "7",
        "--data-dir",
        str(tmp_path / "data"),
        "--listener",
        "127.0.0.1:0",
        "--override",
        "node.id=9",  # the named option wins over the generic override
        "--override",
        "num.partitions=6",
    )
    config, warnings = serve.build_serve_config(args)
    assert warnings == []
    assert config.node_id == 7
    assert config.log_dirs == (str(tmp_path / "data"),)
    assert config.listeners == (Listener("127.0.0.1", 0),)
    assert config.num_partitions == 6


def test_file_values_stay_when_not_overridden(tmp_path: Path) -> None:
    config_file = tmp_path / "server.properties"
    config_file.write_text("node.id=5\nlog.dirs=/from/file\n")
    config, _ = serve.build_serve_config(parse("serve", "--config", str(config_file)))
    assert config.node_id == 5
    assert config.log_dirs == ("/from/file",)


def test_advertised_listener(tmp_path: Path) -> None:
    args = parse("serve", "--data-dir", str(tmp_path), "--advertised-listener", "example:9094")
    config, _ = serve.build_serve_config(args)
    assert config.advertised_listeners == (Listener("example", 9094),)


@pytest.fixture
def fake_serve(monkeypatch: pytest.MonkeyPatch) -> list[BrokerConfig]:
    """Replace the broker's serve() so `onceflow serve` returns at once."""
    import onceflow.broker.app

    calls: list[BrokerConfig] = []

    def fake(config: BrokerConfig) -> int:
        calls.append(config)
        return 3

    monkeypatch.setattr(onceflow.broker.app, "serve", fake)
    return calls


def test_serve_passes_config_and_exit_code(fake_serve: list[BrokerConfig], tmp_path: Path) -> None:
    assert main(["serve", "--data-dir", str(tmp_path), "--node-id", "2"]) == 3
    assert [c.node_id for c in fake_serve] == [2]
    assert fake_serve[0].log_dirs == (str(tmp_path),)


def test_serve_bad_value_is_one_line(
    fake_serve: list[BrokerConfig], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--override", "num.partitions=zero"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("onceflow: error: ") and "num.partitions" in err
    assert err.count("\n") == 1
    assert fake_serve == []


def test_serve_missing_config_file(
    fake_serve: list[BrokerConfig], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["serve", "--config", str(tmp_path / "missing.properties")]) == 1
    err = capsys.readouterr().err
    assert "missing.properties" in err and "Traceback" not in err
    assert fake_serve == []


def test_serve_logs_unknown_keys_as_warnings(
    fake_serve: list[BrokerConfig], caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    with caplog.at_level(logging.WARNING):
        assert main(["serve", "--data-dir", str(tmp_path), "--override", "no.such.key=1"]) == 3
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert any("no.such.key" in r.getMessage() for r in warnings)


# --- topics ---------------------------------------------------------------------------------


def test_topics_create_options() -> None:
    args = parse(
        "topics",
        "create",
        "orders",
        "--partitions",
        "3",
        "--config",
        "retention.ms=1000",
        "--config",
        "cleanup.policy=compact",
        "--bootstrap-server",
        "b:1",
    )
    assert (args.topic, args.partitions, args.replication_factor) == ("orders", 3, None)
    assert args.config == [("retention.ms", "1000"), ("cleanup.policy", "compact")]
    assert args.bootstrap_server == "b:1"
    assert not args.if_not_exists


def test_topics_defaults() -> None:
    args = parse("topics", "list")
    assert args.bootstrap_server == "127.0.0.1:9092"
    assert args.timeout_ms == 30_000
    assert not args.exclude_internal
    assert parse("topics", "create", "t").partitions is None
    assert parse("topics", "describe").topics == []
    assert parse("topics", "describe", "a", "b", "--all-configs").topics == ["a", "b"]
    assert parse("topics", "delete", "a", "--if-exists").topics == ["a"]


@pytest.mark.parametrize(
    "argv",
    [
        ["topics"],
        ["topics", "create"],
        ["topics", "create", "t", "--partitions", "0"],
        ["topics", "create", "t", "--replication-factor", "x"],
        ["topics", "create", "t", "--config", "retention.ms"],
        ["topics", "delete"],
        ["topics", "rename", "a"],
    ],
)
def test_topics_bad_arguments(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    usage_error(capsys, *argv)


# --- produce --------------------------------------------------------------------------------


def test_produce_options() -> None:
    args = parse(
        "produce",
        "t",
        "--key-separator",
        ":",
        "--acks",
        "-1",
        "--partition",
        "2",
        "--property",
        "linger.ms=5",
        "--property",
        "compression.type=lz4",
    )
    assert (args.topic, args.key_separator, args.acks, args.partition) == ("t", ":", "-1", 2)
    assert args.property == [("linger.ms", "5"), ("compression.type", "lz4")]


def test_produce_defaults() -> None:
    args = parse("produce", "t")
    assert (args.key_separator, args.acks, args.partition, args.property) == (None, None, None, [])


@pytest.mark.parametrize(
    "argv",
    [["produce"], ["produce", "t", "--acks", "2"], ["produce", "t", "--partition", "-1"]],
)
def test_produce_bad_arguments(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    usage_error(capsys, *argv)


# --- consume --------------------------------------------------------------------------------


def test_consume_options() -> None:
    args = parse(
        "consume",
        "t",
        "--partition",
        "1",
        "--offset",
        "5",
        "--group",
        "g",
        "--isolation-level",
        "read_committed",
        "--max-messages",
        "10",
        "--timeout-ms",
        "2000",
        "--print-key",
        "--print-partition",
        "--print-offset",
        "--key-separator",
        "|",
    )
    assert (args.partition, args.offset, args.group) == (1, "5", "g")
    assert (args.isolation_level, args.max_messages, args.timeout_ms) == (
        "read_committed",
        10,
        2000,
    )
    assert args.print_key and args.print_partition and args.print_offset
    assert args.key_separator == "|"


def test_consume_defaults_match_the_console_consumer() -> None:
    args = parse("consume", "t")
    assert args.isolation_level == "read_uncommitted"
    assert args.key_separator == "\t"
    assert not args.from_beginning
    assert (args.group, args.max_messages, args.timeout_ms) == (None, None, None)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["consume", "t", "--offset", "3"], "--offset needs --partition"),
        (["consume", "t", "--partition", "0", "--offset", "x"], "--offset must be"),
        (["consume", "t", "--partition", "0", "--offset", "-3"], "--offset must be"),
        (["consume", "t", "--partition", "0", "--offset", "3", "--from-beginning"], "combined"),
        (["consume", "t", "--isolation-level", "dirty"], "invalid choice"),
        (["consume", "t", "--max-messages", "0"], ">= 1"),
    ],
)
def test_consume_bad_arguments(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    err = usage_error(capsys, *argv)
    assert message in err
    assert err.startswith("usage: onceflow consume")


# --- dump-log -------------------------------------------------------------------------------


def test_dump_log_options() -> None:
    args = parse("dump-log", "a.log", "b.index", "--print-data-log", "--verify-crc")
    assert args.paths == ["a.log", "b.index"]
    assert args.print_data_log and args.verify_crc
    plain = parse("dump-log", "a.log")
    assert not plain.print_data_log and not plain.verify_crc


def test_dump_log_needs_a_path(capsys: pytest.CaptureFixture[str]) -> None:
    usage_error(capsys, "dump-log")


# --- bench ----------------------------------------------------------------------------------


def test_bench_options() -> None:
    args = parse(
        "bench",
        "--bootstrap-server",
        "kafka:9092",
        "--messages",
        "1000",
        "--value-bytes",
        "100",
        "--repeat",
        "5",
        "--only",
        "latency, produce",
        "--latency-rate",
        "300",
        "--latency-seconds",
        "0.5",
        "--json",
        "out.json",
    )
    assert args.bootstrap_server == "kafka:9092"
    assert (args.messages, args.value_bytes, args.repeat) == (1000, 100, 5)
    assert args.only == ["latency", "produce"]
    assert (args.latency_rate, args.latency_seconds, args.json) == (300, 0.5, "out.json")


def test_bench_defaults() -> None:
    args = parse("bench")
    assert args.bootstrap_server == "127.0.0.1:9092"
    assert (args.messages, args.value_bytes, args.repeat) == (200_000, 1024, 3)
    assert args.only == ["produce", "transactional", "consume", "latency"]
    assert (args.latency_rate, args.latency_seconds, args.json) == (2000, 3.0, None)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bench", "--only", "produce,bogus"], "unknown section 'bogus'"),
        (["bench", "--only", ""], "unknown section ''"),
        (["bench", "--only", "produce,"], "unknown section ''"),
        (["bench", "--messages", "0"], ">= 1"),
        (["bench", "--value-bytes", "-5"], ">= 1"),
        (["bench", "--repeat", "0"], ">= 1"),
        (["bench", "--latency-rate", "0"], ">= 1"),
        (["bench", "--latency-seconds", "0"], "> 0"),
        (["bench", "--latency-seconds", "-1"], "> 0"),
        (["bench", "--latency-seconds", "nan"], "> 0"),
        (["bench", "--latency-seconds", "soon"], "expected a number"),
        # Checked before connecting, so no broker is needed: fewer than one latency record.
        (["bench", "--latency-rate", "1", "--latency-seconds", "0.5"], "at least one message"),
    ],
)
def test_bench_bad_arguments(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    err = usage_error(capsys, *argv)
    assert message in err
    assert err.startswith("usage: onceflow bench")
