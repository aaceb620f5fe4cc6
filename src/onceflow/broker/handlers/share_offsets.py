"""DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets (KIP-932):
a share group's start offsets, as `kafka-share-groups.sh --describe --offsets`,
`--reset-offsets` and `--delete-offsets` use them.

The start offset is the share-partition start offset (-1: none yet); v1's lag is Kafka's:
the high watermark less the start offset less the records in flight already delivered
for good. Altering or deleting needs an empty group (NON_EMPTY_GROUP otherwise), as Kafka.
Authorization: DESCRIBE (describe) or READ (alter, delete) on the group, as Kafka.
"""

from __future__ import annotations

import datetime
from typing import Any

from onceflow.broker.handlers.base import Handler, RequestContext
from onceflow.broker.handlers.share_groups import GROUP_KEY, share_coordinator
from onceflow.coordinator.share.records import ShareKey
from onceflow.coordinator.share.state import RecordState
from onceflow.errors import ErrorCode, KafkaError
from onceflow.protocol.api_versions import ApiKey
from onceflow.security.acl import AclOperation, ResourceType

NO_THROTTLE = datetime.timedelta(0)


async def handle_describe_share_group_offsets(ctx: RequestContext, request: Any) -> Any:
    coordinator = share_coordinator(ctx)
    groups = []
    for g in request.groups:
        error = _group_error(ctx, g.group_id, AclOperation.DESCRIBE)
        topics: list[Any] = []
        if error is ErrorCode.none:
            wanted = _wanted(ctx, coordinator, g.group_id, g.topics)
            for name, partitions in sorted(wanted.items()):
                topic_id = ctx.broker.topic_id(name)
                rows = tuple(
                    _describe_partition(ctx, coordinator, g.group_id, name, topic_id, p)
                    for p in partitions
                )
                topics.append(
                    ctx.entity(
                        "DescribeShareGroupOffsetsResponseTopic",
                        topic_name=name,
                        topic_id=topic_id,
                        partitions=rows,
                    )
                )
        groups.append(
            ctx.entity(
                "DescribeShareGroupOffsetsResponseGroup",
                group_id=g.group_id,
                topics=tuple(topics),
                error_code=error,
            )
        )
    return ctx.response(throttle_time=NO_THROTTLE, groups=tuple(groups))


def _wanted(
    ctx: RequestContext, coordinator: Any, group_id: str, topics: Any
) -> dict[str, list[int]]:
    """The partitions asked about, or (topics null) every one the group has state for."""
    if topics is not None:
        return {t.topic_name: sorted(t.partitions) for t in topics}
    names = ctx.broker.topics_by_id()
    out: dict[str, list[int]] = {}
    for key in coordinator.store_keys(group_id):
        name = names.get(key.topic_id)
        if name is not None:
            out.setdefault(name, []).append(key.partition)
    return {n: sorted(ps) for n, ps in out.items()}


def _describe_partition(
    ctx: RequestContext, coordinator: Any, group_id: str, name: str, topic_id: Any, p: int
) -> Any:
    entity = "DescribeShareGroupOffsetsResponsePartition"
    if topic_id is None:
        return ctx.entity(
            entity,
            partition_index=p,
            start_offset=-1,
            leader_epoch=-1,
            lag=-1,
            error_code=ErrorCode.unknown_topic_or_partition,
        )
    key = ShareKey(group_id, topic_id, p)
    start, delivered = -1, 0
    held = coordinator.held.get(key)
    try:
        if held is not None:
            start = held.partition.start_offset
            delivered = sum(r.size for r in held.partition.runs if r.state.terminal)
        else:
            snapshot = coordinator.store.read(key)
            if snapshot is not None:
                start = snapshot.start_offset
                delivered = sum(
                    b.last - b.first + 1
                    for b in snapshot.batches
                    if b.state in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
                )
    except KafkaError as exc:
        return ctx.entity(
            entity, partition_index=p, start_offset=-1, leader_epoch=-1, error_code=exc.code
        )
    lag = -1
    if start >= 0:
        try:
            lag = max(0, ctx.broker.leader_log(name, p).high_watermark - start - delivered)
        except KafkaError:
            lag = -1
    return ctx.entity(
        entity,
        partition_index=p,
        start_offset=start,
        leader_epoch=-1,
        lag=lag,
        error_code=ErrorCode.none,
    )


def _group_error(ctx: RequestContext, group_id: str, operation: AclOperation) -> ErrorCode:
    if not ctx.authorized(operation, ResourceType.GROUP, group_id):
        return ErrorCode.group_authorization_failed
    if not ctx.broker.coordinator_available(GROUP_KEY, group_id):
        return ErrorCode.not_coordinator
    return ErrorCode.none


def _empty_group_error(ctx: RequestContext, group_id: str) -> ErrorCode:
    error = _group_error(ctx, group_id, AclOperation.READ)
    group = share_coordinator(ctx).group(group_id)
    if error is ErrorCode.none and group is not None and group.members:
        return ErrorCode.non_empty_group
    return error


async def handle_alter_share_group_offsets(ctx: RequestContext, request: Any) -> Any:
    coordinator = share_coordinator(ctx)
    error = _empty_group_error(ctx, request.group_id)
    topics = []
    for t in request.topics:
        topic_id = ctx.broker.topic_id(t.topic_name)
        rows = []
        for p in t.partitions:
            code = error
            if code is ErrorCode.none and topic_id is None:
                code = ErrorCode.unknown_topic_or_partition
            if code is ErrorCode.none and topic_id is not None:
                try:
                    await coordinator.reset_start(
                        ShareKey(request.group_id, topic_id, p.partition_index), p.start_offset
                    )
                except KafkaError as exc:
                    code = exc.code
            rows.append(
                ctx.entity(
                    "AlterShareGroupOffsetsResponsePartition",
                    partition_index=p.partition_index,
                    error_code=code,
                )
            )
        topics.append(
            ctx.entity(
                "AlterShareGroupOffsetsResponseTopic",
                topic_name=t.topic_name,
                topic_id=topic_id,
                partitions=tuple(rows),
            )
        )
    return ctx.response(throttle_time=NO_THROTTLE, error_code=error, responses=tuple(topics))


async def handle_delete_share_group_offsets(ctx: RequestContext, request: Any) -> Any:
    coordinator = share_coordinator(ctx)
    error = _empty_group_error(ctx, request.group_id)
    topics = []
    keys = coordinator.store_keys(request.group_id) if error is ErrorCode.none else []
    for t in request.topics:
        topic_id = ctx.broker.topic_id(t.topic_name)
        code = error
        if code is ErrorCode.none and topic_id is None:
            code = ErrorCode.unknown_topic_or_partition
        if code is ErrorCode.none:
            try:
                await coordinator.delete_states([k for k in keys if k.topic_id == topic_id])
            except KafkaError as exc:
                code = exc.code
        topics.append(
            ctx.entity(
                "DeleteShareGroupOffsetsResponseTopic",
                topic_name=t.topic_name,
                topic_id=topic_id,
                error_code=code,
            )
        )
    return ctx.response(throttle_time=NO_THROTTLE, error_code=error, responses=tuple(topics))


HANDLERS: dict[int, Handler] = {
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: handle_describe_share_group_offsets,
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: handle_alter_share_group_offsets,
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: handle_delete_share_group_offsets,
}
