"""DeleteGroups and OffsetDelete, as Kafka's KafkaApis serves them.

DeleteGroups needs DELETE on each group (GROUP_AUTHORIZATION_FAILED for that group, which
the coordinator never sees). OffsetDelete needs DELETE on the group (top-level
GROUP_AUTHORIZATION_FAILED, nothing else looked at), then READ on each topic: a refused
topic's partitions answer TOPIC_AUTHORIZATION_FAILED, an unknown topic's or partition's
UNKNOWN_TOPIC_OR_PARTITION, and only the rest reach the coordinator. A top-level error from
the coordinator (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, NOT_COORDINATOR, ...) is the whole
answer.
"""

from __future__ import annotations

import datetime
from typing import Any

from onceflow.broker.handlers import authz
from onceflow.broker.handlers.base import Handler, RequestContext
from onceflow.broker.handlers.share_groups import share_coordinator
from onceflow.coordinator.group import GroupCoordinator, TopicPartition
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.security.acl import AclOperation, ResourceType

NO_THROTTLE = datetime.timedelta(0)


def _coordinator(ctx: RequestContext) -> GroupCoordinator:
    coordinator: GroupCoordinator = ctx.broker.group_coordinator
    return coordinator


async def handle_delete_groups(ctx: RequestContext, request: Any) -> Any:
    group_ids = list(dict.fromkeys(request.groups_names))
    denied = authz.denied(ctx, AclOperation.DELETE, ResourceType.GROUP, group_ids)
    allowed = [g for g in group_ids if g not in denied]
    shares = share_coordinator(ctx)
    shared = [g for g in allowed if shares.is_share_group(g)]
    others = [g for g in allowed if g not in shared]
    codes = await _coordinator(ctx).delete_groups(others) if others else {}
    for group_id in shared:  # a share group: its members must be gone (NON_EMPTY_GROUP)
        codes[group_id] = await shares.delete_group(group_id)
    results = [ctx.entity("DeletableGroupResult", group_id=g, error_code=codes[g]) for g in allowed]
    results += [
        ctx.entity(
            "DeletableGroupResult", group_id=g, error_code=ErrorCode.group_authorization_failed
        )
        for g in group_ids
        if g in denied
    ]
    return ctx.response(throttle_time=NO_THROTTLE, results=tuple(results))


async def handle_offset_delete(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorized(AclOperation.DELETE, ResourceType.GROUP, request.group_id):
        return _offset_delete_failed(ctx, ErrorCode.group_authorization_failed)
    denied = authz.denied(
        ctx, AclOperation.READ, ResourceType.TOPIC, (t.name for t in request.topics)
    )
    codes: dict[TopicPartition, ErrorCode] = {}
    asked: list[TopicPartition] = []
    for topic in request.topics:
        count = ctx.broker.topic_partition_count(topic.name)
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition_index)
            if topic.name in denied:
                codes[tp] = ErrorCode.topic_authorization_failed
            elif count is None or not 0 <= tp.partition < count:
                codes[tp] = ErrorCode.unknown_topic_or_partition
            else:
                asked.append(tp)
    error, deleted = await _coordinator(ctx).delete_offsets(request.group_id, asked)
    if error is not ErrorCode.none:
        return _offset_delete_failed(ctx, error)
    codes |= deleted
    topics: dict[str, dict[int, ErrorCode]] = {}
    for topic in request.topics:
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition_index)
            topics.setdefault(topic.name, {})[tp.partition] = codes[tp]
    return ctx.response(
        error_code=ErrorCode.none,
        throttle_time=NO_THROTTLE,
        topics=tuple(
            ctx.entity(
                "OffsetDeleteResponseTopic",
                name=name,
                partitions=tuple(
                    ctx.entity(
                        "OffsetDeleteResponsePartition", partition_index=index, error_code=code
                    )
                    for index, code in partitions.items()
                ),
            )
            for name, partitions in topics.items()
        ),
    )


def _offset_delete_failed(ctx: RequestContext, error: ErrorCode) -> Any:
    return ctx.response(error_code=error, throttle_time=NO_THROTTLE, topics=())


HANDLERS: dict[int, Handler] = {
    ApiKey.DELETE_GROUPS: handle_delete_groups,
    ApiKey.OFFSET_DELETE: handle_offset_delete,
}
