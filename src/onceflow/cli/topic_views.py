"""kafka-topics.sh's view of topics: which topics `--topic` selects, and `--describe`'s lines.

Kept apart from the commands (`topics`) because these are pure renderings of what the admin
client answered: the topic line with Kafka's topic id text, the partition lines, and the
reports (`--under-replicated-partitions` and the rest) that print only some of them.
"""

from __future__ import annotations

import argparse
import base64
import re
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import ConfigResource  # type: ignore[attr-defined]  # re-exported
from confluent_kafka.cimpl import CONFIG_SOURCE_DEFAULT_CONFIG

from onceflow.cli.common import CliError, describe_kafka_error

__all__ = [
    "ZERO_TOPIC_ID",
    "Moving",
    "describe_configs",
    "describe_one",
    "kafka_uuid",
    "reporting",
    "select_topics",
    "topic_ids",
]

ZERO_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"  # Kafka's Uuid.ZERO_UUID: no id to print


def describe_configs(
    admin: Any, names: list[str], args: argparse.Namespace
) -> dict[str, list[Any] | str]:
    """Each topic's config entries, or the text of the error that kept them from us."""
    if not names:
        return {}
    resources = [ConfigResource("topic", name) for name in names]
    futures = admin.describe_configs(resources, request_timeout=args.timeout_ms / 1000.0)
    configs: dict[str, list[Any] | str] = {}
    for resource, future in futures.items():
        try:
            entries = future.result()
        except KafkaException as exc:
            configs[resource.name] = describe_kafka_error(exc)
            continue
        configs[resource.name] = [entries[key] for key in sorted(entries)]
    return configs


def _render_configs(entries: Iterable[Any], show_all: bool) -> str:
    """`key=value,...`: only overrides unless `show_all`; secrets are never printed."""
    shown = []
    for entry in entries:
        # librdkafka hands the source over as a plain int; the Python class as an enum.
        source = getattr(entry.source, "value", entry.source)
        if not show_all and (entry.is_default or source == CONFIG_SOURCE_DEFAULT_CONFIG):
            continue
        value = "(sensitive)" if entry.is_sensitive else entry.value
        shown.append(f"{entry.name}={'' if value is None else value}")
    return ",".join(shown)


def _node(node_id: int) -> str:
    return "none" if node_id < 0 else str(node_id)


def kafka_uuid(uuid: Any) -> str:
    """A Uuid as Kafka prints it: URL-safe base64 of its 16 bytes, unpadded (librdkafka's
    own text uses the standard alphabet, with + and /)."""
    high, low = uuid.get_most_significant_bits(), uuid.get_least_significant_bits()
    raw = (high & (2**64 - 1)).to_bytes(8, "big") + (low & (2**64 - 1)).to_bytes(8, "big")
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def topic_ids(admin: Any, names: list[str], args: argparse.Namespace) -> dict[str, str]:
    """Topic ids by name (base64, as Kafka prints them); none from a broker without them."""
    describe = getattr(admin, "describe_topics", None)
    if not names or describe is None:
        return {}
    ids: dict[str, str] = {}
    try:
        futures = describe(TopicCollection(names), request_timeout=args.timeout_ms / 1000.0)
        for name, future in futures.items():
            topic_id = future.result().topic_id
            if topic_id is not None and kafka_uuid(topic_id) != ZERO_TOPIC_ID:
                ids[name] = kafka_uuid(topic_id)
    except KafkaException:
        pass  # the id is only a label here: the partitions still come from the metadata
    return ids


def reporting(args: argparse.Namespace) -> bool:
    """Whether a partition report (kafka-topics.sh's --*-partitions options) is asked."""
    return bool(
        args.under_replicated_partitions
        or args.unavailable_partitions
        or args.under_min_isr_partitions
        or args.at_min_isr_partitions
    )


def _min_isr(name: str, configs: list[Any] | str) -> int:
    """The topic's min.insync.replicas, which the min-ISR reports compare with."""
    for entry in [] if isinstance(configs, str) else configs:
        if entry.name == "min.insync.replicas" and str(entry.value).isdigit():
            return int(entry.value)
    raise CliError(f"cannot report on topic {name}: its min.insync.replicas is unknown")


