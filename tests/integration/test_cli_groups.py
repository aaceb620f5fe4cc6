"""`onceflow groups` against a broker process, as kafka-consumer-groups.sh is used: lag of
what was produced and consumed, the members and state views, every reset form as a dry run
(nothing changes) and executed (the offsets move, and the group's next consumer starts
there), Kafka's refusals for a group that still has members, and offsets deleted of topics
the group no longer consumes."""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition

from onceflow.cli.main import main
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import (
    OP_TIMEOUT_S,
    admin_client,
    consume_until,
    consumer,
    create_topic,
    produce_and_confirm,
    producer,
    topic_name,
)

Result = tuple[int, str, str]
MINUTE_MS = 60_000


def group_name() -> str:
    return f"cli-g-{uuid.uuid4().hex[:8]}"


def groups(capsys: pytest.CaptureFixture[str], bootstrap: str, *argv: str) -> Result:
    capsys.readouterr()
    code = main(["groups", "--bootstrap-server", bootstrap, *argv])
    out, err = capsys.readouterr()
    return code, out, err


def rows(out: str) -> list[list[str]]:
    """A table's rows below its header, split on whitespace as a script would split them."""
    lines = [line.split() for line in out.splitlines() if line.strip()]
    return [line for line in lines if line[0] != "GROUP"]


def statuses(out: str) -> list[list[str]]:
    """--delete-offsets' rows below its TOPIC PARTITION STATUS header."""
    lines = [line.split() for line in out.splitlines() if line.strip()]
    return lines[[line[0] for line in lines].index("TOPIC") + 1 :]


def committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    admin = admin_client(bootstrap)
    request = [ConsumerGroupTopicPartitions(group)]
    result = admin.list_consumer_group_offsets(request, request_timeout=OP_TIMEOUT_S)
    answer = result[group].result(OP_TIMEOUT_S)
    return {(tp.topic, tp.partition): tp.offset for tp in answer.topic_partitions}


def member_of(bootstrap: str, group: str, topic: str) -> Consumer:
    """A subscribed member; it joins at its first polls (which also fetch)."""
    c = consumer(bootstrap, group)
    c.subscribe([topic])
    return c


def fill(bootstrap: str, topic: str, counts: list[int]) -> None:
    records = [(p, None, f"{p}-{i}".encode(), None) for p, n in enumerate(counts) for i in range(n)]
    assert not produce_and_confirm(producer(bootstrap), topic, records).errors


def commit_as_consumed(
    bootstrap: str, group: str, topic: str, consumed: list[int], stay: bool = False
) -> Consumer | None:
    """A member reads every record, commits the first `consumed[p]` of each partition as
    processed, and leaves (the group is then Empty) unless `stay`."""
    c = member_of(bootstrap, group, topic)
    total = sum(end for end in ends(bootstrap, topic, len(consumed)).values())
    consume_until(c, lambda got: len(got) >= total)
    c.commit(
        offsets=[TopicPartition(topic, p, n) for p, n in enumerate(consumed)], asynchronous=False
    )
    if stay:
        return c
    c.close()
    return None


