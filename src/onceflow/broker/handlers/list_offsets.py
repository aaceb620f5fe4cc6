"""ListOffsets: earliest, latest (the LSO for read_committed), and by timestamp.

Each topic needs DESCRIBE (Kafka's rule, whoever asks); without it its partitions answer
TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import datetime
from typing import Any

from onceflow.broker.handlers import authz
from onceflow.broker.handlers.base import RequestContext
from onceflow.broker.handlers.fetch import check_leader_epoch
from onceflow.errors import ErrorCode, KafkaError
from onceflow.security.acl import AclOperation, ResourceType

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
READ_COMMITTED = 1


async def handle_list_offsets(ctx: RequestContext, request: Any) -> Any:
    committed = ctx.api_version >= 2 and request.isolation_level == READ_COMMITTED
    denied = authz.denied(
        ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (t.name for t in request.topics)
    )
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            if topic.name in denied:
                error, offset, timestamp, epoch = ErrorCode.topic_authorization_failed, -1, -1, -1
            else:
                error, offset, timestamp, epoch = _lookup(
                    ctx,
                    topic.name,
                    p.partition_index,
                    p.timestamp,
                    committed,
                    getattr(p, "current_leader_epoch", -1),
                )
            partitions.append(
                ctx.entity(
                    "ListOffsetsPartitionResponse",
                    partition_index=p.partition_index,
                    error_code=error,
                    timestamp=timestamp,
                    offset=offset,
                    leader_epoch=epoch if error is ErrorCode.none else -1,
                )
            )
        topics.append(
            ctx.entity("ListOffsetsTopicResponse", name=topic.name, partitions=tuple(partitions))
        )
    return ctx.response(throttle_time=datetime.timedelta(0), topics=tuple(topics))


def _lookup(
    ctx: RequestContext,
    topic: str,
    partition: int,
    timestamp: int,
    committed: bool,
    current_epoch: int,
) -> tuple[ErrorCode, int, int, int]:
    """(error, offset, timestamp, leader epoch) of one partition's answer."""
    try:
        plog = ctx.broker.leader_log(topic, partition)
        check_leader_epoch(plog.leader_epoch, current_epoch)
    except KafkaError as exc:
        return exc.code, -1, -1, -1
    if plog.offline is not None:
        return ErrorCode.kafka_storage_error, -1, -1, -1
    epoch = plog.leader_epoch
    visible = ctx.broker.last_stable_offset(plog) if committed else plog.high_watermark
    if timestamp == LATEST:
        return ErrorCode.none, visible, -1, epoch
    if timestamp == EARLIEST:
        return ErrorCode.none, plog.log_start_offset, -1, epoch
    if timestamp == MAX_TIMESTAMP or timestamp < 0:
        return ErrorCode.none, -1, -1, epoch
    found = plog.offset_for_timestamp(timestamp)
    if found is None or found[0] >= visible:
        return ErrorCode.none, -1, -1, epoch
    return ErrorCode.none, found[0], found[1], epoch
