"""`onceflow leader-election`'s input: Kafka's JSON partition list and the options."""

from __future__ import annotations

import pytest

from onceflow.cli.common import CliError
from onceflow.cli.leader_election import parse_election_json
from onceflow.cli.main import main

# (file text, partitions or the error's start)
FILES = [
    (
        '{"partitions": [{"topic": "a", "partition": 1}, {"topic": "b", "partition": 0}]}',
        [("a", 1), ("b", 0)],
    ),
    ('{"partitions": []}', []),
    ("not json", "The input string is not a valid JSON"),
    ('{"version": 1}', "Missing partitions field"),
    ('{"partitions": [{"topic": "a"}]}', "each partition needs a topic and a partition"),
    (
        '{"partitions": [{"topic": "a", "partition": 1}, {"topic": "a", "partition": 1}]}',
        "Replica election data contains duplicate partitions: a-1",
    ),
]


@pytest.mark.parametrize(("text", "expected"), FILES)
def test_partition_files(text: str, expected: list[tuple[str, int]] | str) -> None:
    if isinstance(expected, str):
        with pytest.raises(CliError, match=expected):
            parse_election_json(text)
    else:
        assert parse_election_json(text) == expected


@pytest.mark.parametrize(
    "args",
    [
        ["--election-type", "preferred"],  # which partitions?
        ["--election-type", "dirty", "--all-topic-partitions"],
        ["--election-type", "unclean", "--all-topic-partitions", "--topic", "t"],
        ["--election-type", "unclean", "--topic", "t"],  # no --partition
    ],
)
def test_bad_options_are_usage_errors(args: list[str]) -> None:
    assert main(["leader-election", "--bootstrap-server", "127.0.0.1:1", *args]) == 2
