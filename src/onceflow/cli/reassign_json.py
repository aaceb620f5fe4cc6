"""The JSON files of `kafka-reassign-partitions.sh`, both ways, with its error words.

topics to move:  {"version":1,"topics":[{"topic":"foo"}]}
reassignment:    {"version":1,"partitions":[{"topic":"foo","partition":0,
                  "replicas":[1,2],"log_dirs":["any","any"]}]}
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from onceflow.cli.common import CliError

Tp = tuple[str, int]
Assignment = dict[Tp, tuple[int, ...]]


def _document(text: str) -> dict[str, Any]:
    try:
        document = json.loads(text)
    except ValueError:
        raise CliError("The input string is not a valid JSON") from None
    if not isinstance(document, dict):
        raise CliError("The input string is not a valid JSON")
    return document


def parse_topics_to_move(text: str) -> list[str]:
    document = _document(text)
    entries = document.get("topics")
    if not isinstance(entries, list):
        raise CliError("Missing topics field")
    topics: list[str] = []
    for entry in entries:
        topic = entry.get("topic") if isinstance(entry, dict) else None
        if not isinstance(topic, str):
            raise CliError(f"each entry needs a topic: {json.dumps(entry)}")
        topics.append(topic)
    duplicates = sorted({t for t in topics if topics.count(t) > 1})
    if duplicates:
        raise CliError(
            f"List of topics to reassign contains duplicate entries: [{', '.join(duplicates)}]"
        )
    return topics


def parse_reassignment(text: str) -> Assignment:
    """Kafka's parsePartitionReassignmentData and its checks: no empty list, no duplicate
    partition, no duplicate replica; log_dirs, when given, must be "any" (one log dir)."""
    document = _document(text)
    entries = document.get("partitions")
    if not isinstance(entries, list):
        raise CliError("Missing partitions field")
    if not entries:
        raise CliError("Partition reassignment list cannot be empty")
    assignment: Assignment = {}
    duplicates: list[str] = []
    multiple: list[str] = []
    for entry in entries:
        if not isinstance(entry, dict):
            raise CliError(f"each partition needs a topic, a partition and replicas: {entry}")
        topic, partition, replicas = (
            entry.get("topic"),
            entry.get("partition"),
            entry.get("replicas"),
        )
        if (
            not isinstance(topic, str)
            or type(partition) is not int
            or not isinstance(replicas, list)
            or not all(type(r) is int for r in replicas)
        ):
            raise CliError(
                f"each partition needs a topic, a partition and replicas: {json.dumps(entry)}"
            )
        dirs = entry.get("log_dirs")
        if dirs is not None and (
            not isinstance(dirs, list)
            or len(dirs) != len(replicas)
            or any(d != "any" for d in dirs)
        ):
            raise CliError(
                f'log_dirs of {topic}-{partition} must be "any" for each replica: '
                "Onceflow brokers have one log dir"
            )
        if not replicas:
            raise CliError("Partition replica list cannot be empty")
        repeated = sorted({r for r in replicas if replicas.count(r) > 1})
        if repeated:
            multiple.append(
                f"{topic}-{partition} contains multiple entries for {','.join(map(str, repeated))}"
            )
        if (topic, partition) in assignment:
            duplicates.append(f"{topic}-{partition}")
        assignment[(topic, partition)] = tuple(replicas)
    if duplicates:
        raise CliError(
            "Partition reassignment contains duplicate topic partitions: "
            + ",".join(sorted(set(duplicates)))
        )
    if multiple:
        raise CliError(
            f"Partition replica lists may not contain duplicate entries: {'. '.join(multiple)}"
        )
    return assignment


def format_reassignment(assignment: Mapping[Tp, tuple[int, ...]]) -> str:
    """Kafka's formatAsReassignmentJson: one line, partitions sorted."""
    return json.dumps(
        {
            "version": 1,
            "partitions": [
                {
                    "topic": topic,
                    "partition": partition,
                    "replicas": list(replicas),
                    "log_dirs": ["any"] * len(replicas),
                }
                for (topic, partition), replicas in sorted(assignment.items())
            ],
        },
        separators=(",", ":"),
    )
