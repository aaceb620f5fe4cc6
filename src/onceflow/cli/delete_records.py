"""`onceflow delete-records`: move partitions' log start offsets up (DeleteRecords), as
Kafka's `kafka-delete-records.sh`.

The records below the new start can no longer be read: a consumer from the beginning starts
there. Kafka's JSON offsets file is read as its tool reads it (`version` 1, duplicates
refused); `--topic`, `--partition` and `--offset` say the same on the command line. Offset -1
means the high watermark: everything written so far. Through confluent-kafka's AdminClient,
so it works against Apache Kafka too. Unlike Kafka's tool, a partition that fails makes the
exit code 1.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from confluent_kafka import KafkaException, TopicCollection, TopicPartition

from onceflow.cli.admin import connect_admin
from onceflow.cli.admin_errors import error_text
from onceflow.cli.command_config import add_command_config_option
from onceflow.cli.common import (
    CliError,
    UsageError,
    add_bootstrap_option,
    non_negative_int,
    positive_int,
)

__all__ = ["parse_offset_json", "register"]

DEFAULT_TIMEOUT_MS = 30_000
HIGH_WATERMARK = -1
Tp = tuple[str, int]


def _offset(text: str) -> int:
    """argparse type: an offset, or -1 for the high watermark."""
    value = int(text) if text.lstrip("-").isdigit() else None
    if value is None or value < HIGH_WATERMARK:
        raise argparse.ArgumentTypeError(f"expected an offset >= 0, or -1, got {text!r}")
    return value


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "delete-records",
        help="delete the records below an offset (like kafka-delete-records.sh)",
        description="Delete the records of partitions below an offset by moving their log "
        "start offset, as Kafka's kafka-delete-records.sh does. Give Kafka's JSON file "
        '({"partitions": [{"topic": "t", "partition": 0, "offset": 5}], "version": 1}) or '
        "--topic and --offset.",
    )
    add_bootstrap_option(parser)
    add_command_config_option(parser)
    parser.add_argument("--offset-json-file", metavar="FILE", help="Kafka's JSON offsets file")
    parser.add_argument("--topic", help="the topic (instead of a file)")
    parser.add_argument(
        "--partition",
        type=non_negative_int,
        action="append",
        default=[],
        help="with --topic: a partition; repeatable (default: every partition)",
    )
    parser.add_argument(
        "--offset",
        type=_offset,
        help="with --topic: delete below this offset (-1: everything written so far)",
    )
    parser.add_argument(
        "--timeout-ms",
        type=positive_int,
        default=DEFAULT_TIMEOUT_MS,
        help=f"how long to wait for the broker (default {DEFAULT_TIMEOUT_MS})",
    )
    parser.set_defaults(func=run_delete_records, command_parser=parser)


def parse_offset_json(text: str) -> dict[Tp, int]:
    """Kafka's offsets file: partition -> offset; duplicates refused as Kafka refuses them."""
    try:
        document = json.loads(text)
    except ValueError:
        raise CliError("The input string is not a valid JSON") from None
    if not isinstance(document, dict):
        raise CliError("The input string is not a valid JSON object")
    version = document.get("version", 1)
    if version != 1:
        raise CliError(f"Not supported version field value {version}")
    if "partitions" not in document:
        raise CliError("Missing partitions field")
    entries = document["partitions"]
    if not isinstance(entries, list):
        raise CliError("partitions must be a list")
    offsets: dict[Tp, int] = {}
    duplicates: list[str] = []
    for entry in entries:
        fields: list[Any] = []
        if isinstance(entry, dict):
            fields = [entry.get(key) for key in ("topic", "partition", "offset")]
        if not fields or not isinstance(fields[0], str) or not all(map(_is_int, fields[1:])):
            raise CliError(
                f"each partition needs a topic, partition and offset: {json.dumps(entry)}"
            )
        topic, partition, offset = str(fields[0]), int(fields[1]), int(fields[2])
        if (topic, partition) in offsets:
            duplicates.append(f"{topic}-{partition}")
        offsets[(topic, partition)] = offset
    if duplicates:
        raise CliError(
            f"Offset json file contains duplicate topic partitions: {','.join(duplicates)}"
        )
    return offsets


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _read_file(path: str) -> dict[Tp, int]:
    try:
        with open(path, encoding="utf-8") as file:
            return parse_offset_json(file.read())
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from None


def _from_options(admin: Any, args: argparse.Namespace, timeout_s: float) -> dict[Tp, int]:
    partitions = list(dict.fromkeys(args.partition))
    if not partitions:
        futures = admin.describe_topics(TopicCollection([args.topic]), request_timeout=timeout_s)
        try:
            description = futures[args.topic].result()
        except KafkaException as exc:
            raise CliError(
                f"cannot describe topic {args.topic}: {error_text(exc, admin)}"
            ) from None
        partitions = sorted(p.id for p in description.partitions)
    return {(args.topic, p): args.offset for p in partitions}


def run_delete_records(args: argparse.Namespace) -> int:
    if (args.offset_json_file is None) == (args.topic is None):
        raise UsageError("give either --offset-json-file or --topic with --offset")
    if args.topic is not None and args.offset is None:
        raise UsageError("--topic needs --offset")
    if args.offset_json_file is not None and (args.partition or args.offset is not None):
        raise UsageError("--partition and --offset go with --topic, not --offset-json-file")
    timeout_s = args.timeout_ms / 1000.0
    wanted = _read_file(args.offset_json_file) if args.offset_json_file else None
    admin = connect_admin(args)
    offsets = wanted if wanted is not None else _from_options(admin, args, timeout_s)
    print("Executing records delete operation")
    request = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
    futures = admin.delete_records(request, request_timeout=timeout_s, operation_timeout=timeout_s)
    print("Records delete operation completed:")
    status = 0
    for tp, future in sorted(futures.items(), key=lambda item: (item[0].topic, item[0].partition)):
        name = f"{tp.topic}-{tp.partition}"
        try:
            print(f"partition: {name}\tlow_watermark: {future.result().low_watermark}")
        except KafkaException as exc:
            print(f"partition: {name}\terror: {error_text(exc, admin)}")
            status = 1
    return status
