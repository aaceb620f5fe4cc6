"""The KIP-664 transaction admin calls, as Kafka's Admin makes them: ListTransactions,
DescribeTransactions, DescribeProducers, and an ABORT marker through WriteTxnMarkers; and
the search for hanging transactions built on them. `onceflow transactions` prints them,
the console shows them.

A *hanging* transaction is open on a partition while its coordinator is not going to end
it: the coordinator does not know the producer, or its transaction is over, or does not
include that partition. It holds the last stable offset back, so read_committed consumers
stop below it forever. Aborting a transaction that is *not* hanging breaks its atomicity.
"""

from __future__ import annotations

import datetime
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from onceflow.client.blocking import Connection
from onceflow.client.cluster import Cluster
from onceflow.client.errors import InvalidArgument, KafkaApiError, NotFound, error_name
from onceflow.client.wire import request_entity
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import build, request_type

__all__ = [
    "IN_FLIGHT",
    "OpenTransaction",
    "describe_producers",
    "describe_transaction",
    "find_hanging",
    "list_transactions",
    "millis",
    "now_ms",
    "open_transaction_at",
    "open_transactions",
    "partitions_by_leader",
    "partitions_of",
    "producers_of",
    "two_phase_in_flight",
    "write_abort_marker",
]

#: Coordinator states in which the coordinator itself will still write the markers.
IN_FLIGHT = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"})


def millis(value: Any) -> int:
    """kio hands int64 millisecond timestamps over as datetimes, durations as timedeltas."""
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    return int(value)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


#: The timeout a two-phase commit transaction (KIP-939) is described with: none, as Kafka
#: shows it. No timeout ends such a transaction; its external coordinator (or an operator)
#: completes it, and until then it holds the LSO of its partitions.
TWO_PHASE_TIMEOUT_MS = (1 << 31) - 1


def is_two_phase(timeout_ms: int) -> bool:
    """Whether a described transaction is a two-phase commit one, by its timeout."""
    return timeout_ms >= TWO_PHASE_TIMEOUT_MS


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


# ---- one broker's answers --------------------------------------------------------------


def list_transactions(
    connection: Connection,
    states: Sequence[str] = (),
    producer_ids: Sequence[int] = (),
    duration_ms: int = -1,
    id_pattern: str | None = None,
) -> Any:
    """The transactional ids this broker coordinates, filtered as asked."""
    response = connection.call(
        ApiKey.LIST_TRANSACTIONS,
        state_filters=tuple(states),
        producer_id_filters=tuple(producer_ids),
        duration_filter=duration_ms,
        transactional_id_pattern=id_pattern,
    )
    if response.error_code == ErrorCode.invalid_regular_expression:
        raise InvalidArgument(f"the broker refused the transactional id pattern {id_pattern!r}")
    if response.error_code != ErrorCode.none:
        raise KafkaApiError(
            response.error_code,
            f"cannot list transactions at {connection.address}: {error_name(response.error_code)}",
        )
    if response.unknown_state_filters:
        raise InvalidArgument(
            f"unknown transaction state {', '.join(response.unknown_state_filters)} "
            "(states are named like Ongoing, PrepareCommit, CompleteAbort)"
        )
    return response


def describe_transaction(connection: Connection, transactional_id: str) -> Any:
    """A transactional id's state at its coordinator (`connection`)."""
    response = connection.call(ApiKey.DESCRIBE_TRANSACTIONS, transactional_ids=(transactional_id,))
    found = [s for s in response.transaction_states if s.transactional_id == transactional_id]
    if not found:
        raise NotFound(f"{connection.address} did not describe transactional id {transactional_id}")
    state = found[0]
    if state.error_code != ErrorCode.none:
        raise KafkaApiError(
            state.error_code,
            f"cannot describe transactional id {transactional_id}: {error_name(state.error_code)}",
        )
    return state


