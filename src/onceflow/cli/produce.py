"""`onceflow produce TOPIC`: one record per line of stdin, through confluent-kafka.

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
    add_bootstrap_option,
    client_config,
    describe_kafka_error,
    key_value,
    non_negative_int,
    positive_int,
    probe_bootstrap,
)

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
        help="send lines from stdin as records",
        description="Send each line of stdin to TOPIC as one record.",
    )
    parser.add_argument("topic", metavar="TOPIC")
    add_bootstrap_option(parser)
    add_command_config_option(parser)
    parser.add_argument(
        "--key-separator",
        metavar="SEP",
        help="split each line at the first SEP into key and value (default: no key)",
    )
    parser.add_argument("--acks", choices=sorted(ACKS), help="acknowledgements to wait for")
    parser.add_argument("--partition", type=non_negative_int, help="default: the partitioner's")
    parser.add_argument(
        "--property",
        type=key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="producer (librdkafka) setting such as linger.ms=5; repeatable",
    )
    parser.add_argument(
        "--timeout-ms",
        type=positive_int,
        default=DEFAULT_TIMEOUT_MS,
        help=f"how long to wait for the topic's metadata (default {DEFAULT_TIMEOUT_MS})",
    )
    parser.set_defaults(func=run_produce, command_parser=parser)


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
    key: bytes | None,
    value: bytes,
    line: int,
    deliveries: _Deliveries,
) -> None:
    extra = {} if args.partition is None else {"partition": args.partition}
    while True:
        try:
            producer.produce(
                args.topic,
                value=value,
                key=key,
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
    separator: bytes | None = args.key_separator.encode() if args.key_separator else None
    deliveries = _Deliveries()
    lines = 0
    interrupted = False
    try:
        for lines, line in enumerate(_input_lines(sys.stdin), start=1):
            key: bytes | None = None
            value = line
            if separator is not None:
                key, found, value = line.partition(separator)
                if not found:
                    deliveries.failed += 1
                    print(
                        f"onceflow: error: line {lines} has no key separator "
                        f"{args.key_separator!r}",
                        file=sys.stderr,
                    )
                    continue
            _produce(producer, args, key, value, lines, deliveries)
    except KeyboardInterrupt:
        # Ctrl-C ends the input, not the lines already read: they are still delivered
        # (a second Ctrl-C during the flush abandons them).
        interrupted = True
    producer.flush()
    if deliveries.failed:
        raise CliError(f"{deliveries.failed} of {lines} lines were not delivered")
    return 130 if interrupted else 0
