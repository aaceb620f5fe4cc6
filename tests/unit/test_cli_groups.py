"""`onceflow groups`: kafka-consumer-groups.sh's argument checks, the reset plan of every
scenario computed from given offsets, the CSV plan files, and the --describe layout."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupState, KafkaError, KafkaException, TopicPartition

from onceflow.cli.admin_errors import error_text
from onceflow.cli.common import CliError
from onceflow.cli.group_reset import (
    Scenario,
    Tp,
    export_csv,
    parse_datetime,
    parse_duration_ms,
    parse_reset_csv,
    parse_topic_arg,
    plan_offsets,
)
from onceflow.cli.group_views import Group, Offsets, print_offsets
from onceflow.cli.main import build_parser, main

JAN_1_2024_MS = 1_704_067_200_000


def usage_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["groups", "--bootstrap-server", "127.0.0.1:1", *argv]) == 2
    return capsys.readouterr().err


# --- argument checks (before any connection: the bootstrap server does not exist) ----------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "one of the arguments --list --describe --delete --reset-offsets --delete-offsets"),
        (["--list", "--describe"], "not allowed with argument"),
        (["--describe"], "Option --describe takes one of these options: --group, --all-groups"),
        (["--delete"], "Option --delete takes one of these options"),
        (["--describe", "--group", "g", "--all-groups"], "--group is not valid with --all-groups"),
        (["--list", "--group", "g"], "--group is not valid with --list"),
        (["--describe", "--group", "g", "--members", "--state"], "at most one of these"),
        (["--describe", "--group", "g", "--state", "stable"], "does not take a value"),
        (["--list", "--members"], "Option --members needs --describe"),
        (["--delete", "--group", "g", "--topic", "t"], "does not support topic-specific"),
        (["--describe", "--group", "g", "--all-topics"], "need --reset-offsets"),
        (["--list", "--to-earliest"], "need --reset-offsets"),
        (["--describe", "--all-groups", "--type"], "Option --type needs --list"),
        (["--reset-offsets", "--group", "g", "--topic", "t"], "requires one of the following"),
        (["--reset-offsets", "--group", "g", "--to-earliest"], "One of the reset scopes"),
        (
            ["--reset-offsets", "--group", "g", "--all-topics", "--to-earliest", "--to-latest"],
            "not allowed with argument",
        ),
        (
            [
                "--reset-offsets",
                "--all-groups",
                "--all-topics",
                "--to-earliest",
                "--dry-run",
                "--execute",
            ],
            "not allowed with argument",
        ),
        (
            ["--reset-offsets", "--group", "g", "--topic", "t", "--all-topics", "--to-latest"],
            "--topic is not valid with --all-topics",
        ),
        (["--reset-offsets", "--group", "g", "--all-topics", "--to-datetime", "2024-01-01"], "'T'"),
        (["--reset-offsets", "--group", "g", "--all-topics", "--by-duration", "1h"], "PT1H"),
        (["--reset-offsets", "--group", "g", "--all-topics", "--to-offset", "x"], "invalid int"),
        (["--list", "--state", "happy"], "Invalid state list 'happy'. Valid states are: "),
        (["--delete-offsets", "--group", "g"], "--delete-offsets takes the following options"),
        (["--delete-offsets", "--all-groups", "--topic", "t"], "takes the following options"),
        (["--delete-offsets", "--group", "g", "--topic", "t", "--all-topics"], "not valid"),
    ],
)
def test_kafka_checks_are_usage_errors(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert message in usage_error(capsys, *argv)


def test_the_commands_are_listed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    listed = capsys.readouterr().out
    assert "groups" in listed and "delete-records" in listed


def test_options_parse_as_kafka_names_them() -> None:
    scope = ["--group", "a", "--group", "b", "--topic", "t:0,2"]
    rest = ["--execute", "--timeout", "5000", "--command-config", "c.props"]
    args = build_parser().parse_args(
        ["groups", "--reset-offsets", *scope, "--shift-by", "-3", *rest]
    )
    assert (args.group, args.topic, args.shift_by, args.execute) == (
        ["a", "b"],
        ["t:0,2"],
        -3,
        True,
    )
    assert (args.timeout_ms, args.command_config, args.verbose) == (5000, "c.props", False)
    assert Scenario.from_args(args) == Scenario("shift_by", -3)
    describe = build_parser().parse_args(["groups", "--describe", "--all-groups", "--state"])
    assert describe.state == ""  # present without a value: the --state view
    members = build_parser().parse_args(["groups", "--describe", "--group", "g", "--members"])
    assert members.state is None and members.members


# --- values ---------------------------------------------------------------------------------


def test_datetimes_as_kafka_reads_them() -> None:
    assert parse_datetime("2024-01-01T00:00:00.000") == JAN_1_2024_MS  # no zone: UTC
    assert parse_datetime("2024-01-01T00:00:01.500Z") == JAN_1_2024_MS + 1500
    assert parse_datetime("2024-01-01T02:00:00.000+02:00") == JAN_1_2024_MS
    assert parse_datetime("2023-12-31T23:00:00.000-01:00") == JAN_1_2024_MS
    for bad in ("2024-01-01", "yesterdayT12", "2024-13-01T00:00:00"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_datetime(bad)


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("PT1H", 3_600_000),
        ("P1DT2H3M4.5S", 86_400_000 + 7_200_000 + 180_000 + 4_500),
        ("pt30m", 1_800_000),
        ("P2D", 172_800_000),
        ("-PT1M", -60_000),
        ("PT-1.5S", -1_500),
    ],
)
def test_durations_as_java_reads_them(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["1h", "P", "PT", "PT1X", "P1H"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_duration_ms(text)


def test_topic_arguments() -> None:
    assert parse_topic_arg("orders") == ("orders", None)
    assert parse_topic_arg("orders:0,2") == ("orders", [0, 2])
    for bad in ("orders:", "orders:x", ":1", "orders:-1"):
        with pytest.raises(CliError):
            parse_topic_arg(bad)


# --- the reset plan -------------------------------------------------------------------------


class FakeSource:
    """Log start 2 and end 10 on every partition; records at times 1000, 2000, ... from
    offset 2; committed offsets as given."""

    def __init__(self, committed: dict[Tp, int] | None = None) -> None:
        self._committed = committed or {}

    def earliest(self, partitions: Iterable[Tp]) -> dict[Tp, int]:
        return dict.fromkeys(partitions, 2)

    def latest(self, partitions: Iterable[Tp]) -> dict[Tp, int]:
        return dict.fromkeys(partitions, 10)

    def for_time(self, partitions: Iterable[Tp], timestamp_ms: int) -> dict[Tp, int]:
        offset = max(2, -(-timestamp_ms // 1000) + 1)  # the first record at or after
        return dict.fromkeys(partitions, offset if offset < 10 else -1)

    def committed(self, group: str) -> dict[Tp, int]:
        return dict(self._committed)


A0, A1 = ("a", 0), ("a", 1)


def plan(
    scenario: Scenario, source: FakeSource, now_ms: int = 0
) -> tuple[dict[Tp, int], list[str]]:
    warnings: list[str] = []
    result = plan_offsets(scenario, "g", [A0, A1], source, warnings.append, now_ms)
    return result, warnings


def test_earliest_and_latest() -> None:
    assert plan(Scenario("to_earliest"), FakeSource()) == ({A0: 2, A1: 2}, [])
    assert plan(Scenario("to_latest"), FakeSource()) == ({A0: 10, A1: 10}, [])


def test_to_offset_is_clamped_into_the_log_with_kafkas_warning() -> None:
    assert plan(Scenario("to_offset", 5), FakeSource()) == ({A0: 5, A1: 5}, [])
    high, warned = plan(Scenario("to_offset", 50), FakeSource())
    assert high == {A0: 10, A1: 10}
    assert warned[0] == (
        "New offset (50) is higher than latest offset for topic partition a-0. "
        "Value will be set to 10"
    )
    low, warned = plan(Scenario("to_offset", 0), FakeSource())
    assert low == {A0: 2, A1: 2}
    assert (
        "is lower than earliest offset for topic partition a-1. Value will be set to 2"
        in (warned[1])
    )


def test_shift_by_moves_the_committed_offsets_within_the_log() -> None:
    source = FakeSource({A0: 4, A1: 9})
    assert plan(Scenario("shift_by", -1), source) == ({A0: 3, A1: 8}, [])
    shifted, warned = plan(Scenario("shift_by", 3), source)
    assert shifted == {A0: 7, A1: 10} and len(warned) == 1
    assert plan(Scenario("shift_by", -5), source)[0] == {A0: 2, A1: 4}


def test_shift_by_needs_a_committed_offset_everywhere() -> None:
    with pytest.raises(CliError, match="Cannot shift offset for partition a-1 since there is"):
        plan(Scenario("shift_by", 1), FakeSource({A0: 4}))


def test_to_datetime_falls_back_to_the_end_where_no_record_is_that_recent() -> None:
    assert plan(Scenario("to_datetime", 3500), FakeSource()) == ({A0: 5, A1: 5}, [])
    late, warned = plan(Scenario("to_datetime", 99_000), FakeSource())
    assert late == {A0: 10, A1: 10}
    assert warned == [
        "Partition 0 from topic a is empty. Falling back to latest known offset.",
        "Partition 1 from topic a is empty. Falling back to latest known offset.",
    ]


def test_by_duration_counts_back_from_now() -> None:
    assert plan(Scenario("by_duration", 2000), FakeSource(), now_ms=6000)[0] == {A0: 5, A1: 5}


def test_to_current_keeps_commits_and_ends_the_rest() -> None:
    assert plan(Scenario("to_current"), FakeSource({A1: 4})) == ({A0: 10, A1: 4}, [])


def test_from_file_takes_the_groups_lines_clamped() -> None:
    offsets = {"g": {A0: 3, ("b", 0): 40}, "other": {A1: 1}}
    got, warned = plan(Scenario("from_file", plan=offsets), FakeSource())
    assert got == {A0: 3, ("b", 0): 10} and len(warned) == 1
    assert plan(Scenario("from_file", plan={"other": {A1: 1}}), FakeSource()) == (
        {},
        ["No reset plan for group g found"],
    )


def test_export_and_from_file_round_trip(tmp_path: Path) -> None:
    plans = {"g1": {("a", 1): 7, ("a", 0): 5}, "g2": {("b", 0): 0}}
    two = export_csv(plans, single_group=False)
    assert two == "g1,a,0,5\ng1,a,1,7\ng2,b,0,0\n"
    assert parse_reset_csv(two, ["g1", "g2"]) == plans
    one = export_csv({"g1": plans["g1"]}, single_group=True)
    assert one == "a,0,5\na,1,7\n"
    assert parse_reset_csv(one, ["g1"]) == {"g1": plans["g1"]}
    path = tmp_path / "plan.csv"
    path.write_text(one)
    args = build_parser().parse_args(
        ["groups", "--reset-offsets", "--group", "g1", "--from-file", str(path)]
    )
    assert Scenario.from_args(args) == Scenario("from_file", plan={"g1": plans["g1"]})
    with pytest.raises(CliError, match="line 2"):
        parse_reset_csv("a,0,5\na,zero,7\n", ["g1"])
    with pytest.raises(CliError, match="expected group,topic,partition,offset"):
        parse_reset_csv("a,0,5\n", ["g1", "g2"])


# --- errors and layout ------------------------------------------------------------------------


def test_broker_errors_read_with_kafkas_names() -> None:
    assert error_text(KafkaException(KafkaError(68))) == "NON_EMPTY_GROUP (The group is not empty)"
    unknown = KafkaException(KafkaError(3, "no topic 'x'"))
    assert error_text(unknown) == "UNKNOWN_TOPIC_OR_PARTITION (no topic 'x')"
    assert error_text(KafkaException(KafkaError(KafkaError._TIMED_OUT))) == "Local: Timed out"


class FakeReader:
    def committed(self, group: str) -> dict[Tp, int]:
        return {("t", 0): 4, ("t", 1): 7, ("u", 0): 1}

    def log_end_offsets(self, partitions: Iterable[Tp]) -> Offsets:
        ends: Offsets = {("t", 0): 10, ("t", 1): 7, ("t", 2): 3, ("u", 0): "NOT_LEADER"}
        return {tp: ends[tp] for tp in partitions}


def member(member_id: str, partitions: list[Tp], host: str = "/10.0.0.1") -> Any:
    tps = [TopicPartition(t, p) for t, p in partitions]
    return SimpleNamespace(
        member_id=member_id,
        client_id="app",
        host=host,
        group_instance_id=None,
        assignment=SimpleNamespace(topic_partitions=tps),
    )


def test_describe_offsets_lays_out_kafkas_columns(capsys: pytest.CaptureFixture[str]) -> None:
    description = SimpleNamespace(
        state=ConsumerGroupState.STABLE,
        members=[member("m-small", [("t", 2)], host=""), member("m-big", [("t", 1), ("t", 0)])],
    )
    assert print_offsets([Group("g", description)], FakeReader()) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == ""
    assert lines[1].split() == [
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
    ]
    # The member with the most partitions first; then committed partitions no one owns.
    assert [line.split() for line in lines[2:]] == [
        ["g", "t", "0", "4", "10", "6", "m-big", "/10.0.0.1", "app"],
        ["g", "t", "1", "7", "7", "0", "m-big", "/10.0.0.1", "app"],
        ["g", "t", "2", "-", "3", "-", "m-small", "-", "app"],
        ["g", "u", "0", "1", "-", "-", "-", "-", "-"],
    ]
    assert lines[1].index("PARTITION") == 32 and lines[1].index("CURRENT-OFFSET") == 43


def test_describe_says_why_a_group_has_no_table(capsys: pytest.CaptureFixture[str]) -> None:
    empty = SimpleNamespace(state=ConsumerGroupState.EMPTY, members=[])
    groups = [
        Group("idle", empty),
        Group("gone", None, state=ConsumerGroupState.DEAD),
        Group("secret", None, error="GROUP_AUTHORIZATION_FAILED"),
    ]
    assert print_offsets(groups, FakeReader()) == 1
    captured = capsys.readouterr()
    assert "Consumer group 'idle' has no active members." in captured.err
    assert "Error: Consumer group 'gone' does not exist." in captured.err
    assert "GROUP_AUTHORIZATION_FAILED" in captured.err
    assert [line.split()[:2] for line in captured.out.split("\n")[2:] if line] == [
        ["idle", "t"],
        ["idle", "t"],
        ["idle", "u"],
    ]
