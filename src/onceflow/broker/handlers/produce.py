"""Produce: validate each partition's batches, append them, answer per durability.

A bad batch fails only its own partition; the others in the request still succeed. With
acks=-1 in durable mode the response waits for the group commit that covers the append; a
partition whose fsync fails then answers KAFKA_STORAGE_ERROR, never success. Below the log
dir's free-space threshold, client data is refused with KAFKA_STORAGE_ERROR (retriable).
A batch refused for some of its records names them (KIP-467, records/validation.py).

Authorization is Kafka's: transactional records need WRITE on the transactional id (else
the whole request fails), each topic WRITE (else TOPIC_AUTHORIZATION_FAILED for its
partitions, before anything else is checked). Idempotence needs nothing more here: since
KIP-679 it is InitProducerId that checks IDEMPOTENT_WRITE. A topic this broker would
auto-create also needs CREATE, as Metadata's auto-creation does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
from typing import TYPE_CHECKING, Any

from onceflow.broker.handlers import authz
from onceflow.broker.handlers.base import RequestContext
from onceflow.broker.handlers.fetch import LEADER_MOVED, current_leader, node_endpoints
from onceflow.broker.responses import NO_RESPONSE, Deferred
from onceflow.broker.topics import INTERNAL_TOPICS
from onceflow.broker.verification import RemoteVerification
from onceflow.errors import ErrorCode, KafkaError, ProtocolError
from onceflow.protocol import codec, txn_support
from onceflow.protocol.txn_support import TxnSupport
from onceflow.records.batch import BatchHeader, validate_produced_batches
from onceflow.records.validation import InvalidRecords, TimestampBounds, check_records
from onceflow.security.acl import AclOperation, ResourceType
from onceflow.storage.partition_log import AppendResult, PartitionLog

if TYPE_CHECKING:
    from onceflow.broker.services import BrokerServices

_TOPIC_IDS = 13  # Produce v13 names topics by id (KIP-516)
_RECORD_ERRORS = 8  # Produce v8 names the records that failed a batch (KIP-467)


async def handle_produce(ctx: RequestContext, request: Any) -> Any:
    if request.topic_data is None or any(t.partition_data is None for t in request.topic_data):
        # Flexible versions can encode a null array where Kafka allows none: its parser
        # refuses the request, and the connection is closed.
        raise ProtocolError("malformed Produce request: null topics or partitions")
    broker = ctx.broker
    acks = request.acks
    if not _transaction_authorized(ctx, request):
        error = ErrorCode.transactional_id_authorization_failed
        return NO_RESPONSE if acks == 0 else _refused(ctx, request, error)
    names = _topic_names(ctx, request)
    denied = _denied_topics(ctx, names)
    timeout_ms = int(request.timeout.total_seconds() * 1000)
    step = _PartitionStep(ctx, request, txn_support.for_produce(ctx.api_version), timeout_ms)
    # One answer per partition, in the request's order; None while the partition's first
    # transactional write waits for the coordinator, who is asked once for all of them.
    answers: list[list[_Answer | None]] = []
    asking: list[tuple[int, int, _Question]] = []
    for topic_data, name in zip(request.topic_data, names, strict=True):
        row: list[_Answer | None] = []
        for data in topic_data.partition_data:
            outcome = step.run(name, data, denied)
            if isinstance(outcome, _Question):
                asking.append((len(answers), len(row), outcome))
                row.append(None)
            else:
                row.append(outcome)
        answers.append(row)
    if asking:
        replies = await broker.writes.ask_coordinator_all([q.need for _, _, q in asking])
        for (t, p, question), reply in zip(asking, replies, strict=True):
            topic_data = request.topic_data[t]
            answered = dataclasses.replace(question, need=reply)
            outcome = step.run(names[t], topic_data.partition_data[p], denied, answered)
            assert not isinstance(outcome, _Question)  # answered: never asks again
            answers[t][p] = outcome
    waits: list[asyncio.Future[None]] = []
    waiting: list[tuple[int, int]] = []  # (topic index, partition index) of each wait
    leaders: set[int] = set()  # named in NOT_LEADER_OR_FOLLOWER answers (v10+)
    topics: list[Any] = []
    for t, (topic_data, name, row) in enumerate(
        zip(request.topic_data, names, answers, strict=True)
    ):
        for p, answer in enumerate(row):
            assert answer is not None
            if answer.wait is not None:
                waits.append(answer.wait)
                waiting.append((t, p))
            if answer.leader is not None:
                leaders.add(answer.leader)
        topics.append(
            ctx.entity(
                "TopicProduceResponse",
                name=name,
                topic_id=getattr(topic_data, "topic_id", None),
                partition_responses=tuple(a.entity for a in row if a is not None),
            )
        )
    response = ctx.response(
        responses=tuple(topics),
        throttle_time=datetime.timedelta(0),
        node_endpoints=node_endpoints(ctx, leaders, _endpoint_entity(ctx)) if leaders else (),
    )
    if acks == 0:
        return NO_RESPONSE
    if not waits:
        return response
    return Deferred(waits, response, lambda errors: _unacknowledged(response, waiting, errors))


@dataclasses.dataclass(frozen=True, slots=True)
class _Question:
    """A first transactional write waiting for its coordinator (`need`; its answer once
    asked), with its batch headers, validated before the question against `log`."""

    need: RemoteVerification
    headers: list[BatchHeader]
    log: PartitionLog


@dataclasses.dataclass(frozen=True, slots=True)
class _Answer:
    entity: Any  # the partition's PartitionProduceResponse
    wait: asyncio.Future[None] | None  # the durability (acks) the answer waits for
    leader: int | None  # a leader named in a NOT_LEADER_OR_FOLLOWER answer (v10+)


class _PartitionStep:
    """One partition of a Produce request: checked, appended and answered, or (a first
    transactional write whose coordinator must be asked) the question to ask."""

    def __init__(self, ctx: RequestContext, request: Any, support: TxnSupport, timeout_ms: int):
        self._ctx = ctx
        self._request = request
        self._support = support
        self._timeout_ms = timeout_ms

    def run(
        self,
        name: str | None,
        data: Any,
        denied: frozenset[str],
        answered: _Question | None = None,
    ) -> _Answer | _Question:
        ctx, broker, acks = self._ctx, self._ctx.broker, self._request.acks
        error = ErrorCode.none
        message = None
        record_errors: tuple[Any, ...] = ()
        base_offset = log_start = -1
        append_time: datetime.datetime | None = None
        wait = leader = leader_id = None
        try:
            if name is None:
                raise KafkaError(ErrorCode.unknown_topic_id)
            if name in denied:
                raise KafkaError(ErrorCode.topic_authorization_failed)
            plog = _produce_log(broker, name, data.index, acks)
            records = data.records or b""
            # Asked once already: the log is looked up again (leadership may have moved
            # meanwhile), and the batch validated again only if the log is another one (the
            # topic was recreated, maybe with other limits, during the question).
            if answered is not None and answered.log is plog:
                headers = answered.headers
            else:
                headers = _validated(plog, records)
            try:
                result = _append(
                    broker,
                    plog,
                    records,
                    headers,
                    self._request.transactional_id,
                    data.index,
                    acks,
                    self._support,
                    None if answered is None else answered.need,
                )
            except RemoteVerification as need:  # the coordinator must be asked first
                return _Question(need, headers, plog)
            base_offset, log_start = result.first_offset, result.log_start_offset
            if result.log_append_time >= 0:
                append_time = datetime.datetime.fromtimestamp(
                    result.log_append_time / 1000, datetime.UTC
                )
            wait = broker.writes.acknowledgement(plog, result.last_offset, acks, self._timeout_ms)
        except KafkaError as exc:
            error, message = exc.code, exc.message or None
            if isinstance(exc, InvalidRecords) and ctx.api_version >= _RECORD_ERRORS:
                record_errors = tuple(
                    ctx.entity(
                        "BatchIndexAndErrorMessage",
                        batch_index=e.batch_index,
                        batch_index_error_message=e.message,
                    )
                    for e in exc.errors
                )
            if ctx.api_version >= 10 and error in LEADER_MOVED and name is not None:
                leader_id, epoch = current_leader(ctx, name, data.index)
                leader = ctx.entity("LeaderIdAndEpoch", leader_id=leader_id, leader_epoch=epoch)
        entity = ctx.entity(
            "PartitionProduceResponse",
            index=data.index,
            error_code=error,
            base_offset=base_offset,
            log_append_time=append_time,  # None (-1): the producer's CreateTime
            log_start_offset=log_start,
            record_errors=record_errors,
            error_message=message,
            **({} if leader is None else {"current_leader": leader}),
        )
        return _Answer(entity, wait, leader_id)


def _endpoint_entity(ctx: RequestContext) -> Any:
    return codec.nested(ctx.header.api_key, ctx.api_version, "NodeEndpoint")


def _transaction_authorized(ctx: RequestContext, request: Any) -> bool:
    """Kafka's check: transactional records need a transactional id the principal may WRITE."""
    if ctx.broker.authorizer is None or not authz.has_transactional_records(request):
        return True
    txn_id = request.transactional_id
    return txn_id is not None and ctx.authorized(
        AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id
    )


