"""KIP-664 transaction tooling: DescribeProducers, DescribeTransactions, ListTransactions, and
WriteTxnMarkers as an admin client sends it to abort a hanging transaction.

A hanging transaction is one a partition holds open while its coordinator knows nothing of
it (a late write after an abort, in Kafka before KIP-890). It pins the last stable offset, so
read_committed consumers stop below it for good. These APIs let an operator see both sides,
the partition's producer state and the coordinator's transactions, and end the transaction
on the partition with an ABORT marker, as Kafka's `Admin.abortTransaction` does.

Authorization is Kafka's: DescribeProducers needs READ on each topic; DescribeTransactions
DESCRIBE on each transactional id, and lists only the topics the principal may DESCRIBE;
ListTransactions lists only the ids it may DESCRIBE; WriteTxnMarkers needs ALTER (Kafka
3.8+, for the abort tooling) or CLUSTER_ACTION on the cluster, so an unprivileged
principal cannot abort someone else's transaction.
"""

from __future__ import annotations

import datetime
import logging
from collections import defaultdict
from typing import Any

from onceflow.broker.handlers import authz
from onceflow.broker.handlers.base import Handler, RequestContext
from onceflow.broker.topics import OFFSETS_TOPIC, SHARE_STATE_TOPIC
from onceflow.client_regex import ClientRegex, PatternError
from onceflow.coordinator.transaction.state import COMPLETED_STATES, TxnState
from onceflow.errors import ErrorCode, KafkaError
from onceflow.protocol.api_versions import ApiKey
from onceflow.security.acl import AclOperation, ResourceType
from onceflow.storage.partition_log import PartitionLog

log = logging.getLogger(__name__)

#: How long a WriteTxnMarkers answer waits for its markers to be replicated.
MARKER_TIMEOUT_MS = 30_000

__all__ = ["HANDLERS", "WRITE_TXN_MARKERS"]

WRITE_TXN_MARKERS = 27  # Kafka's API key (an inter-broker API that admin clients also send)
NO_THROTTLE = datetime.timedelta(0)
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_STATES_BY_NAME = {state.display: state for state in TxnState}


def _timestamp(ms: int) -> datetime.datetime:
    """kio carries int64 milliseconds as datetimes; -1 ("none") must survive the trip."""
    return _EPOCH + datetime.timedelta(milliseconds=ms)


async def handle_describe_producers(ctx: RequestContext, request: Any) -> Any:
    """The partition side of KIP-664: every producer the partition's state still holds,
    with the first offset of its open transaction there (-1 when none)."""
    denied = authz.denied(
        ctx, AclOperation.READ, ResourceType.TOPIC, (t.name for t in request.topics)
    )
    topics = []
    for topic in request.topics:
        partitions = []
        for index in topic.partition_indexes:
            try:
                if topic.name in denied:
                    raise KafkaError(ErrorCode.topic_authorization_failed)
                plog = ctx.broker.leader_log(topic.name, index)
            except KafkaError as exc:
                partitions.append(
                    ctx.entity(
                        "PartitionResponse",
                        partition_index=index,
                        error_code=exc.code,
                        error_message=authz.DENIED_MESSAGES.get(exc.code),
                        active_producers=(),
                    )
                )
                continue
            producers = plog.producer_state.producers
            partitions.append(
                ctx.entity(
                    "PartitionResponse",
                    partition_index=index,
                    error_code=ErrorCode.none,
                    error_message=None,
                    active_producers=tuple(
                        ctx.entity(
                            "ProducerState",
                            producer_id=entry.producer_id,
                            producer_epoch=entry.epoch,
                            last_sequence=entry.last_seq,
                            last_timestamp=entry.last_timestamp,
                            coordinator_epoch=entry.coordinator_epoch,
                            current_txn_start_offset=entry.txn_first_offset,
                        )
                        for _, entry in sorted(producers.items())
                    ),
                )
            )
        topics.append(ctx.entity("TopicResponse", name=topic.name, partitions=tuple(partitions)))
    return ctx.response(throttle_time=NO_THROTTLE, topics=tuple(topics))


