"""`onceflow transactions list --two-phase` and `complete` (KIP-939): find and resolve
prepared two-phase commit transactions.

No timeout ends such a transaction: its external coordinator (a Spark driver, a database
transaction) decides. One it forgot holds the last stable offset of its partitions for
ever, so an operator needs to see them with their age and to complete one, given the
producer id and epoch it must match (the scope of Flink's FLIP-572 tool): committing a
transaction that is not the one asked for would make half of another decision visible.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from onceflow.cli.command_config import wire_security
from onceflow.cli.common import CliError, non_negative_int
from onceflow.cli.kafka_wire import wire_cluster
from onceflow.client.cluster import Cluster
from onceflow.client.participant import complete
from onceflow.client.participant_state import PreparedTransaction
from onceflow.client.txn_admin import (
    IN_FLIGHT,
    describe_transaction,
    is_two_phase,
    millis,
    now_ms,
    partitions_of,
    two_phase_in_flight,
)

__all__ = ["describe_note", "register_complete", "run_list_two_phase"]

Table = Callable[[Sequence[str], Iterable[Sequence[object]]], None]


def register_complete(actions: Any, common: argparse.ArgumentParser) -> None:
    """The `complete` action, beside the others of `onceflow transactions`."""
    complete_parser = actions.add_parser(
        "complete",
        parents=[common],
        help="commit or abort a prepared two-phase commit transaction (KIP-939)",
    )
    complete_parser.add_argument("--transactional-id", required=True)
    complete_parser.add_argument("--producer-id", type=non_negative_int, required=True)
    complete_parser.add_argument(
        "--producer-epoch",
        type=non_negative_int,
        required=True,
        help="the epoch the prepared transaction's records carry (its prepared state's)",
    )
    decision = complete_parser.add_mutually_exclusive_group(required=True)
    decision.add_argument("--commit", action="store_true")
    decision.add_argument("--abort", action="store_true")
    complete_parser.set_defaults(func=run_complete, command_parser=complete_parser)


def run_list_two_phase(cluster: Cluster, print_table: Table) -> int:
    """Every open two-phase commit transaction on every coordinator, oldest first."""
    rows: list[tuple[object, ...]] = []
    now = now_ms()
    for node_id, state in two_phase_in_flight(cluster):
        start = millis(state.transaction_start_time)
        rows.append(
            (
                state.transactional_id,
                node_id,
                state.producer_id,
                state.producer_epoch,
                state.transaction_state,
                now - start if start >= 0 else "None",
                ",".join(f"{t}-{p}" for t, p in partitions_of(state)),
            )
        )
    rows.sort(key=lambda r: -r[5] if isinstance(r[5], int) else 0)
    headers = (
        "TransactionalId",
        "Coordinator",
        "ProducerId",
        "ProducerEpoch",
        "TransactionState",
        "AgeMs",
        "TopicPartitions",
    )
    print_table(headers, rows)
    return 0


def describe_note(timeout_ms: int, state: str, age_ms: int) -> None:
    """Below `describe`'s table (on stderr, so the table stays Kafka's): a two-phase commit
    transaction has no timeout, and how to complete it."""
    if not is_two_phase(timeout_ms) or state not in IN_FLIGHT:
        return
    print(
        f"two-phase commit (KIP-939): no timeout ends this transaction; open for {age_ms} ms. "
        "Its coordinator completes it; if it was forgotten, `onceflow transactions complete` "
        "commits or aborts it.",
        file=sys.stderr,
    )


def run_complete(args: argparse.Namespace) -> int:
    """Checked against the coordinator first (the id must have an open transaction of this
    producer id), then ended by a keepPreparedTxn instance only if the open transaction is
    exactly the one given (producer id and epoch)."""
    txn_id, producer_id, epoch = args.transactional_id, args.producer_id, args.producer_epoch
    with wire_cluster(args) as cluster:
        _, connection = cluster.transaction_coordinator(txn_id)
        state = describe_transaction(connection, txn_id)
        bootstrap = args.bootstrap_server
    if state.transaction_state not in IN_FLIGHT or state.producer_id != producer_id:
        raise CliError(
            f"{txn_id} has no open transaction of producer {producer_id} (it is "
            f"{state.transaction_state}, producer {state.producer_id}): nothing done"
        )
    prepared = PreparedTransaction(txn_id, producer_id, epoch)
    ended = complete(prepared, args.commit, bootstrap, security=wire_security(args))
    if not ended:
        raise CliError(
            f"the open transaction of {txn_id} is not producer {producer_id} epoch {epoch}'s: "
            "nothing aborted"
        )
    verb = "Committed" if args.commit else "Aborted"
    print(f"{verb} the prepared transaction of {txn_id} (producer {producer_id}, epoch {epoch}).")
    return 0
