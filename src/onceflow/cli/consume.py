"""`onceflow consume --topic T`: print records, one per line, as kafka-console-consumer.sh
prints them (its options; its formatter's properties, see `record_formatter`), through
confluent-kafka.

Without `--group` the consumer assigns itself the partitions and commits nothing, so a look
at a topic leaves no trace on the broker and needs no group coordinator. With `--group` it
subscribes, and the offsets of the records printed are committed before it exits. `--include
REGEX` (Kafka's topics by pattern) always subscribes, with a throwaway group (committing
nothing) when no `--group` is given, as Kafka's console consumer does.
The default isolation level is read_uncommitted, like Kafka's console consumer (librdkafka's
own default is read_committed); pass read_committed to see only committed transactions.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import uuid
from typing import Any, BinaryIO

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)

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
from onceflow.cli.console_args import add_property_options, add_tool_alias
from onceflow.cli.record_formatter import FORMATTER_KEYS, RecordFormatter

__all__ = ["register", "run_consume"]

log = logging.getLogger("onceflow.cli.consume")

METADATA_TIMEOUT_S = 30.0
POLL_INTERVAL_S = 0.5
# Errors after which waiting longer cannot produce a record.
_FATAL_CONSUME_ERRORS = frozenset(
    {
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.TOPIC_EXCEPTION,
    }
)


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "consume",
        help="print records of a topic (like kafka-console-consumer.sh)",
        description="Print the records of --topic, one per line, as Kafka's "
        "kafka-console-consumer.sh does, with its options and formatter properties.",
        epilog="Also accepted, the older short form: consume TOPIC, --print-key, "
        "--print-partition, --print-offset, --print-timestamp (= --property print.key=true, "
        "...), --key-separator SEP (= --property key.separator=SEP).",
    )
    parser.add_argument("--topic", help="the topic to read")
    parser.add_argument(
        "--include",
        "--whitelist",
        metavar="REGEX",
        help="instead of --topic: every topic the regular expression matches whole "
        "(a subscription, so through a group: --group's, or a throwaway one)",
    )
    add_bootstrap_option(parser)
    add_command_config_option(parser)
    parser.add_argument("--consumer.config", dest="command_config", help=argparse.SUPPRESS)
    add_property_options(parser, FORMATTER_KEYS, "consumer", "formatter property")
    parser.add_argument("--group", metavar="G", help="subscribe as group G and commit")
    parser.add_argument("--partition", type=non_negative_int, help="read only this partition")
    parser.add_argument(
        "--offset", help="with --partition: an offset, 'earliest' or 'latest' (default latest)"
    )
    parser.add_argument(
        "--from-beginning", action="store_true", help="start at the earliest offset"
    )
    parser.add_argument("--max-messages", type=positive_int, metavar="N", help="stop after N")
    parser.add_argument(
        "--timeout-ms",
        type=non_negative_int,
        help="stop after this long without a record (counting from the start, group join included)",
    )
    parser.add_argument(
        "--isolation-level",
        choices=("read_uncommitted", "read_committed"),
        default="read_uncommitted",
    )
    for field in ("key", "partition", "offset", "timestamp"):
        add_tool_alias(parser, f"--print-{field}", [(f"print.{field}", "true")])
    add_tool_alias(parser, "--key-separator", [("key.separator", None)])
    parser.set_defaults(func=run_consume, command_parser=parser, normalize=_normalize)


def _normalize(args: argparse.Namespace) -> None:
    """What to read, checked as Kafka checks it; the formatter the properties describe, and
    its switches as plain attributes."""
    if (args.topic is None) == (args.include is None):
        raise UsageError("give --topic or --include (one of them)")
    if args.include is not None and args.partition is not None:
        raise UsageError("--partition goes with --topic, not --include")
    formatter = RecordFormatter.from_properties(args.tool_properties)
    args.formatter = formatter
    args.print_key, args.print_partition = formatter.print_key, formatter.print_partition
    args.print_offset, args.print_timestamp = formatter.print_offset, formatter.print_timestamp
    args.key_separator = formatter.key_separator.decode()


def _start_offset(args: argparse.Namespace) -> int:
    """The offset to assign from, for the assign (no group or --partition) path."""
    if args.offset is None or args.offset == "latest":
        return int(OFFSET_BEGINNING if args.from_beginning else OFFSET_END)
    if args.offset == "earliest":
        return int(OFFSET_BEGINNING)
    if not args.offset.isdigit():
        raise UsageError(f"--offset must be an offset >= 0, 'earliest' or 'latest': {args.offset}")
    return int(args.offset)


def _check_arguments(args: argparse.Namespace) -> None:
    if args.offset is not None and args.partition is None:
        raise UsageError("--offset needs --partition")
    if args.offset is not None and args.from_beginning:
        raise UsageError("--offset and --from-beginning cannot be combined")


def _consumer_config(args: argparse.Namespace) -> dict[str, Any]:
    group = args.group or f"onceflow-console-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    config = client_config(args.bootstrap_server, security=security_properties(args))
    config.update(
        {
            "group.id": group,
            # Without a group nothing is committed: the throwaway id above never reaches
            # the broker's offsets topic.
            "enable.auto.commit": args.group is not None,
            "auto.offset.reset": "earliest" if args.from_beginning else "latest",
            "isolation.level": args.isolation_level,
            "error_cb": _ConsumerErrors(),
        }
    )
    config.update(dict(args.property))
    return config


class _ConsumerErrors(ConnectionErrors):
    """librdkafka retries on its own; say so rather than fail, unless retrying cannot help:
    a fatal error, a refused login or a certificate not trusted (as Kafka's Java consumer
    gives up on an authentication failure). Raised from poll(), where the loop sees it."""

    def __call__(self, error: Any) -> None:
        super().__call__(error)
        if error.fatal() or error.code() in self.CODES:
            raise KafkaException(error)
        if error.code() == KafkaError._ALL_BROKERS_DOWN:
            log.warning("all brokers are down; still retrying")


def _assignment(consumer: Any, args: argparse.Namespace, errors: ConnectionErrors) -> list[Any]:
    try:
        metadata = consumer.list_topics(args.topic, timeout=METADATA_TIMEOUT_S)
    except KafkaException as exc:
        raise CliError(
            f"cannot get metadata from {args.bootstrap_server}: {errors.explain(exc, consumer)}"
        ) from None
    topic = metadata.topics.get(args.topic)
    if topic is None or topic.error is not None:
        reason = topic.error.str() if topic is not None else "not in the metadata"
        raise CliError(f"cannot consume {args.topic}: {reason}")
    offset = _start_offset(args)
    if args.partition is not None:
        if args.partition not in topic.partitions:
            raise CliError(
                f"topic {args.topic} has no partition {args.partition} "
                f"(it has {len(topic.partitions)})"
            )
        return [TopicPartition(args.topic, args.partition, offset)]
    return [TopicPartition(args.topic, pid, offset) for pid in sorted(topic.partitions)]


def _binary_stdout() -> BinaryIO:
    """stdout's byte stream, so payloads are written exactly as stored."""
    sys.stdout.flush()
    buffer: BinaryIO | None = getattr(sys.stdout, "buffer", None)
    if buffer is None:
        raise CliError("stdout cannot take bytes")
    return buffer


