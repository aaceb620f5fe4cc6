"""DescribeTopicPartitions (KIP-966): topics and their partitions a page at a time, as
Kafka 4.x's admin client describes topics.

Kafka's DescribeTopicPartitionsRequestHandler: the topics asked for (all, when none is
named) from the cursor's topic on, in name order; at most response_partition_limit
partitions (capped at Kafka's max.request.partition.size.limit, 2000), and when a topic is
cut, or the limit is reached before the next one, `next_cursor` says where to go on. A
cursor whose topic is not among those named, or with a negative partition, is
INVALID_REQUEST for every topic. Each topic needs DESCRIBE: a named one refused answers
TOPIC_AUTHORIZATION_FAILED (with no id, after the others), and listing all leaves it out.
Named topics that do not exist answer UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION
for an illegal name). No eligible leader replicas here (no KIP-966 ELR): empty lists.
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from onceflow.broker.handlers import authz
from onceflow.broker.handlers.base import Handler, RequestContext
from onceflow.broker.topics import INTERNAL_TOPICS, validate_topic_name
from onceflow.errors import ErrorCode, KafkaError
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.topic_ids import ZERO_UUID
from onceflow.security.acl import AclOperation, ResourceType

MAX_PARTITIONS = 2000  # Kafka's max.request.partition.size.limit
NO_OPERATIONS = -(2**31)


async def handle_describe_topic_partitions(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    cursor = request.cursor
    first = cursor.topic_name if cursor is not None else ""
    every = not request.topics
    named = broker.topic_names() if every else [t.name for t in request.topics]
    wanted = sorted({n for n in named if n >= first})
    if cursor is not None and (
        (not every and cursor.topic_name not in wanted) or cursor.partition_index < 0
    ):
        return _failed(ctx, request, ErrorCode.invalid_request)
    allowed = [n for n in wanted if ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, n)]
    remaining = max(min(MAX_PARTITIONS, request.response_partition_limit), 1)
    topics: list[Any] = []
    next_cursor = None
    for name in allowed:
        if remaining == 0:
            next_cursor = ctx.entity("Cursor", topic_name=name, partition_index=0)
            break
        count = broker.topic_partition_count(name)
        operations = authz.authorized_operations(ctx, ResourceType.TOPIC, name)
        if count is None:
            if not every:
                topics.append(_topic(ctx, name, _missing(name), ZERO_UUID, (), operations))
            continue
        start = cursor.partition_index if cursor is not None and name == first else 0
        end = min(count, start + remaining)
        partitions = tuple(_partition(ctx, name, p) for p in range(start, end))
        topic_id = _topic_id(ctx, name)
        topics.append(_topic(ctx, name, ErrorCode.none, topic_id, partitions, operations))
        if end < count:
            next_cursor = ctx.entity("Cursor", topic_name=name, partition_index=end)
            break
        remaining -= len(partitions)
    if not every:
        topics += [
            _topic(ctx, name, ErrorCode.topic_authorization_failed, ZERO_UUID, ())
            for name in wanted
            if name not in allowed
        ]
    return ctx.response(
        throttle_time=datetime.timedelta(0), topics=tuple(topics), next_cursor=next_cursor
    )


def _missing(name: str) -> ErrorCode:
    try:
        validate_topic_name(name)
    except KafkaError as exc:
        return exc.code
    return ErrorCode.unknown_topic_or_partition


def _topic_id(ctx: RequestContext, name: str) -> uuid.UUID:
    """The topic's id; the zero id when it has none (a topic znode written without one)."""
    info = ctx.broker.topology.topic(name)
    text = "" if info is None else info.topic_id
    try:
        return uuid.UUID(text)
    except ValueError:
        return ZERO_UUID


def _topic(
    ctx: RequestContext,
    name: str,
    error: ErrorCode,
    topic_id: uuid.UUID,
    partitions: tuple[Any, ...],
    operations: int = NO_OPERATIONS,
) -> Any:
    return ctx.entity(
        "DescribeTopicPartitionsResponseTopic",
        error_code=error,
        name=name,
        topic_id=topic_id,
        is_internal=name in INTERNAL_TOPICS,
        partitions=partitions,
        topic_authorized_operations=operations,
    )


def _partition(ctx: RequestContext, topic: str, index: int) -> Any:
    view = ctx.broker.partition_view(topic, index)
    return ctx.entity(
        "DescribeTopicPartitionsResponsePartition",
        error_code=ErrorCode.none,
        partition_index=index,
        leader_id=view.leader,
        leader_epoch=view.leader_epoch,
        replica_nodes=view.replicas,
        isr_nodes=view.isr,
        eligible_leader_replicas=(),
        last_known_elr=(),
        offline_replicas=view.offline,
    )


def _failed(ctx: RequestContext, request: Any, error: ErrorCode) -> Any:
    """Kafka's error response: every named topic with the error, nothing else."""
    return ctx.response(
        throttle_time=datetime.timedelta(0),
        topics=tuple(_topic(ctx, t.name, error, ZERO_UUID, ()) for t in request.topics),
        next_cursor=None,
    )


HANDLERS: dict[int, Handler] = {
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: handle_describe_topic_partitions,
}