async def handle_describe_transactions(ctx: RequestContext, request: Any) -> Any:
    """The coordinator side: one transactional id's state, as Kafka names it, and the
    partitions of its current transaction. A Dead id is on its way out: not found."""
    states = []
    for txn_id in request.transactional_ids:
        coordinator = ctx.broker.txn_coordinator
        allowed = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn_id)
        owned = allowed and bool(txn_id) and coordinator.owns(txn_id)
        meta = coordinator.txns.get(txn_id) if owned else None
        if meta is None or meta.state == TxnState.DEAD:
            if not allowed:
                error = ErrorCode.transactional_id_authorization_failed
            elif not txn_id:
                error = ErrorCode.invalid_request
            elif not owned:
                error = ErrorCode.not_coordinator  # its log partition is offline
            else:
                error = ErrorCode.transactional_id_not_found
            states.append(
                ctx.entity(
                    "TransactionState",
                    error_code=error,
                    transactional_id=txn_id,
                    transaction_state="",
                    transaction_timeout=datetime.timedelta(0),
                    transaction_start_time=_timestamp(-1),
                    producer_id=-1,
                    producer_epoch=-1,
                    topics=(),
                )
            )
            continue
        by_topic: dict[str, list[int]] = defaultdict(list)
        for topic, partition in sorted(meta.partitions):
            by_topic[topic].append(partition)
        hidden = authz.denied(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, by_topic)
        states.append(
            ctx.entity(
                "TransactionState",
                error_code=ErrorCode.none,
                transactional_id=txn_id,
                transaction_state=meta.state.display,
                transaction_timeout=datetime.timedelta(milliseconds=meta.timeout_ms),
                transaction_start_time=_timestamp(meta.start_ms),
                producer_id=meta.producer_id,
                producer_epoch=meta.producer_epoch,
                topics=tuple(
                    ctx.entity("TopicData", topic=topic, partitions=tuple(parts))
                    for topic, parts in by_topic.items()
                    if topic not in hidden
                ),
            )
        )
    return ctx.response(throttle_time=NO_THROTTLE, transaction_states=tuple(states))


async def handle_list_transactions(ctx: RequestContext, request: Any) -> Any:
    """Every transactional id this coordinator knows, filtered by state name, producer id,
    (v1, KIP-994) by running longer than a duration and (v2, KIP-1152) by a regular
    expression the whole id matches, by RE2 in linear time (client_regex.py); a pattern
    RE2 refuses answers INVALID_REGULAR_EXPRESSION.

    A state name Kafka does not know is echoed back in unknown_state_filters and filters
    nothing. Unlike Kafka, the duration filter keeps only transactions that are running:
    an id with no transaction in flight has no duration, and Kafka's answer for it (time
    since a start that never was, or since an old start) is the known KAFKA-15546 confusion.
    """
    wanted_states: set[TxnState] = set()
    unknown: list[str] = []
    for name in request.state_filters:
        state = _STATES_BY_NAME.get(name)
        if state is None:
            unknown.append(name)
        else:
            wanted_states.add(state)
    wanted_ids = set(request.producer_id_filters)
    duration_ms = int(getattr(request, "duration_filter", -1))
    pattern_text = getattr(request, "transactional_id_pattern", None)
    pattern = None
    if pattern_text:  # null or empty: no filter
        try:
            pattern = ClientRegex(pattern_text)
        except PatternError as exc:
            log.debug("ListTransactions pattern %r refused: %s", pattern_text, exc)
            return ctx.response(
                throttle_time=NO_THROTTLE,
                error_code=ErrorCode.invalid_regular_expression,
                unknown_state_filters=(),
                transaction_states=(),
            )
    now = ctx.broker.clock.now_ms()
    listed = []
    for txn_id, meta in sorted(ctx.broker.txn_coordinator.txns.items()):
        if meta.state == TxnState.DEAD or not ctx.broker.txn_coordinator.owns(txn_id):
            continue  # expiring (Kafka hides these too), or on an offline log partition
        if wanted_ids and meta.producer_id not in wanted_ids:
            continue
        if wanted_states and meta.state not in wanted_states:
            continue
        if duration_ms >= 0 and (
            meta.state in COMPLETED_STATES
            or meta.start_ms < 0
            or now - meta.start_ms <= duration_ms
        ):
            continue
        if pattern is not None and not pattern.matches(txn_id):
            continue
        if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn_id):
            continue
        listed.append(
            ctx.entity(
                "TransactionState",
                transactional_id=txn_id,
                producer_id=meta.producer_id,
                transaction_state=meta.state.display,
            )
        )
    return ctx.response(
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        unknown_state_filters=tuple(unknown),
        transaction_states=tuple(listed),
    )