def ends(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    c = consumer(bootstrap)
    try:
        marks = {
            p: c.get_watermark_offsets(TopicPartition(topic, p), OP_TIMEOUT_S)
            for p in range(partitions)
        }
    finally:
        c.close()
    return {p: high for p, (_, high) in marks.items()}


@pytest.fixture
def bootstrap(shared_broker: BrokerProcess) -> Iterator[str]:
    yield shared_broker.bootstrap


def test_describe_shows_the_lag_of_what_was_produced_and_consumed(
    capsys: pytest.CaptureFixture[str], bootstrap: str
) -> None:
    topic = create_topic(bootstrap, topic_name("lag"), partitions=3)
    group = group_name()
    fill(bootstrap, topic, [10, 20, 30])
    member = commit_as_consumed(bootstrap, group, topic, [4, 15, 30], stay=True)
    assert member is not None
    try:
        code, out, err = groups(capsys, bootstrap, "--describe", "--group", group)
        assert (code, err) == (0, "")
        header = out.splitlines()[1].split()
        assert header == [
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
        member_id = member.memberid()
        assert [r[:7] for r in rows(out)] == [
            [group, topic, "0", "4", "10", "6", member_id],
            [group, topic, "1", "15", "20", "5", member_id],
            [group, topic, "2", "30", "30", "0", member_id],
        ]
        assert all(r[8] == "rdkafka" for r in rows(out))  # librdkafka's default client.id

        code, out, _ = groups(capsys, bootstrap, "--describe", "--group", group, "--members")
        assert code == 0 and [r[0:2] + r[-1:] for r in rows(out)] == [[group, member_id, "3"]]
        code, out, _ = groups(
            capsys, bootstrap, "--describe", "--group", group, "--members", "--verbose"
        )
        assert code == 0 and rows(out)[0][-2:] == ["3", f"{topic}(0,1,2)"]
        code, out, _ = groups(capsys, bootstrap, "--describe", "--group", group, "--state")
        state = rows(out)[0]
        assert code == 0 and (state[0], state[-3:]) == (group, ["range", "Stable", "1"])

        code, out, _ = groups(capsys, bootstrap, "--list")
        assert code == 0 and group in out.split()
        code, out, _ = groups(capsys, bootstrap, "--list", "--state", "stable")
        assert code == 0 and [group, "Stable"] in rows(out)
        code, out, _ = groups(capsys, bootstrap, "--list", "--state", "Empty")
        assert code == 0 and group not in out.split()
    finally:
        member.close()

    # Without members the committed offsets stay, owned by no one.
    code, out, err = groups(capsys, bootstrap, "--describe", "--group", group)
    assert code == 0
    assert f"Consumer group '{group}' has no active members." in err
    assert [r[3:] for r in rows(out)] == [
        ["4", "10", "6", "-", "-", "-"],
        ["15", "20", "5", "-", "-", "-"],
        ["30", "30", "0", "-", "-", "-"],
    ]
    code, out, _ = groups(capsys, bootstrap, "--list", "--state", "empty", "--type")
    assert code == 0 and [group, "Classic", "Empty"] in rows(out)


def iso(ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}"


def test_every_reset_form_dry_run_then_execute(
    capsys: pytest.CaptureFixture[str], bootstrap: str
) -> None:
    topic = create_topic(bootstrap, topic_name("reset"), partitions=2)
    group = group_name()
    # Record i of each partition written (CreateTime) 100 - 10 i minutes ago.
    now_ms = int(time.time() * 1000)
    stamps = [now_ms - (10 - i) * 10 * MINUTE_MS for i in range(10)]
    p = producer(bootstrap)
    for partition in (0, 1):
        for i, stamp in enumerate(stamps):
            p.produce(topic, f"{i}".encode(), partition=partition, timestamp=stamp)
    assert p.flush(OP_TIMEOUT_S) == 0
    commit_as_consumed(bootstrap, group, topic, [5, 5])
    scope = ["--reset-offsets", "--group", group, "--topic", topic]

    steps = [
        (["--to-earliest"], 0),
        (["--to-latest"], 10),
        (["--to-offset", "3"], 3),
        (["--shift-by", "4"], 7),
        (["--to-datetime", iso(stamps[3] + 5 * MINUTE_MS)], 4),  # between records 3 and 4
        (["--by-duration", "PT35M"], 7),  # between records 6 (40 min ago) and 7 (30)
        (["--shift-by", "-9"], 0),  # clamped to the log start, with Kafka's warning
        (["--to-current"], 0),
    ]
    before = {(topic, 0): 5, (topic, 1): 5}
    for scenario, expected in steps:
        plan = [[group, topic, "0", str(expected)], [group, topic, "1", str(expected)]]
        for mode in ([], ["--dry-run"]):
            code, out, err = groups(capsys, bootstrap, *scope, *scenario, *mode)
            assert code == 0, err
            assert rows(out) == plan, scenario
            assert ("--execute option is missing" in err) == (not mode)
            assert committed(bootstrap, group) == before, f"{scenario} {mode} changed offsets"
        code, out, err = groups(capsys, bootstrap, *scope, *scenario, "--execute")
        assert code == 0 and rows(out) == plan, err
        if scenario[0] == "--shift-by" and expected == 0:
            assert (
                f"New offset (-2) is lower than earliest offset for topic partition {topic}-0"
                in err
            )
        before = {(topic, 0): expected, (topic, 1): expected}
        assert committed(bootstrap, group) == before, scenario

    # The next consumer of the group starts at the reset offsets.
    code, _, _ = groups(capsys, bootstrap, *scope, "--to-offset", "6", "--execute")
    assert code == 0
    c = member_of(bootstrap, group, topic)
    try:
        got = consume_until(c, lambda msgs: len(msgs) >= 8)
    finally:
        c.close()
    first = {m.partition(): m.offset() for m in reversed(got)}
    assert first == {0: 6, 1: 6}
    assert sorted(m.value() for m in got) == [b"6", b"6", b"7", b"7", b"8", b"8", b"9", b"9"]


def test_a_group_with_members_is_neither_reset_nor_deleted(
    capsys: pytest.CaptureFixture[str], bootstrap: str
) -> None:
    topic = create_topic(bootstrap, topic_name("busy"), partitions=1)
    group = group_name()
    fill(bootstrap, topic, [5])
    member = commit_as_consumed(bootstrap, group, topic, [5], stay=True)
    assert member is not None
    try:
        code, out, err = groups(
            capsys,
            bootstrap,
            *f"--reset-offsets --group {group} --all-topics --to-earliest --execute".split(),
        )
        assert (code, out.strip()) == (1, "")
        assert (
            f"Error: Assignments can only be reset if the group '{group}' is inactive, but the "
            "current state is Stable." in err
        )
        assert committed(bootstrap, group) == {(topic, 0): 5}

        code, out, err = groups(capsys, bootstrap, "--delete", "--group", group)
        assert code == 1
        assert err == (
            "Error: Deletion of some consumer groups failed:\n"
            f"* Group '{group}' could not be deleted due to: NON_EMPTY_GROUP "
            "(The group is not empty)\n"
        )
    finally:
        member.close()

    code, out, err = groups(capsys, bootstrap, "--delete", "--group", group)
    assert (code, out, err) == (
        0,
        f"Deletion of requested consumer groups ('{group}') was successful.\n",
        "",
    )
    code, out, err = groups(capsys, bootstrap, "--describe", "--group", group)
    assert (code, out) == (1, "")
    assert f"Error: Consumer group '{group}' does not exist." in err
    code, out, _ = groups(capsys, bootstrap, "--list")
    assert group not in out.split()
    code, out, err = groups(capsys, bootstrap, "--delete", "--group", group)
    assert code == 1 and "GROUP_ID_NOT_FOUND" in err


def test_reset_makes_the_offsets_of_a_new_group(
    capsys: pytest.CaptureFixture[str], bootstrap: str
) -> None:
    """A group that does not exist is Dead, which Kafka resets: its offsets are made."""
    topic = create_topic(bootstrap, topic_name("new"), partitions=2)
    group = group_name()
    fill(bootstrap, topic, [4, 4])
    code, out, err = groups(
        capsys,
        bootstrap,
        *f"--reset-offsets --group {group} --topic {topic}:1 --to-offset 2 --execute".split(),
    )
    assert code == 0, err
    assert rows(out) == [[group, topic, "1", "2"]]
    assert committed(bootstrap, group) == {(topic, 1): 2}
    c = member_of(bootstrap, group, topic)
    try:
        got = consume_until(c, lambda msgs: len(msgs) >= 6)
    finally:
        c.close()
    assert sorted((m.partition(), m.offset()) for m in got) == [
        (0, 0),
        (0, 1),
        (0, 2),
        (0, 3),
        (1, 2),
        (1, 3),
    ]


def test_export_and_reset_from_the_file(
    capsys: pytest.CaptureFixture[str], bootstrap: str, tmp_path: Path
) -> None:
    topic = create_topic(bootstrap, topic_name("file"), partitions=2)
    first, second = group_name(), group_name()
    fill(bootstrap, topic, [6, 6])
    commit_as_consumed(bootstrap, first, topic, [6, 6])
    commit_as_consumed(bootstrap, second, topic, [6, 6])
    both = f"--reset-offsets --group {first} --group {second}"
    code, out, _ = groups(capsys, bootstrap, *f"{both} --all-topics --shift-by -2 --export".split())
    assert code == 0
    lines = out.splitlines()
    assert sorted(lines) == sorted(f"{g},{topic},{p},4" for g in (first, second) for p in (0, 1))
    plan = tmp_path / "plan.csv"
    plan.write_text("\n".join(line for line in lines if not line.endswith(f"{topic},1,4")) + "\n")
    code, out, err = groups(capsys, bootstrap, *f"{both} --from-file {plan} --execute".split())
    assert code == 0, err
    assert sorted(rows(out)) == sorted([[first, topic, "0", "4"], [second, topic, "0", "4"]])
    for group in (first, second):
        assert committed(bootstrap, group) == {(topic, 0): 4, (topic, 1): 6}


def test_delete_offsets_of_a_topic_the_group_does_not_consume(
    capsys: pytest.CaptureFixture[str], bootstrap: str
) -> None:
    consumed = create_topic(bootstrap, topic_name("sub"), partitions=2)
    old = create_topic(bootstrap, topic_name("old"), partitions=1)
    group = group_name()
    fill(bootstrap, old, [3])
    commit_as_consumed(bootstrap, group, old, [3])
    fill(bootstrap, consumed, [2, 2])
    member = commit_as_consumed(bootstrap, group, consumed, [2, 2], stay=True)
    assert member is not None
    try:
        code, out, err = groups(
            capsys, bootstrap, "--delete-offsets", "--group", group, "--topic", consumed
        )
        assert code == 1
        assert err == "Error: Encounter some partition level error, see the follow-up details:\n"
        assert statuses(out) == [
            [consumed, "0", "Error:", "GROUP_SUBSCRIBED_TO_TOPIC"],
            [consumed, "1", "Error:", "GROUP_SUBSCRIBED_TO_TOPIC"],
        ]
        code, out, err = groups(
            capsys, bootstrap, "--delete-offsets", "--group", group, "--topic", old
        )
        assert (code, err) == (0, "")
        assert (
            out.splitlines()[0]
            == f"Request succeed for deleting offsets with topic {old} group {group}"
        )
        assert statuses(out) == [[old, "0", "Successful"]]
        assert committed(bootstrap, group) == {(consumed, 0): 2, (consumed, 1): 2}
    finally:
        member.close()
    code, out, _ = groups(
        capsys, bootstrap, "--delete-offsets", "--group", group, "--topic", f"{consumed}:1"
    )
    assert code == 0 and statuses(out) == [[consumed, "1", "Successful"]]
    assert committed(bootstrap, group) == {(consumed, 0): 2}
    code, _, err = groups(
        capsys, bootstrap, "--delete-offsets", "--group", "no-such-group", "--topic", old
    )
    assert code == 1 and err == "Error: 'no-such-group' does not exist.\n"
