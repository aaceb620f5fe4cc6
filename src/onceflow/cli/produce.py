"""`onceflow produce --topic T`: one record per line of stdin, as kafka-console-producer.sh
sends them (its options; its line reader's properties, see `line_reader`), through
confluent-kafka.

Lines are read as bytes, so any payload without a newline passes through unchanged. The topic
is looked up before the first line is read: a missing topic or partition fails at once instead
of after librdkafka's delivery timeout, which is five minutes by default. Every failed delivery
is reported with its line number, and any failure makes the exit code 1, so a script can
trust a 0.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from typing import Any, BinaryIO

from confluent_kafka import KafkaError, KafkaException, Producer

from onceflow.cli.command_config import add_command_config_option, security_properties
from onceflow.cli.common import (
    CliError,
    ConnectionErrors,
    UsageError,
    add_bootstrap_option,
    client_config,
    describe_kafka_error,
    non_negative_int,
    positive_int,
    probe_bootstrap,
)
from onceflow.cli.console_args import add_client_setting, add_property_options, add_tool_alias
from onceflow.cli.line_reader import READER_KEYS, LineError, LineReader, Record

__all__ = ["register", "run_produce"]

DEFAULT_TIMEOUT_MS = 30_000
ACKS = {"0": "0", "1": "1", "all": "all", "-1": "all"}
# Metadata errors that mean no record could ever be delivered to the topic.
_FATAL_TOPIC_ERRORS = frozenset(
    {
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.TOPIC_EXCEPTION,
    }
)


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "produce",
        help="send lines from stdin as records (like kafka-console-producer.sh)",
        description="Send each line of stdin to --topic as one record, as Kafka's "
        "kafka-console-producer.sh does, with its options and line reader properties.",
        epilog="Also accepted, the older short form: produce TOPIC, --key-separator SEP "
        "(= --property parse.key=true --property key.separator=SEP), --acks.",
    )
    parser.add_argument("--topic", required=True, help="the topic to send to")
    add_bootstrap_option(parser)
    parser.add_argument("--broker-list", dest="bootstrap_server", help=argparse.SUPPRESS)
    add_command_config_option(parser)
    parser.add_argument("--producer.config", dest="command_config", help=argparse.SUPPRESS)
    add_property_options(parser, READER_KEYS, "producer", "line reader property")
    parser.add_argument(
        "--request-required-acks",
        "--acks",
        dest="acks",
        choices=sorted(ACKS),
        help="acknowledgements to wait for (default: librdkafka's, all)",
    )
    parser.add_argument("--partition", type=non_negative_int, help="default: the partitioner's")
    add_client_setting(
        parser,
        "--compression-codec",
        "compression.codec",
        "compress batches",
        nargs="?",
        const="gzip",
        choices=("none", "gzip", "snappy", "lz4", "zstd"),
    )
    for option, setting, text in (
        ("--batch-size", "batch.num.messages", "records per batch"),
        ("--timeout", "linger.ms", "how long a record may wait for its batch, ms"),
        ("--request-timeout-ms", "request.timeout.ms", "how long to wait for an answer"),
        ("--message-send-max-retries", "retries", "how often to retry a send"),
        ("--retry-backoff-ms", "retry.backoff.ms", "the wait before a retry"),
    ):
        add_client_setting(parser, option, setting, text, type=non_negative_int, metavar="N")
    parser.add_argument(
        "--timeout-ms",
        type=positive_int,
        default=DEFAULT_TIMEOUT_MS,
        help=f"how long to wait for the topic's metadata (default {DEFAULT_TIMEOUT_MS})",
    )
    add_tool_alias(parser, "--key-separator", [("parse.key", "true"), ("key.separator", None)])
    parser.set_defaults(func=run_produce, command_parser=parser, normalize=_normalize)


def _normalize(args: argparse.Namespace) -> None:
    """The line reader the properties describe (`key_separator` says whether keys are read)."""
    try:
        args.line_reader = LineReader.from_properties(args.tool_properties)
    except ValueError as exc:
        raise UsageError(f"--property: {exc}") from None
    reader = args.line_reader
    args.key_separator = reader.key_separator.decode() if reader.parse_key else None


def _input_lines(stdin: Any) -> Iterator[bytes]:
    """Lines of stdin as bytes, without their line ending (\\n or \\r\\n)."""
    binary: BinaryIO | None = getattr(stdin, "buffer", None)
    lines = binary if binary is not None else (line.encode() for line in stdin)
    for line in lines:
        if line.endswith(b"\n"):
            line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
        yield line


def _check_topic(producer: Any, args: argparse.Namespace, errors: ConnectionErrors) -> None:
    """Fail fast when the topic or the requested partition cannot take records."""
    try:
        metadata = producer.list_topics(args.topic, timeout=args.timeout_ms / 1000.0)
    except KafkaException as exc:
        raise CliError(
            f"cannot get metadata from {args.bootstrap_server}: {errors.explain(exc, producer)}"
        ) from None
    topic = metadata.topics.get(args.topic)
    if topic is None:
        raise CliError(f"the broker did not describe topic {args.topic}")
    if topic.error is not None and topic.error.code() in _FATAL_TOPIC_ERRORS:
        raise CliError(f"cannot produce to {args.topic}: {topic.error.str()}")
    if args.partition is not None and topic.partitions and args.partition not in topic.partitions:
        raise CliError(
            f"topic {args.topic} has no partition {args.partition} (it has {len(topic.partitions)})"
        )


class _Deliveries:
    """Counts outcomes; librdkafka calls `report` from poll() and flush() on this thread."""

    def __init__(self) -> None:
        self.sent = 0
        self.failed = 0

    def report(self, line: int, error: Any) -> None:
        if error is None:
            return
        self.failed += 1
        print(f"onceflow: error: line {line} not delivered: {error.str()}", file=sys.stderr)


def _produce(
    producer: Any,
    args: argparse.Namespace,
    record: Record,
    line: int,
    deliveries: _Deliveries,
) -> None:
    extra: dict[str, Any] = {} if args.partition is None else {"partition": args.partition}
    if record.headers:
        extra["headers"] = record.headers
    while True:
        try:
            producer.produce(
                args.topic,
                value=record.value,
                key=record.key,
                on_delivery=lambda err, _msg: deliveries.report(line, err),
                **extra,
            )
            break
        except BufferError:  # the local queue is full: let deliveries drain it
            producer.poll(0.1)
        except KafkaException as exc:
            deliveries.failed += 1
            print(
                f"onceflow: error: line {line} not sent: {describe_kafka_error(exc)}",
                file=sys.stderr,
            )
            return
    deliveries.sent += 1
    producer.poll(0)


def run_produce(args: argparse.Namespace) -> int:
    config = client_config(args.bootstrap_server, args.property, security_properties(args))
    if args.acks is not None:
        config["acks"] = ACKS[args.acks]
    probe_bootstrap(args.bootstrap_server)
    try:
        producer = Producer(config)
    except (KafkaException, ValueError, TypeError) as exc:
        raise CliError(f"bad producer setting: {describe_kafka_error(exc)}") from None
    _check_topic(producer, args, config["error_cb"])
    reader: LineReader = args.line_reader
    deliveries = _Deliveries()
    lines = 0
    interrupted = False
    try:
        for lines, line in enumerate(_input_lines(sys.stdin), start=1):
            try:
                record = reader.read(line)
            except LineError as exc:
                deliveries.failed += 1
                print(f"onceflow: error: line {lines} {exc}", file=sys.stderr)
                continue
            _produce(producer, args, record, lines, deliveries)
    except KeyboardInterrupt:
        # Ctrl-C ends the input, not the lines already read: they are still delivered
        # (a second Ctrl-C during the flush abandons them).
        interrupted = True
    producer.flush()
    if deliveries.failed:
        raise CliError(f"{deliveries.failed} of {lines} lines were not delivered")
    return 130 if interrupted else 0
