"""ListOffsets: earliest, latest (the LSO for read_committed), and by timestamp."""

from __future__ import annotations

import datetime
from typing import Any

from onceflow.broker.handlers.base import RequestContext
from onceflow.errors import ErrorCode

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
READ_COMMITTED = 1


async def handle_list_offsets(ctx: RequestContext, request: Any) -> Any:
    committed = ctx.api_version >= 2 and request.isolation_level == READ_COMMITTED
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            error, offset, timestamp = _lookup(
                ctx, topic.name, p.partition_index, p.timestamp, committed
            )
            partitions.append(
                ctx.entity(
                    "ListOffsetsPartitionResponse",
                    partition_index=p.partition_index,
                    error_code=error,
                    timestamp=timestamp,
                    offset=offset,
                    leader_epoch=0 if error is ErrorCode.none else -1,
                )
            )
        topics.append(
            ctx.entity("ListOffsetsTopicResponse", name=topic.name, partitions=tuple(partitions))
        )
    return ctx.response(throttle_time=datetime.timedelta(0), topics=tuple(topics))


def _lookup(
    ctx: RequestContext, topic: str, partition: int, timestamp: int, committed: bool
) -> tuple[ErrorCode, int, int]:
    plog = ctx.broker.logs.get(topic, partition)
    if plog is None:
        return ErrorCode.unknown_topic_or_partition, -1, -1
    if plog.offline is not None:
        return ErrorCode.kafka_storage_error, -1, -1
    visible = ctx.broker.last_stable_offset(plog) if committed else plog.high_watermark
    if timestamp == LATEST:
        return ErrorCode.none, visible, -1
    if timestamp == EARLIEST:
        return ErrorCode.none, plog.log_start_offset, -1
    if timestamp == MAX_TIMESTAMP or timestamp < 0:
        return ErrorCode.none, -1, -1
    found = plog.offset_for_timestamp(timestamp)
    if found is None or found[0] >= visible:
        return ErrorCode.none, -1, -1
    return ErrorCode.none, found[0], found[1]