#: Partitions being reassigned: partition -> (adding, removing) replicas.
Moving = Mapping[int, tuple[tuple[int, ...], tuple[int, ...]]]


def _factor(partition: Any, moving: Moving) -> int:
    """The replication factor: a partition being reassigned counts its replicas without
    those being added, as Kafka's tool counts them."""
    adding = moving.get(partition.id, ((), ()))[0]
    return len(partition.replicas) - len(adding)


def _reported(
    partition: Any, args: argparse.Namespace, min_isr: int | None, moving: Moving
) -> bool:
    """Whether the partition meets every report asked for (all of them when none is)."""
    isr, leaderless = len(partition.isrs), partition.leader < 0
    checks = (
        (args.under_replicated_partitions, isr < _factor(partition, moving)),
        (args.unavailable_partitions, leaderless),
        (args.under_min_isr_partitions, leaderless or (min_isr is not None and isr < min_isr)),
        (args.at_min_isr_partitions, isr == min_isr),
    )
    return all(holds for asked, holds in checks if asked)


def _partition_lines(
    name: str, topic: Any, args: argparse.Namespace, configs: list[Any] | str, moving: Moving
) -> list[str]:
    """kafka-topics.sh's partition lines, only the reported ones when a report is asked;
    a partition being reassigned also shows its adding and removing replicas."""
    needs_min_isr = args.under_min_isr_partitions or args.at_min_isr_partitions
    min_isr = _min_isr(name, configs) if needs_min_isr else None
    lines = []
    for pid in sorted(topic.partitions):
        partition = topic.partitions[pid]
        if not _reported(partition, args, min_isr, moving):
            continue
        line = (
            f"\tTopic: {name}\tPartition: {partition.id}\tLeader: {_node(partition.leader)}"
            f"\tReplicas: {','.join(map(str, partition.replicas))}"
            f"\tIsr: {','.join(map(str, partition.isrs))}"
        )
        if partition.id in moving:
            adding, removing = moving[partition.id]
            line += f"\tAdding Replicas: {','.join(map(str, adding))}"
            line += f"\tRemoving Replicas: {','.join(map(str, removing))}"
        if partition.error is not None:
            line += f"\tError: {partition.error.str()}"
        lines.append(line)
    return lines


def describe_one(
    name: str,
    topic: Any,
    configs: list[Any] | str,
    topic_id: str | None,
    args: argparse.Namespace,
    moving: Moving | None = None,
) -> None:
    """kafka-topics.sh --describe's lines: the topic's, then one per partition. A report
    (--under-replicated-partitions, --unavailable-partitions, --under-min-isr-partitions,
    --at-min-isr-partitions) prints only partition lines,
    --topics-with-overrides only the lines of topics with overrides, as Kafka's tool does."""
    reports = reporting(args)
    moving = moving or {}
    if isinstance(configs, str):
        rendered = f"(unavailable: {configs})"
    else:
        rendered = _render_configs(configs, args.all_configs)
    if not reports and not (args.topics_with_overrides and not rendered):
        partitions = list(topic.partitions.values())
        replication = _factor(partitions[0], moving) if partitions else 0
        labelled = "" if topic_id is None else f"\tTopicId: {topic_id}"
        print(
            f"Topic: {name}{labelled}\tPartitionCount: {len(partitions)}\t"
            f"ReplicationFactor: {replication}\tConfigs: {rendered}"
        )
    if not args.topics_with_overrides:
        for line in _partition_lines(name, topic, args, configs, moving):
            print(line)


def select_topics(
    names: Iterable[str], wanted: list[str], exclude_internal: bool
) -> tuple[list[str], list[str]]:
    """The topics `--topic` names (a name, else a regular expression matching whole names,
    as kafka-topics.sh reads it), and the patterns nothing matched."""
    present = sorted(name for name in names if not (exclude_internal and name.startswith("__")))
    if not wanted:
        return present, []
    found: list[str] = []
    missing: list[str] = []
    for pattern in wanted:
        if pattern in present:
            matched = [pattern]
        else:
            try:
                regex = re.compile(pattern)
            except re.error:
                matched = []
            else:
                matched = [name for name in present if regex.fullmatch(name)]
        found += [name for name in matched if name not in found]
        if not matched:
            missing.append(pattern)
    return found, missing
