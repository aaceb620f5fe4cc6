"""The consumer group protocol of KIP-848: ConsumerGroupHeartbeat and ConsumerGroupDescribe.

Both speak topic ids; the coordinator works with topic names, so partitions are translated
here (an owned partition of a topic id no longer known is left out: the topic is gone).
Authorization is Kafka's: a heartbeat needs READ on the group, a describe DESCRIBE on each
group (GROUP_AUTHORIZATION_FAILED for that group alone).
"""

from __future__ import annotations

import datetime
import uuid
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from onceflow.broker.handlers import authz
from onceflow.broker.handlers.base import Handler, RequestContext
from onceflow.coordinator.group import GroupCoordinator, TopicPartition
from onceflow.coordinator.group.consumer_group import ConsumerGroup, ConsumerMember
from onceflow.coordinator.group.consumer_messages import HeartbeatRequest
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.topic_ids import ZERO_UUID
from onceflow.security.acl import AclOperation, ResourceType

NO_THROTTLE = datetime.timedelta(0)
_ONE_MS = datetime.timedelta(milliseconds=1)
OPERATIONS_NOT_REQUESTED = -(2**31)
CONSUMER_MEMBER = 1  # ConsumerGroupDescribe v1's member type: 0 classic, 1 consumer
CLASSIC_MEMBER = 0


def _coordinator(ctx: RequestContext) -> GroupCoordinator:
    coordinator: GroupCoordinator = ctx.broker.group_coordinator
    return coordinator


async def handle_consumer_group_heartbeat(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorized(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return heartbeat_response(ctx, ErrorCode.group_authorization_failed, None, None, -1, 0)
    owned = None
    if request.topic_partitions is not None:
        named = [(ctx.broker.topic_name_by_id(t.topic_id), t) for t in request.topic_partitions]
        owned = frozenset(
            TopicPartition(name, p) for name, t in named if name is not None for p in t.partitions
        )
    rebalance = request.rebalance_timeout // _ONE_MS
    result = await _coordinator(ctx).consumer_group_heartbeat(
        HeartbeatRequest(
            group_id=request.group_id,
            member_id=request.member_id,
            member_epoch=request.member_epoch,
            instance_id=request.instance_id,
            rack_id=request.rack_id,
            rebalance_timeout_ms=int(rebalance),
            subscribed_topic_names=(
                None
                if request.subscribed_topic_names is None
                else tuple(request.subscribed_topic_names)
            ),
            subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None),
            server_assignor=request.server_assignor,
            owned=owned,
            client_id=ctx.header.client_id or "",
            client_host=f"/{ctx.session.client_host}",
            api_version=ctx.api_version,
        )
    )
    assignment = None
    if result.error is ErrorCode.none and result.assignment is not None:
        assignment = ctx.entity(
            "Assignment",
            topic_partitions=tuple(
                ctx.entity("TopicPartitions", topic_id=topic_id, partitions=partitions)
                for topic_id, _, partitions in by_topic(ctx, result.assignment)
            ),
        )
    return heartbeat_response(
        ctx,
        result.error,
        result.message,
        result.member_id,
        result.member_epoch,
        result.heartbeat_interval_ms,
        assignment,
    )


def heartbeat_response(
    ctx: RequestContext,
    error: ErrorCode,
    message: str | None,
    member_id: str | None,
    member_epoch: int,
    interval_ms: int,
    assignment: Any = None,
) -> Any:
    return ctx.response(
        throttle_time=NO_THROTTLE,
        error_code=error,
        error_message=message,
        member_id=member_id,
        member_epoch=member_epoch,
        heartbeat_interval=datetime.timedelta(milliseconds=interval_ms),
        assignment=assignment,
    )


def by_topic(
    ctx: RequestContext, partitions: Iterable[TopicPartition]
) -> list[tuple[uuid.UUID, str, tuple[int, ...]]]:
    """(topic id, name, sorted partitions) per topic, in name order."""
    grouped: dict[str, list[int]] = defaultdict(list)
    for tp in partitions:
        grouped[tp.topic].append(tp.partition)
    return [
        (ctx.broker.topic_id(name) or ZERO_UUID, name, tuple(sorted(grouped[name])))
        for name in sorted(grouped)
    ]


async def handle_consumer_group_describe(ctx: RequestContext, request: Any) -> Any:
    coordinator = _coordinator(ctx)
    groups = []
    for group_id in request.group_ids:
        if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            groups.append(_described(ctx, group_id, ErrorCode.group_authorization_failed, None))
            continue
        error, message, group = coordinator.consumer_group(group_id)
        if group is None:
            groups.append(_described(ctx, group_id, error, message))
            continue
        operations = OPERATIONS_NOT_REQUESTED
        if request.include_authorized_operations:
            operations = authz.authorized_operations(ctx, ResourceType.GROUP, group_id)
        groups.append(
            ctx.entity(
                "DescribedGroup",
                error_code=ErrorCode.none,
                error_message=None,
                group_id=group_id,
                group_state=group.state.value,
                group_epoch=group.group_epoch,
                assignment_epoch=group.assignment_epoch,
                assignor_name=group.assignor_name,
                members=tuple(_member(ctx, group, m) for m in group.members.values()),
                authorized_operations=operations,
            )
        )
    return ctx.response(throttle_time=NO_THROTTLE, groups=tuple(groups))


def _described(ctx: RequestContext, group_id: str, error: ErrorCode, message: str | None) -> Any:
    return ctx.entity(
        "DescribedGroup",
        error_code=error,
        error_message=message,
        group_id=group_id,
        group_state="",
        group_epoch=0,
        assignment_epoch=0,
        assignor_name="",
        members=(),
        authorized_operations=OPERATIONS_NOT_REQUESTED,
    )


def _member(ctx: RequestContext, group: ConsumerGroup, member: ConsumerMember) -> Any:
    return ctx.entity(
        "Member",
        member_id=member.member_id,
        instance_id=member.instance_id,
        rack_id=member.rack_id,
        member_epoch=member.recon.epoch,
        client_id=member.client_id,
        client_host=member.client_host,
        subscribed_topic_names=member.subscribed,
        subscribed_topic_regex=member.regex,
        assignment=_assignment(ctx, member.recon.assigned),
        target_assignment=_assignment(ctx, group.target.get(member.member_id, frozenset())),
        member_type=CONSUMER_MEMBER if member.classic is None else CLASSIC_MEMBER,
    )


def _assignment(ctx: RequestContext, partitions: Iterable[TopicPartition]) -> Any:
    return ctx.entity(
        "Assignment",
        topic_partitions=tuple(
            ctx.entity("TopicPartitions", topic_id=topic_id, topic_name=name, partitions=parts)
            for topic_id, name, parts in by_topic(ctx, partitions)
        ),
    )


HANDLERS: dict[int, Handler] = {
    ApiKey.CONSUMER_GROUP_HEARTBEAT: handle_consumer_group_heartbeat,
    ApiKey.CONSUMER_GROUP_DESCRIBE: handle_consumer_group_describe,
}
