"""OffsetForLeaderEpoch: one broker, one leader epoch (0) that ends at the log end."""

from __future__ import annotations

import datetime
from typing import Any

from onceflow.broker.handlers.base import RequestContext
from onceflow.errors import ErrorCode


async def handle_offset_for_leader_epoch(ctx: RequestContext, request: Any) -> Any:
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            plog = ctx.broker.logs.get(topic.topic, p.partition)
            if plog is None:
                error, epoch, end = ErrorCode.unknown_topic_or_partition, -1, -1
            elif p.current_leader_epoch > plog.leader_epoch:
                error, epoch, end = ErrorCode.unknown_leader_epoch, -1, -1
            elif 0 <= p.current_leader_epoch < plog.leader_epoch:
                error, epoch, end = ErrorCode.fenced_leader_epoch, -1, -1
            elif p.leader_epoch != plog.leader_epoch:
                # Epoch 0 is the only one there ever was: any other is "undefined".
                error, epoch, end = ErrorCode.none, -1, -1
            else:
                error, epoch, end = ErrorCode.none, plog.leader_epoch, plog.log_end_offset
            partitions.append(
                ctx.entity(
                    "EpochEndOffset",
                    error_code=error,
                    partition=p.partition,
                    leader_epoch=epoch,
                    end_offset=end,
                )
            )
        topics.append(
            ctx.entity(
                "OffsetForLeaderTopicResult", topic=topic.topic, partitions=tuple(partitions)
            )
        )
    return ctx.response(throttle_time=datetime.timedelta(0), topics=tuple(topics))
