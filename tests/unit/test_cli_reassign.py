"""`onceflow reassign-partitions`' pure parts: Kafka's JSON files both ways with its error
words, the rack-aware proposal of --generate and the throttled replica lists of --execute."""

from __future__ import annotations

import argparse
import json
import random
from types import SimpleNamespace

import pytest

from onceflow.cli import topic_views
from onceflow.cli.common import CliError
from onceflow.cli.reassign import move_map, propose, throttled_replicas
from onceflow.cli.reassign_json import (
    format_reassignment,
    parse_reassignment,
    parse_topics_to_move,
)


def test_reassignment_json_round_trips_in_kafkas_format() -> None:
    plan = {("b", 1): (3, 4), ("a", 0): (1, 2)}
    text = format_reassignment(plan)
    assert json.loads(text) == {
        "version": 1,
        "partitions": [
            {"topic": "a", "partition": 0, "replicas": [1, 2], "log_dirs": ["any", "any"]},
            {"topic": "b", "partition": 1, "replicas": [3, 4], "log_dirs": ["any", "any"]},
        ],
    }
    assert parse_reassignment(text) == plan


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("nope", "The input string is not a valid JSON"),
        ('{"version":1}', "Missing partitions field"),
        ('{"partitions":[]}', "Partition reassignment list cannot be empty"),
        (
            '{"partitions":[{"topic":"a","partition":0,"replicas":[1,1]}]}',
            "Partition replica lists may not contain duplicate entries: "
            "a-0 contains multiple entries for 1",
        ),
        (
            '{"partitions":[{"topic":"a","partition":0,"replicas":[1]},'
            '{"topic":"a","partition":0,"replicas":[2]}]}',
            "Partition reassignment contains duplicate topic partitions: a-0",
        ),
        ('{"partitions":[{"topic":"a","partition":"0","replicas":[1]}]}', "needs a topic"),
        ('{"partitions":[{"topic":"a","partition":0,"replicas":[]}]}', "list cannot be empty"),
        (
            '{"partitions":[{"topic":"a","partition":0,"replicas":[1],"log_dirs":["/d"]}]}',
            'must be "any"',
        ),
    ],
)
def test_bad_reassignment_files(text: str, words: str) -> None:
    with pytest.raises(CliError) as caught:
        parse_reassignment(text)
    assert words in str(caught.value)


def test_topics_to_move() -> None:
    assert parse_topics_to_move('{"version":1,"topics":[{"topic":"a"},{"topic":"b"}]}') == [
        "a",
        "b",
    ]
    with pytest.raises(CliError, match=r"duplicate entries: \[a\]"):
        parse_topics_to_move('{"topics":[{"topic":"a"},{"topic":"a"}]}')
    with pytest.raises(CliError, match="Missing topics field"):
        parse_topics_to_move("{}")


def test_generate_keeps_each_factor_and_spreads_over_racks() -> None:
    current = {("t", p): (1, 2, 3) for p in range(6)} | {("u", 0): (2,)}
    racks: dict[int, str | None] = {1: "a", 2: "a", 3: "b", 4: "c", 5: "b", 6: "c"}
    proposed = propose(current, [1, 2, 3, 4, 5, 6], racks, random.Random(3))
    assert set(proposed) == set(current)
    assert len(proposed[("u", 0)]) == 1
    for p in range(6):
        replicas = proposed[("t", p)]
        assert len(set(replicas)) == 3
        assert {racks[b] for b in replicas} == {"a", "b", "c"}


def test_throttled_replicas_are_kafkas_lists() -> None:
    current = {("t", 0): (1, 2), ("t", 1): (2, 3), ("t", 2): (3, 1)}
    targets = {("t", 0): (4, 2), ("t", 1): (2, 3), ("t", 2): (3, 4)}
    ongoing = {("t", 5): ((6, 1, 5), (6,), (5,)), ("u", 0): ((2, 1), (2,), ())}
    moves = move_map(ongoing, current, targets)
    assert moves["t"][0] == (frozenset({1, 2}), frozenset({4}))
    assert moves["t"][5] == (frozenset({1, 5}), frozenset({6}))  # in progress: kept
    assert throttled_replicas(moves) == {
        "t": ("0:1,0:2,1:2,1:3,2:1,2:3,5:1,5:5", "0:4,2:4,5:6"),
        "u": ("0:1", "0:2"),
    }


def test_topics_describe_shows_a_reassignment_as_kafkas_tool(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def partition(pid: int, replicas: list[int], isr: list[int]) -> SimpleNamespace:
        return SimpleNamespace(id=pid, leader=isr[0], replicas=replicas, isrs=isr, error=None)

    topic = SimpleNamespace(
        partitions={0: partition(0, [4, 2, 1], [1, 2]), 1: partition(1, [2, 1], [2, 1])}
    )
    flags = ("under_replicated", "unavailable", "under_min_isr", "at_min_isr")
    args = argparse.Namespace(
        all_configs=False,
        topics_with_overrides=False,
        **{f"{f}_partitions": False for f in flags},
    )
    topic_views.describe_one("t", topic, [], None, args, {0: ((4,), (1,))})
    assert capsys.readouterr().out.splitlines() == [
        "Topic: t\tPartitionCount: 2\tReplicationFactor: 2\tConfigs: ",
        "\tTopic: t\tPartition: 0\tLeader: 1\tReplicas: 4,2,1\tIsr: 1,2"
        "\tAdding Replicas: 4\tRemoving Replicas: 1",
        "\tTopic: t\tPartition: 1\tLeader: 2\tReplicas: 2,1\tIsr: 2,1",
    ]
    # The replica being added does not make the partition under-replicated.
    args.under_replicated_partitions = True
    topic_views.describe_one("t", topic, [], None, args, {0: ((4,), (1,))})
    assert capsys.readouterr().out == ""
