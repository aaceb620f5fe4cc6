"""`onceflow transactions list|describe|describe-producers|find-hanging|abort|complete`.

The same jobs as Kafka's `kafka-transactions.sh`, over the Kafka protocol only, so they work
against an Apache Kafka cluster as well as Onceflow. confluent-kafka has none of these APIs:
the calls are Onceflow's own client's (`onceflow.client.txn_admin`); this module parses the
arguments and prints Kafka's tables.

`find-hanging` finds transactions no coordinator will end (see txn_admin) and `abort` ends
one with an ABORT marker. Aborting a transaction that is *not* hanging breaks its
atomicity: check first. `list --two-phase` and `complete` find and resolve prepared
two-phase commit transactions (KIP-939; see prepared_txns).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from onceflow.cli.command_config import add_command_config_option
from onceflow.cli.common import (
    CliError,
    UsageError,
    add_bootstrap_option,
    non_negative_int,
    positive_int,
)
from onceflow.cli.kafka_wire import wire_cluster
from onceflow.cli.prepared_txns import describe_note, register_complete, run_list_two_phase
from onceflow.client.blocking import Connection
from onceflow.client.cluster import Cluster
from onceflow.client.errors import InvalidArgument
from onceflow.client.txn_admin import (
    OpenTransaction,
    describe_transaction,
    find_hanging,
    list_transactions,
    millis,
    now_ms,
    open_transaction_at,
    partitions_by_leader,
    partitions_of,
    producers_of,
    write_abort_marker,
)
from onceflow.protocol.api_versions import ApiKey

__all__ = ["register"]

DEFAULT_TIMEOUT_MS = 30_000
DEFAULT_MAX_TXN_TIMEOUT_MIN = 15  # transaction.max.timeout.ms's default, in minutes
NO_VALUE = "None"


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
    listing.add_argument(
        "--two-phase",
        action="store_true",
        help="only open two-phase commit transactions (KIP-939), oldest first, with their "
        "age: no timeout ends them, so a forgotten one holds its partitions' LSO",
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
    register_complete(actions, common)


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


# ---- list ------------------------------------------------------------------------------


def run_list(args: argparse.Namespace) -> int:
    if args.two_phase:
        with _cluster(args) as cluster:
            return run_list_two_phase(cluster, _print_table)
    with _cluster(args) as cluster:
        rows = []
        for node in cluster.brokers():
            connection = cluster.node(node.node_id)
            _check_filters_supported(
                args, node.address, connection.version_for(ApiKey.LIST_TRANSACTIONS)
            )
            try:
                response = list_transactions(
                    connection,
                    states=args.state,
                    producer_ids=args.producer_id,
                    duration_ms=-1 if args.duration_filter is None else args.duration_filter,
                    id_pattern=args.transactional_id_pattern,
                )
            except InvalidArgument as exc:
                raise UsageError(str(exc)) from None
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


# ---- describe --------------------------------------------------------------------------


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
    describe_note(millis(state.transaction_timeout), state.transaction_state, duration)
    return 0


# ---- describe-producers ----------------------------------------------------------------


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


def run_find_hanging(args: argparse.Namespace) -> int:
    if args.partition is not None and args.topic is None:
        raise UsageError("--partition needs --topic")
    if args.broker_id is not None and args.topic is not None:
        raise UsageError("give --broker-id or --topic, not both")
    with _cluster(args) as cluster:
        by_leader = partitions_by_leader(cluster, args.topic, args.partition, args.broker_id)
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