def _topic_names(ctx: RequestContext, request: Any) -> list[str | None]:
    """Each topic's name: given before v13, looked up by its topic id from v13 (None for an
    id no topic has: UNKNOWN_TOPIC_ID, before any authorization, and never auto-created)."""
    if ctx.api_version < _TOPIC_IDS:
        return [t.name for t in request.topic_data]
    return [
        None if t.topic_id is None else ctx.broker.topic_name_by_id(t.topic_id)
        for t in request.topic_data
    ]


def _denied_topics(ctx: RequestContext, topics: list[str | None]) -> frozenset[str]:
    """Topics without WRITE, and (alone, where Produce auto-creates) missing topics the
    principal may not CREATE."""
    broker = ctx.broker
    if broker.authorizer is None:
        return frozenset()
    names = {name for name in topics if name is not None}
    denied = authz.denied(ctx, AclOperation.WRITE, ResourceType.TOPIC, names)
    if broker.topology.produce_creates_topics:
        missing = [n for n in names - denied if broker.topic_partition_count(n) is None]
        if missing:
            denied |= authz.create_denied(ctx, missing)
    return denied


def _refused(ctx: RequestContext, request: Any, error: ErrorCode) -> Any:
    """Every partition of the request answering `error` (Kafka's getErrorResponse)."""
    message = authz.DENIED_MESSAGES.get(error)
    topics = tuple(
        ctx.entity(
            "TopicProduceResponse",
            name=getattr(topic, "name", None),
            topic_id=getattr(topic, "topic_id", None),
            partition_responses=tuple(
                ctx.entity(
                    "PartitionProduceResponse",
                    index=data.index,
                    error_code=error,
                    base_offset=-1,
                    log_append_time=None,
                    log_start_offset=-1,
                    record_errors=(),
                    error_message=message,
                )
                for data in topic.partition_data
            ),
        )
        for topic in request.topic_data
    )
    return ctx.response(responses=topics, throttle_time=datetime.timedelta(0))