async def handle_write_txn_markers(ctx: RequestContext, request: Any) -> Any:
    """Append the requested COMMIT/ABORT markers, each with its producer id, epoch and
    coordinator epoch, and answer once they are durable.

    On one broker the coordinator writes its own markers directly; this request comes
    from an admin client aborting a hanging transaction (Kafka's Admin.abortTransaction).
    Each partition gets its own error code: a marker with an older producer epoch
    (INVALID_PRODUCER_EPOCH) or coordinator epoch (TRANSACTION_COORDINATOR_FENCED) is
    refused exactly as the log refuses it. An aborted or committed `__consumer_offsets`
    partition also settles the producer's pending transactional offsets there, and a
    `__share_group_state` one its transactional share acknowledgements.
    """
    if not (
        authz.cluster_authorized(ctx, AclOperation.ALTER, quiet=True)
        or authz.cluster_authorized(ctx, AclOperation.CLUSTER_ACTION)
    ):
        return _markers_refused(ctx, request)
    broker = ctx.broker
    # Every marker is appended first, in one step (no await between them): markers of
    # transactions decided together (CompleteTransactions) then show all at once. Only
    # then does the answer wait for them to be durable.
    errors: list[dict[tuple[str, int], ErrorCode]] = []
    written: list[tuple[int, PartitionLog, int]] = []
    for n, marker in enumerate(request.markers):
        commit = bool(marker.transaction_result)
        errors.append({})
        for topic in marker.topics:
            for index in topic.partition_indexes:
                try:
                    plog = broker.leader_log(topic.name, index)
                    appended = plog.append_marker(
                        marker.producer_id, marker.producer_epoch, marker.coordinator_epoch, commit
                    )
                except KafkaError as exc:
                    errors[n][(topic.name, index)] = exc.code
                    continue
                broker.writes.appended(plog)
                written.append((n, plog, appended.last_offset))
                errors[n][(topic.name, index)] = ErrorCode.none
    for n, plog, offset in written:
        marker = request.markers[n]
        wait = broker.writes.acknowledgement(plog, offset, -1, MARKER_TIMEOUT_MS)
        if wait is not None:
            try:
                await wait
            except KafkaError as exc:
                # Not replicated as acks=all asks: the client retries (markers are
                # idempotent).
                errors[n][(plog.topic, plog.partition)] = exc.code
                continue
            except (OSError, RuntimeError):
                # The marker is in the log but not known to be on disk: the client must
                # not take it as written, and may retry (markers are idempotent).
                errors[n][(plog.topic, plog.partition)] = ErrorCode.kafka_storage_error
                continue
        commit = bool(marker.transaction_result)
        if plog.topic == OFFSETS_TOPIC:
            broker.group_coordinator.complete_txn(marker.producer_id, commit, plog.partition)
        elif plog.topic == SHARE_STATE_TOPIC and broker.writes.on_share_marker is not None:
            # A share coordinator's transactional acknowledgements (TxnShareAcknowledge).
            broker.writes.on_share_marker(marker.producer_id, commit, plog.partition)
    results = []
    for marker, marker_errors in zip(request.markers, errors, strict=True):
        by_topic: dict[str, list[Any]] = defaultdict(list)
        for (topic_name, index), error in marker_errors.items():
            by_topic[topic_name].append(
                ctx.entity(
                    "WritableTxnMarkerPartitionResult", partition_index=index, error_code=error
                )
            )
        results.append(
            ctx.entity(
                "WritableTxnMarkerResult",
                producer_id=marker.producer_id,
                topics=tuple(
                    ctx.entity("WritableTxnMarkerTopicResult", name=name, partitions=tuple(parts))
                    for name, parts in by_topic.items()
                ),
            )
        )
    return ctx.response(markers=tuple(results))


def _markers_refused(ctx: RequestContext, request: Any) -> Any:
    """CLUSTER_AUTHORIZATION_FAILED on every partition of every marker; nothing written."""
    error = ErrorCode.cluster_authorization_failed
    return ctx.response(
        markers=tuple(
            ctx.entity(
                "WritableTxnMarkerResult",
                producer_id=marker.producer_id,
                topics=tuple(
                    ctx.entity(
                        "WritableTxnMarkerTopicResult",
                        name=topic.name,
                        partitions=tuple(
                            ctx.entity(
                                "WritableTxnMarkerPartitionResult",
                                partition_index=index,
                                error_code=error,
                            )
                            for index in topic.partition_indexes
                        ),
                    )
                    for topic in marker.topics
                ),
            )
            for marker in request.markers
        )
    )


HANDLERS: dict[int, Handler] = {
    ApiKey.DESCRIBE_PRODUCERS: handle_describe_producers,
    ApiKey.DESCRIBE_TRANSACTIONS: handle_describe_transactions,
    ApiKey.LIST_TRANSACTIONS: handle_list_transactions,
    WRITE_TXN_MARKERS: handle_write_txn_markers,
}
