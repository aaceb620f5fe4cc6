"""`onceflow transactions list|describe|describe-producers|find-hanging|abort` (KIP-664).

The same jobs as Kafka's `kafka-transactions.sh`, over the Kafka protocol only, so they work
against an Apache Kafka cluster as well as Onceflow. confluent-kafka has none of these APIs,
hence the small wire client in `kafka_wire`.

A *hanging* transaction is open on a partition while its coordinator is not going to end it:
the coordinator does not know the producer, or its transaction is over, or does not include
that partition. It holds the last stable offset back, so read_committed consumers stop below
it forever. `find-hanging` finds such transactions and `abort` ends one with an ABORT marker.
Aborting a transaction that is *not* hanging breaks its atomicity: check first.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from onceflow.cli.command_config import add_command_config_option
from onceflow.cli.common import (
    CliError,
    UsageError,
    add_bootstrap_option,
    non_negative_int,
    positive_int,
)
from onceflow.cli.kafka_wire import (
    WRITE_TXN_MARKERS,
    Cluster,
    Connection,
    KafkaApiError,
    error_name,
    request_entity,
)
from onceflow.cli.wire_admin import wire_cluster
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import build, request_type

__all__ = [
    "OpenTransaction",
    "describe_producers",
    "describe_transaction",
    "find_hanging",
    "list_transactions",
    "millis",
    "now_ms",
    "open_transaction_at",
    "open_transactions",
    "partitions_of",
    "producers_of",
    "register",
    "write_abort_marker",
]

DEFAULT_TIMEOUT_MS = 30_000
DEFAULT_MAX_TXN_TIMEOUT_MIN = 15  # transaction.max.timeout.ms's default, in minutes
NO_VALUE = "None"
# Coordinator states in which the coordinator itself will still write the markers.
_IN_FLIGHT = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"})


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "transactions", help="list, describe, find and abort (hanging) transactions"
    )
    actions = parser.add_subparsers(dest="transactions_command", required=True, metavar="ACTION")
    common = argparse.ArgumentParser(add_help=False)
    add_bootstrap_option(common)
    add_command_config_option(common)
    common.add_argument(
        "--timeout-ms",
        type=positive_int,
        default=DEFAULT_TIMEOUT_MS,
        help=f"how long to wait for each broker answer (default {DEFAULT_TIMEOUT_MS})",
    )

    listing = actions.add_parser(
        "list", parents=[common], help="list transactional ids on every coordinator"
    )
    listing.add_argument(
        "--state", action="append", default=[], help="only this state (Ongoing, ...); repeatable"
    )
    listing.add_argument(
        "--producer-id",
        type=non_negative_int,
        action="append",
        default=[],
        help="only this producer id; repeatable",
    )
    listing.add_argument(
        "--duration-filter",
        type=non_negative_int,
        metavar="MS",
        help="only transactions running longer than this (needs ListTransactions v1)",
    )
    listing.add_argument(
        "--transactional-id-pattern",
        metavar="REGEX",
        help="only transactional ids this regular expression (RE2 syntax) matches whole "
        "(needs ListTransactions v2)",
    )
    listing.set_defaults(func=run_list, command_parser=listing)

    describe = actions.add_parser(
        "describe", parents=[common], help="show a transactional id's state at its coordinator"
    )
    describe.add_argument("--transactional-id", required=True)
    describe.set_defaults(func=run_describe, command_parser=describe)

    producers = actions.add_parser(
        "describe-producers", parents=[common], help="show a partition's active producers"
    )
    producers.add_argument("--topic", required=True)
    producers.add_argument("--partition", type=non_negative_int, required=True)
    producers.add_argument(
        "--broker-id", type=int, help="ask this broker instead of the partition leader"
    )
    producers.set_defaults(func=run_describe_producers, command_parser=producers)

    hanging = actions.add_parser(
        "find-hanging",
        parents=[common],
        help="find open transactions on partitions that no coordinator will end",
    )
    hanging.add_argument("--topic", help="only this topic (default: every topic)")
    hanging.add_argument(
        "--partition", type=non_negative_int, help="only this partition (needs --topic)"
    )
    hanging.add_argument("--broker-id", type=int, help="only partitions this broker leads")
    hanging.add_argument(
        "--max-transaction-timeout",
        type=non_negative_int,
        default=DEFAULT_MAX_TXN_TIMEOUT_MIN,
        metavar="MINUTES",
        help="the cluster's transaction.max.timeout.ms in minutes: a transaction idle longer "
        f"cannot still be live (default {DEFAULT_MAX_TXN_TIMEOUT_MIN})",
    )
    hanging.set_defaults(func=run_find_hanging, command_parser=hanging)

    abort = actions.add_parser(
        "abort", parents=[common], help="end a hanging transaction with an ABORT marker"
    )
    abort.add_argument("--topic", required=True)
    abort.add_argument("--partition", type=non_negative_int, required=True)
    abort.add_argument(
        "--start-offset",
        type=non_negative_int,
        help="the first offset of the transaction (as find-hanging shows it)",
    )
    abort.add_argument("--producer-id", type=non_negative_int, help="instead of --start-offset")
    abort.add_argument("--producer-epoch", type=non_negative_int, help="with --producer-id")
    abort.add_argument("--coordinator-epoch", type=int, help="with --producer-id")
    abort.set_defaults(func=run_abort, command_parser=abort)


# ---- shared ----------------------------------------------------------------------------


def _cluster(args: argparse.Namespace) -> Cluster:
    """The wire client for the command's bootstrap servers and `--command-config`; a seam
    tests may replace."""
    return wire_cluster(args)


def _print_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    """Left-aligned columns, as Kafka's tools print them."""
    text_rows = [[str(cell) for cell in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in text_rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    for row in [list(headers), *text_rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def _or_none(value: int) -> object:
    return NO_VALUE if value < 0 else value


def millis(value: Any) -> int:
    """kio hands int64 millisecond timestamps over as datetimes, durations as timedeltas."""
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    return int(value)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# ---- list ------------------------------------------------------------------------------


def run_list(args: argparse.Namespace) -> int:
    with _cluster(args) as cluster:
        rows = []
        for node in cluster.brokers():
            connection = cluster.node(node.node_id)
            _check_filters_supported(
                args, node.address, connection.version_for(ApiKey.LIST_TRANSACTIONS)
            )
            response = list_transactions(
                connection,
                states=args.state,
                producer_ids=args.producer_id,
                duration_ms=-1 if args.duration_filter is None else args.duration_filter,
                id_pattern=args.transactional_id_pattern,
            )
            rows += [
                (t.transactional_id, node.node_id, t.producer_id, t.transaction_state)
                for t in response.transaction_states
            ]
    _print_table(("TransactionalId", "Coordinator", "ProducerId", "TransactionState"), sorted(rows))
    return 0


def _check_filters_supported(args: argparse.Namespace, address: str, version: int) -> None:
    """A filter the broker's ListTransactions version lacks would be dropped silently."""
    if args.duration_filter is not None and version < 1:
        raise CliError(
            f"the broker at {address} cannot filter by duration (ListTransactions v1, Kafka 3.8+)"
        )
    if args.transactional_id_pattern and version < 2:
        raise CliError(
            f"the broker at {address} cannot filter by transactional id "
            "pattern (ListTransactions v2, Kafka 4.1+)"
        )


def list_transactions(
    connection: Connection,
    states: Sequence[str] = (),
    producer_ids: Sequence[int] = (),
    duration_ms: int = -1,
    id_pattern: str | None = None,
) -> Any:
    response = connection.call(
        ApiKey.LIST_TRANSACTIONS,
        state_filters=tuple(states),
        producer_id_filters=tuple(producer_ids),
        duration_filter=duration_ms,
        transactional_id_pattern=id_pattern,
    )
    if response.error_code == ErrorCode.invalid_regular_expression:
        raise UsageError(f"the broker refused the transactional id pattern {id_pattern!r}")
    if response.error_code != ErrorCode.none:
        raise KafkaApiError(
            response.error_code,
            f"cannot list transactions at {connection.address}: {error_name(response.error_code)}",
        )
    if response.unknown_state_filters:
        raise UsageError(
            f"unknown transaction state {', '.join(response.unknown_state_filters)} "
            "(states are named like Ongoing, PrepareCommit, CompleteAbort)"
        )
    return response


# ---- describe --------------------------------------------------------------------------


def describe_transaction(connection: Connection, transactional_id: str) -> Any:
    response = connection.call(ApiKey.DESCRIBE_TRANSACTIONS, transactional_ids=(transactional_id,))
    found = [s for s in response.transaction_states if s.transactional_id == transactional_id]
    if not found:
        raise CliError(f"{connection.address} did not describe transactional id {transactional_id}")
    state = found[0]
    if state.error_code != ErrorCode.none:
        raise KafkaApiError(
            state.error_code,
            f"cannot describe transactional id {transactional_id}: {error_name(state.error_code)}",
        )
    return state


def partitions_of(state: Any) -> list[tuple[str, int]]:
    return sorted((t.topic, p) for t in state.topics for p in t.partitions)


def run_describe(args: argparse.Namespace) -> int:
    with _cluster(args) as cluster:
        coordinator, connection = cluster.transaction_coordinator(args.transactional_id)
        state = describe_transaction(connection, args.transactional_id)
    start = millis(state.transaction_start_time)
    duration = now_ms() - start if start >= 0 else -1
    _print_table(
        (
            "CoordinatorId",
            "TransactionalId",
            "ProducerId",
            "ProducerEpoch",
            "TransactionState",
            "TransactionTimeoutMs",
            "CurrentTransactionStartTimeMs",
            "TransactionDurationMs",
            "TopicPartitions",
        ),
        [
            (
                coordinator,
                state.transactional_id,
                state.producer_id,
                state.producer_epoch,
                state.transaction_state,
                millis(state.transaction_timeout),
                _or_none(start),
                _or_none(duration),
                ",".join(f"{t}-{p}" for t, p in partitions_of(state)),
            )
        ],
    )
    return 0


# ---- describe-producers ----------------------------------------------------------------


def describe_producers(
    connection: Connection, partitions: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], Any]:
    """One DescribeProducers request for partitions of one broker: each partition's answer."""
    version = connection.version_for(ApiKey.DESCRIBE_PRODUCERS)
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic, partition in partitions:
        by_topic[topic].append(partition)
    request = build(
        request_type(ApiKey.DESCRIBE_PRODUCERS, version),
        topics=tuple(
            request_entity(
                ApiKey.DESCRIBE_PRODUCERS,
                version,
                "TopicRequest",
                name=topic,
                partition_indexes=tuple(parts),
            )
            for topic, parts in by_topic.items()
        ),
    )
    response = connection.call_at(ApiKey.DESCRIBE_PRODUCERS, version, request)
    return {(t.name, p.partition_index): p for t in response.topics for p in t.partitions}


def producers_of(connection: Connection, topic: str, partition: int) -> list[Any]:
    answer = describe_producers(connection, [(topic, partition)]).get((topic, partition))
    if answer is None:
        raise CliError(f"{connection.address} did not describe {topic}-{partition}")
    if answer.error_code != ErrorCode.none:
        detail = f" ({answer.error_message})" if answer.error_message else ""
        raise KafkaApiError(
            answer.error_code,
            f"cannot describe the producers of {topic}-{partition}: "
            f"{error_name(answer.error_code)}{detail}",
        )
    return list(answer.active_producers)


def _connection_for(
    cluster: Cluster, topic: str, partition: int, broker_id: int | None
) -> Connection:
    if broker_id is not None:
        return cluster.node(broker_id)
    return cluster.leader(topic, partition)[1]


def run_describe_producers(args: argparse.Namespace) -> int:
    with _cluster(args) as cluster:
        connection = _connection_for(cluster, args.topic, args.partition, args.broker_id)
        producers = producers_of(connection, args.topic, args.partition)
    _print_table(
        (
            "ProducerId",
            "ProducerEpoch",
            "LatestCoordinatorEpoch",
            "LastSequence",
            "LastTimestamp",
            "CurrentTransactionStartOffset",
        ),
        [
            (
                p.producer_id,
                p.producer_epoch,
                p.coordinator_epoch,
                p.last_sequence,
                p.last_timestamp,
                _or_none(p.current_txn_start_offset),
            )
            for p in producers
        ],
    )
    return 0


# ---- find-hanging ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OpenTransaction:
    """A transaction a partition holds open, as its DescribeProducers entry shows it."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    start_offset: int
    last_timestamp: int


def _partitions_to_check(
    cluster: Cluster, args: argparse.Namespace
) -> dict[int, list[tuple[str, int]]]:
    """The partitions to look at, grouped by their leader."""
    metadata = cluster.metadata([args.topic] if args.topic is not None else None)
    if args.topic is not None:
        error = metadata.topic_errors.get(args.topic)
        if error is not None:
            raise KafkaApiError(error, f"topic {args.topic}: {error_name(error)}")
        if args.partition is not None and args.partition not in metadata.leaders[args.topic]:
            raise KafkaApiError(
                ErrorCode.unknown_topic_or_partition,
                f"{args.topic}-{args.partition}: "
                f"{error_name(ErrorCode.unknown_topic_or_partition)}",
            )
    by_leader: dict[int, list[tuple[str, int]]] = defaultdict(list)
    for topic, leaders in sorted(metadata.leaders.items()):
        for partition, leader in sorted(leaders.items()):
            if args.partition is not None and partition != args.partition:
                continue
            if args.broker_id is not None and leader != args.broker_id:
                continue
            by_leader[leader].append((topic, partition))
    return by_leader


def open_transactions(
    cluster: Cluster, by_leader: dict[int, list[tuple[str, int]]]
) -> tuple[list[OpenTransaction], list[str]]:
    """Every open transaction on the partitions, and a line for each partition that could
    not be described."""
    found: list[OpenTransaction] = []
    problems: list[str] = []
    for leader, partitions in sorted(by_leader.items()):
        if leader < 0:
            problems += [f"{t}-{p} has no leader" for t, p in partitions]
            continue
        answers = describe_producers(cluster.node(leader), partitions)
        for topic, partition in partitions:
            answer = answers.get((topic, partition))
            if answer is None or answer.error_code != ErrorCode.none:
                reason = "no answer" if answer is None else error_name(answer.error_code)
                problems.append(f"cannot describe the producers of {topic}-{partition}: {reason}")
                continue
            found += [
                OpenTransaction(
                    topic,
                    partition,
                    p.producer_id,
                    p.producer_epoch,
                    p.coordinator_epoch,
                    p.current_txn_start_offset,
                    p.last_timestamp,
                )
                for p in answer.active_producers
                if p.current_txn_start_offset >= 0
            ]
    return found, problems


def _coordinator_claims(cluster: Cluster, producer_ids: set[int]) -> dict[int, list[Any]]:
    """For each producer id, the coordinators' descriptions of the transactional ids that
    use it. ListTransactions goes to every broker (each lists the ids it coordinates), and
    each id is described by the broker that listed it: its coordinator."""
    claims: dict[int, list[Any]] = defaultdict(list)
    for node in cluster.brokers():
        connection = cluster.node(node.node_id)
        listing = list_transactions(connection, producer_ids=sorted(producer_ids))
        for txn in listing.transaction_states:
            if txn.producer_id not in producer_ids:
                continue
            try:
                state = describe_transaction(connection, txn.transactional_id)
            except KafkaApiError as exc:
                if exc.code == ErrorCode.transactional_id_not_found:
                    continue  # expired between the two requests
                raise
            claims[txn.producer_id].append(state)
    return claims


def _is_hanging(txn: OpenTransaction, claims: list[Any]) -> bool:
    """True unless some coordinator has this producer's transaction in flight with this
    partition in it: then the coordinator itself will write the marker."""
    for state in claims:
        if (
            state.producer_id == txn.producer_id
            and state.transaction_state in _IN_FLIGHT
            and (txn.topic, txn.partition) in partitions_of(state)
        ):
            return False
    return True


def find_hanging(
    cluster: Cluster,
    by_leader: dict[int, list[tuple[str, int]]],
    max_timeout_ms: int,
    now_ms: int,
) -> tuple[list[OpenTransaction], list[str]]:
    """Open transactions that have been open longer than any live transaction can be
    and that no coordinator is going to end.

    The partition does not know when a transaction began, but it knows the producer's
    last write, which is later: a producer silent for longer than the maximum transaction
    timeout has a transaction that began longer ago than that too. Only then is the
    coordinator asked, so a short-lived, healthy transaction is never even considered.
    """
    opened, problems = open_transactions(cluster, by_leader)
    candidates = [t for t in opened if now_ms - t.last_timestamp > max_timeout_ms]
    if not candidates:
        return [], problems
    claims = _coordinator_claims(cluster, {t.producer_id for t in candidates})
    hanging = [t for t in candidates if _is_hanging(t, claims.get(t.producer_id, []))]
    return hanging, problems


def run_find_hanging(args: argparse.Namespace) -> int:
    if args.partition is not None and args.topic is None:
        raise UsageError("--partition needs --topic")
    if args.broker_id is not None and args.topic is not None:
        raise UsageError("give --broker-id or --topic, not both")
    with _cluster(args) as cluster:
        by_leader = _partitions_to_check(cluster, args)
        now = now_ms()
        hanging, problems = find_hanging(
            cluster, by_leader, args.max_transaction_timeout * 60_000, now
        )
    for line in problems:
        print(f"onceflow: error: {line}", file=sys.stderr)
    if not hanging:
        print("No hanging transactions found.")
    else:
        _print_table(
            (
                "Topic",
                "Partition",
                "ProducerId",
                "ProducerEpoch",
                "CoordinatorEpoch",
                "StartOffset",
                "LastTimestamp",
                "Duration(min)",
            ),
            [
                (
                    t.topic,
                    t.partition,
                    t.producer_id,
                    t.producer_epoch,
                    t.coordinator_epoch,
                    t.start_offset,
                    t.last_timestamp,
                    (now - t.last_timestamp) // 60_000,
                )
                for t in hanging
            ],
        )
    return 1 if problems else 0


# ---- abort -----------------------------------------------------------------------------


def _check_abort_args(args: argparse.Namespace) -> None:
    by_id = args.producer_id is not None
    if by_id == (args.start_offset is not None):
        raise UsageError("give either --start-offset or --producer-id")
    if by_id and (args.producer_epoch is None or args.coordinator_epoch is None):
        raise UsageError("--producer-id needs --producer-epoch and --coordinator-epoch")
    if not by_id and (args.producer_epoch is not None or args.coordinator_epoch is not None):
        raise UsageError("--producer-epoch and --coordinator-epoch go with --producer-id")


def _abort_target(args: argparse.Namespace, connection: Connection) -> OpenTransaction:
    """The producer id, epoch and coordinator epoch to put in the ABORT marker: given, or
    those of the producer whose open transaction starts at --start-offset."""
    if args.producer_id is not None:
        return OpenTransaction(
            args.topic,
            args.partition,
            args.producer_id,
            args.producer_epoch,
            args.coordinator_epoch,
            -1,
            -1,
        )
    return open_transaction_at(connection, args.topic, args.partition, args.start_offset)


def open_transaction_at(
    connection: Connection, topic: str, partition: int, start_offset: int
) -> OpenTransaction:
    """The open transaction that starts at `start_offset` of a partition, as its leader
    (`connection`) describes its producer."""
    for p in producers_of(connection, topic, partition):
        if p.current_txn_start_offset == start_offset:
            return OpenTransaction(
                topic,
                partition,
                p.producer_id,
                p.producer_epoch,
                p.coordinator_epoch,
                p.current_txn_start_offset,
                p.last_timestamp,
            )
    raise CliError(f"no open transaction starts at offset {start_offset} of {topic}-{partition}")


def write_abort_marker(connection: Connection, txn: OpenTransaction) -> None:
    """WriteTxnMarkers with one ABORT marker for one partition, to its leader (what
    Kafka's Admin.abortTransaction sends); raise on the partition's error code."""
    version = connection.version_for(WRITE_TXN_MARKERS)
    topic = request_entity(
        WRITE_TXN_MARKERS,
        version,
        "WritableTxnMarkerTopic",
        name=txn.topic,
        partition_indexes=(txn.partition,),
    )
    marker = request_entity(
        WRITE_TXN_MARKERS,
        version,
        "WritableTxnMarker",
        producer_id=txn.producer_id,
        producer_epoch=txn.producer_epoch,
        transaction_result=False,
        topics=(topic,),
        coordinator_epoch=txn.coordinator_epoch,
        transaction_version=0,
    )
    request = build(request_type(WRITE_TXN_MARKERS, version), markers=(marker,))
    response = connection.call_at(WRITE_TXN_MARKERS, version, request)
    codes = [
        p.error_code
        for m in response.markers
        for t in m.topics
        if t.name == txn.topic
        for p in t.partitions
        if p.partition_index == txn.partition
    ]
    if not codes:
        raise CliError(f"{connection.address} did not answer for {txn.topic}-{txn.partition}")
    if codes[0] != ErrorCode.none:
        raise KafkaApiError(
            codes[0],
            f"cannot abort the transaction of producer {txn.producer_id} on "
            f"{txn.topic}-{txn.partition}: {error_name(codes[0])}",
        )


def run_abort(args: argparse.Namespace) -> int:
    _check_abort_args(args)
    with _cluster(args) as cluster:
        _, connection = cluster.leader(args.topic, args.partition)
        txn = _abort_target(args, connection)
        write_abort_marker(connection, txn)
    started = f", which started at offset {txn.start_offset}" if txn.start_offset >= 0 else ""
    print(
        f"Aborted the transaction of producer {txn.producer_id} (epoch {txn.producer_epoch}) "
        f"on {txn.topic}-{txn.partition}{started}."
    )
    return 0