def partitions_of(state: Any) -> list[tuple[str, int]]:
    return sorted((t.topic, p) for t in state.topics for p in t.partitions)


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
    """A partition's active producers, as its leader (`connection`) describes them."""
    answer = describe_producers(connection, [(topic, partition)]).get((topic, partition))
    if answer is None:
        raise NotFound(f"{connection.address} did not describe {topic}-{partition}")
    if answer.error_code != ErrorCode.none:
        detail = f" ({answer.error_message})" if answer.error_message else ""
        raise KafkaApiError(
            answer.error_code,
            f"cannot describe the producers of {topic}-{partition}: "
            f"{error_name(answer.error_code)}{detail}",
        )
    return list(answer.active_producers)


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
    raise NotFound(f"no open transaction starts at offset {start_offset} of {topic}-{partition}")


def write_abort_marker(connection: Connection, txn: OpenTransaction) -> None:
    """WriteTxnMarkers with one ABORT marker for one partition, to its leader (what
    Kafka's Admin.abortTransaction sends); raise on the partition's error code."""
    api = ApiKey.WRITE_TXN_MARKERS
    version = connection.version_for(api)
    topic = request_entity(
        api,
        version,
        "WritableTxnMarkerTopic",
        name=txn.topic,
        partition_indexes=(txn.partition,),
    )
    marker = request_entity(
        api,
        version,
        "WritableTxnMarker",
        producer_id=txn.producer_id,
        producer_epoch=txn.producer_epoch,
        transaction_result=False,
        topics=(topic,),
        coordinator_epoch=txn.coordinator_epoch,
        transaction_version=0,
    )
    request = build(request_type(api, version), markers=(marker,))
    response = connection.call_at(api, version, request)
    codes = [
        p.error_code
        for m in response.markers
        for t in m.topics
        if t.name == txn.topic
        for p in t.partitions
        if p.partition_index == txn.partition
    ]
    if not codes:
        raise NotFound(f"{connection.address} did not answer for {txn.topic}-{txn.partition}")
    if codes[0] != ErrorCode.none:
        raise KafkaApiError(
            codes[0],
            f"cannot abort the transaction of producer {txn.producer_id} on "
            f"{txn.topic}-{txn.partition}: {error_name(codes[0])}",
        )


# ---- the cluster's hanging transactions ------------------------------------------------


def partitions_by_leader(
    cluster: Cluster,
    topic: str | None = None,
    partition: int | None = None,
    broker_id: int | None = None,
) -> dict[int, list[tuple[str, int]]]:
    """The partitions of one topic (or every topic), one partition of it, or those one
    broker leads, grouped by their leader; a topic or partition the cluster lacks raises."""
    metadata = cluster.metadata([topic] if topic is not None else None)
    if topic is not None:
        error = metadata.topic_errors.get(topic)
        if error is not None:
            raise KafkaApiError(error, f"topic {topic}: {error_name(error)}")
        if partition is not None and partition not in metadata.leaders[topic]:
            raise KafkaApiError(
                ErrorCode.unknown_topic_or_partition,
                f"{topic}-{partition}: {error_name(ErrorCode.unknown_topic_or_partition)}",
            )
    by_leader: dict[int, list[tuple[str, int]]] = defaultdict(list)
    for name, leaders in sorted(metadata.leaders.items()):
        for index, leader in sorted(leaders.items()):
            if partition is not None and index != partition:
                continue
            if broker_id is not None and leader != broker_id:
                continue
            by_leader[leader].append((name, index))
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
            and state.transaction_state in IN_FLIGHT
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


def two_phase_in_flight(cluster: Cluster) -> Iterator[tuple[int, Any]]:
    """(coordinator's node id, DescribeTransactions state) of every two-phase commit
    transaction in flight on every coordinator of the cluster."""
    for node in cluster.brokers():
        connection = cluster.node(node.node_id)
        listed = list_transactions(connection, states=sorted(IN_FLIGHT)).transaction_states
        if not listed:
            continue
        ids = tuple(sorted(t.transactional_id for t in listed))
        answer = connection.call(ApiKey.DESCRIBE_TRANSACTIONS, transactional_ids=ids)
        for state in answer.transaction_states:
            if state.error_code != ErrorCode.none or state.transaction_state not in IN_FLIGHT:
                continue  # expired or ended between the two requests
            if is_two_phase(millis(state.transaction_timeout)):
                yield node.node_id, state