def _unacknowledged(
    response: Any, waiting: list[tuple[int, int]], errors: list[KafkaError | None]
) -> Any:
    """The response with an error for each partition whose fsync failed or that was not
    replicated as acks=all asks: its data is not acknowledged."""
    parts = [list(t.partition_responses) for t in response.responses]
    for (t, p), error in zip(waiting, errors, strict=True):
        if error is not None:
            parts[t][p] = dataclasses.replace(
                parts[t][p],
                error_code=error.code,
                error_message=error.message,
                base_offset=-1,
                log_start_offset=-1,
                log_append_time=None,
            )
    topics = tuple(
        dataclasses.replace(topic, partition_responses=tuple(answers))
        for topic, answers in zip(response.responses, parts, strict=True)
    )
    return dataclasses.replace(response, responses=topics)


def _produce_log(broker: BrokerServices, topic: str, partition: int, acks: int) -> PartitionLog:
    if acks not in (0, 1, -1):
        raise KafkaError(ErrorCode.invalid_required_acks, f"acks={acks}")
    # Only the coordinators write internal topics (Kafka's internalTopicsAllowed); a
    # client's record there could stop the next start from loading the log.
    if topic in INTERNAL_TOPICS:
        raise KafkaError(
            ErrorCode.invalid_topic_exception, f"Cannot append to internal topic {topic}"
        )
    return broker.log_for_produce(topic, partition)


def _validated(plog: PartitionLog, records: bytes) -> list[BatchHeader]:
    headers = validate_produced_batches(records, plog.config.max_message_bytes)
    if len(headers) != 1:
        # Kafka's rule for Produce v3+: one batch per partition, so a retried batch can
        # never travel together with a new one.
        raise KafkaError(
            ErrorCode.invalid_record,
            f"{len(headers)} record batches for one partition; exactly 1 is allowed",
        )
    config = plog.config
    bounds = None
    if not config.log_append_time:
        now = plog.clock.now_ms()
        bounds = TimestampBounds.around(
            now, config.timestamp_before_max_ms, config.timestamp_after_max_ms
        )
    check_records(
        records,
        headers,
        partition=plog.name,
        compacted=config.cleanup_compact,
        timestamps=bounds,
    )
    return headers


def _append(
    broker: BrokerServices,
    plog: PartitionLog,
    records: bytes,
    headers: list[BatchHeader],
    transactional_id: str | None,
    partition: int,
    acks: int,
    support: TxnSupport,
    verified: RemoteVerification | None,
) -> AppendResult:
    if any(h.is_transactional for h in headers):
        broker.writes.verify_transactional(
            transactional_id, headers[0], plog.topic, partition, verified, support
        )
    # Below the free-space threshold client data waits; the space left is for what
    # finishes in-flight work (markers, the transaction log, offset commits).
    broker.disk.admit_client_write()
    broker.writes.check_replicas(plog, acks)
    result = plog.append_batches(records, headers)
    broker.writes.appended(plog)
    return result