def _commit(consumer: Any) -> None:
    try:
        consumer.commit(asynchronous=False)
    except KafkaException as exc:
        if exc.args and exc.args[0].code() == KafkaError._NO_OFFSET:
            return  # nothing consumed, nothing to commit
        raise CliError(f"cannot commit offsets: {describe_kafka_error(exc)}") from None


def _poll_loop(consumer: Any, args: argparse.Namespace) -> int:
    """Print records until --max-messages or --timeout-ms idle; returns how many."""
    out = _binary_stdout()
    formatter: RecordFormatter = args.formatter
    idle_limit = None if args.timeout_ms is None else args.timeout_ms / 1000.0
    count = 0
    last = time.monotonic()
    while args.max_messages is None or count < args.max_messages:
        wait = POLL_INTERVAL_S
        if idle_limit is not None:
            remaining = idle_limit - (time.monotonic() - last)
            if remaining <= 0:
                break
            wait = min(wait, remaining)
        message = consumer.poll(wait)
        if message is None:
            continue
        error = message.error()
        if error is not None:
            if error.code() in _FATAL_CONSUME_ERRORS or error.fatal():
                raise CliError(f"cannot consume {args.topic or args.include}: {error.str()}")
            if error.code() != KafkaError._PARTITION_EOF:
                log.warning("%s", error.str())
            continue
        out.write(formatter.format(message))
        out.flush()
        count += 1
        last = time.monotonic()
    return count


def run_consume(args: argparse.Namespace) -> int:
    _check_arguments(args)
    _start_offset(args)  # reject a bad --offset before connecting
    config = _consumer_config(args)
    probe_bootstrap(args.bootstrap_server)
    try:
        consumer = Consumer(config)
    except (KafkaException, ValueError, TypeError) as exc:
        raise CliError(f"bad consumer setting: {describe_kafka_error(exc)}") from None
    count = 0
    try:
        if args.include is not None:  # librdkafka's regex subscription, matching whole names
            consumer.subscribe([f"^({args.include})$"])
        elif args.group is not None and args.partition is None:
            consumer.subscribe([args.topic])
        else:
            consumer.assign(_assignment(consumer, args, config["error_cb"]))
        try:
            count = _poll_loop(consumer, args)
        except KafkaException as exc:  # a fatal error raised from error_cb
            raise CliError(describe_kafka_error(exc)) from None
        except KeyboardInterrupt:
            pass  # Ctrl-C is how an unbounded consume ends: commit and report as usual
        if args.group is not None:
            _commit(consumer)
    finally:
        consumer.close()
    print(f"Consumed {count} message{'' if count == 1 else 's'}.", file=sys.stderr)
    return 0
