"""Transactions (ListTransactions + DescribeTransactions on every coordinator), a
partition's producers (DescribeProducers), and hanging transactions found and aborted
exactly as `onceflow transactions find-hanging` and `abort` do."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from onceflow.client.cluster import Cluster
from onceflow.client.errors import KafkaApiError, error_name
from onceflow.client.txn_admin import (
    IN_FLIGHT,
    OpenTransaction,
    find_hanging,
    is_two_phase,
    list_transactions,
    millis,
    now_ms,
    open_transaction_at,
    partitions_of,
    producers_of,
    write_abort_marker,
)
from onceflow.console.clients import ActionRefused, KafkaClients
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey

__all__ = ["abort_hanging", "hanging", "producers", "transactions"]

# A transaction this far into its timeout is highlighted: its coordinator aborts it soon.
NEAR_TIMEOUT_FRACTION = 0.8
OPEN_STATES = IN_FLIGHT


def _transaction(state: Any, coordinator: int, now: int) -> dict[str, Any]:
    start = millis(state.transaction_start_time)
    timeout = millis(state.transaction_timeout)
    is_open = state.transaction_state in OPEN_STATES
    age = now - start if is_open and start >= 0 else None
    two_phase = is_two_phase(timeout)  # no timeout: shown with its age, never "near" one
    return {
        "transactional_id": state.transactional_id,
        "coordinator": coordinator,
        "state": state.transaction_state,
        "producer_id": state.producer_id,
        "producer_epoch": state.producer_epoch,
        "partitions": [f"{t}-{p}" for t, p in partitions_of(state)],
        "start_ms": start if start >= 0 else None,
        "age_ms": age,
        "timeout_ms": None if two_phase else timeout,
        "two_phase": two_phase,
        "near_timeout": not two_phase
        and age is not None
        and age >= NEAR_TIMEOUT_FRACTION * timeout,
    }


def transactions(clients: KafkaClients) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    with clients.wire() as cluster:
        now = now_ms()
        for node in cluster.brokers():
            connection = cluster.node(node.node_id)
            listed = list_transactions(connection).transaction_states
            if not listed:
                continue
            ids = tuple(sorted(t.transactional_id for t in listed))
            response = connection.call(ApiKey.DESCRIBE_TRANSACTIONS, transactional_ids=ids)
            for state in response.transaction_states:
                if state.error_code == ErrorCode.transactional_id_not_found:
                    continue  # expired between the two requests
                if state.error_code != ErrorCode.none:
                    raise KafkaApiError(
                        state.error_code,
                        f"cannot describe {state.transactional_id}: {error_name(state.error_code)}",
                    )
                rows.append(_transaction(state, node.node_id, now))
    rows.sort(key=lambda r: (r["state"] not in OPEN_STATES, r["transactional_id"]))
    return {"transactions": rows, "near_timeout_fraction": NEAR_TIMEOUT_FRACTION}


def producers(clients: KafkaClients, topic: str, partition: int) -> dict[str, Any]:
    with clients.wire() as cluster:
        leader, connection = cluster.leader(topic, partition)
        active = producers_of(connection, topic, partition)
    return {
        "topic": topic,
        "partition": partition,
        "leader": leader,
        "producers": [
            {
                "producer_id": p.producer_id,
                "producer_epoch": p.producer_epoch,
                "coordinator_epoch": p.coordinator_epoch,
                "last_sequence": p.last_sequence,
                "last_timestamp": p.last_timestamp,
                "txn_start_offset": (
                    p.current_txn_start_offset if p.current_txn_start_offset >= 0 else None
                ),
            }
            for p in active
        ],
    }


def _by_leader(cluster: Cluster, topic: str | None = None) -> dict[int, list[tuple[str, int]]]:
    metadata = cluster.metadata(None if topic is None else [topic])
    grouped: dict[int, list[tuple[str, int]]] = defaultdict(list)
    for name, leaders in sorted(metadata.leaders.items()):
        for partition, leader in sorted(leaders.items()):
            grouped[leader].append((name, partition))
    return grouped


def _find(clients: KafkaClients, cluster: Cluster, topic: str | None = None) -> Any:
    by_leader = _by_leader(cluster, topic)
    return find_hanging(cluster, by_leader, clients.settings.max_transaction_timeout_ms, now_ms())


def _row(t: OpenTransaction, now: int) -> dict[str, Any]:
    return {
        "topic": t.topic,
        "partition": t.partition,
        "producer_id": t.producer_id,
        "producer_epoch": t.producer_epoch,
        "coordinator_epoch": t.coordinator_epoch,
        "start_offset": t.start_offset,
        "last_timestamp": t.last_timestamp,
        "idle_ms": now - t.last_timestamp,
    }


def hanging(clients: KafkaClients) -> dict[str, Any]:
    with clients.wire() as cluster:
        found, problems = _find(clients, cluster)
    now = now_ms()
    return {
        "hanging": [_row(t, now) for t in found],
        "problems": problems,
        "max_transaction_timeout_ms": clients.settings.max_transaction_timeout_ms,
    }


def abort_hanging(
    clients: KafkaClients, topic: str, partition: int, start_offset: int
) -> dict[str, Any]:
    """Abort the transaction starting at `start_offset`, as `onceflow transactions abort
    --start-offset` does, but only while find-hanging still finds it hanging: a transaction
    its coordinator has since ended or will end is never aborted from here."""
    with clients.wire() as cluster:
        found, _ = _find(clients, cluster, topic)
        if not any(
            (t.topic, t.partition, t.start_offset) == (topic, partition, start_offset)
            for t in found
        ):
            raise ActionRefused(
                f"no hanging transaction starts at offset {start_offset} of {topic}-{partition} "
                "any more"
            )
        _, connection = cluster.leader(topic, partition)
        txn = open_transaction_at(connection, topic, partition, start_offset)
        write_abort_marker(connection, txn)
    return {
        "message": (
            f"Aborted the transaction of producer {txn.producer_id} (epoch "
            f"{txn.producer_epoch}) on {topic}-{partition}, which started at offset "
            f"{start_offset}."
        )
    }
