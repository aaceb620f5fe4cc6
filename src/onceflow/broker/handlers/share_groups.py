"""Share groups (KIP-932): ShareGroupHeartbeat and ShareGroupDescribe.

Both go to the group's coordinator (FindCoordinator key type GROUP) and speak topic ids.
Authorization is Kafka's: a heartbeat needs READ on the group, a describe DESCRIBE on each.
A group id taken by a classic or consumer group is GROUP_ID_NOT_FOUND to a share member.
"""

from __future__ import annotations

import datetime
from typing import Any

from onceflow.broker.handlers import authz
from onceflow.broker.handlers.base import Handler, RequestContext
from onceflow.broker.handlers.consumer_groups import by_topic, heartbeat_response
from onceflow.coordinator.group.results import GroupOverview
from onceflow.coordinator.group.state import GroupState
from onceflow.coordinator.share.coordinator import ShareCoordinator
from onceflow.coordinator.share.group import Heartbeat, ShareGroupState
from onceflow.errors import ErrorCode, KafkaError
from onceflow.protocol.api_versions import ApiKey
from onceflow.security.acl import AclOperation, ResourceType

NO_THROTTLE = datetime.timedelta(0)
OPERATIONS_NOT_REQUESTED = -(2**31)
GROUP_KEY = 0
ASSIGNOR = "simple"
SHARE_TYPE = "share"  # ListGroups' protocol type and group type of a share group


def share_coordinator(ctx: RequestContext) -> ShareCoordinator:
    coordinator: ShareCoordinator = ctx.broker.share_coordinator
    return coordinator


def other_group_type(ctx: RequestContext, group_id: str) -> bool:
    """Whether a classic or consumer group already has this id."""
    group = ctx.broker.group_coordinator.group(group_id)
    return group is not None and group.state is not GroupState.DEAD


async def handle_share_group_heartbeat(ctx: RequestContext, request: Any) -> Any:
    group_id = request.group_id
    if not ctx.authorized(AclOperation.READ, ResourceType.GROUP, group_id):
        return heartbeat_response(ctx, ErrorCode.group_authorization_failed, None, None, -1, 0)
    if not group_id:
        return heartbeat_response(
            ctx, ErrorCode.invalid_request, "GroupId can't be empty.", None, -1, 0
        )
    if not request.member_id:
        return heartbeat_response(
            ctx, ErrorCode.invalid_request, "MemberId can't be empty.", None, -1, 0
        )
    if not ctx.broker.coordinator_available(GROUP_KEY, group_id):
        return heartbeat_response(ctx, ErrorCode.not_coordinator, None, None, -1, 0)
    if other_group_type(ctx, group_id):
        message = f"Group {group_id} is not a share group."
        return heartbeat_response(ctx, ErrorCode.group_id_not_found, message, None, -1, 0)
    await share_coordinator(ctx).refresh_group_configs(group_id)
    answer, interval, written = share_coordinator(ctx).heartbeat(
        Heartbeat(
            group_id=group_id,
            member_id=request.member_id,
            member_epoch=request.member_epoch,
            rack_id=request.rack_id,
            subscribed=(
                None
                if request.subscribed_topic_names is None
                else tuple(request.subscribed_topic_names)
            ),
            client_id=ctx.header.client_id or "",
            client_host=f"/{ctx.session.client_host}",
        )
    )
    if written is not None:
        try:
            await written  # the membership change is durable before it is answered
        except KafkaError as exc:
            return heartbeat_response(ctx, exc.code, exc.message, None, -1, 0)
    assignment = None
    if answer.error is ErrorCode.none and answer.assignment is not None:
        assignment = ctx.entity(
            "Assignment",
            topic_partitions=tuple(
                ctx.entity("TopicPartitions", topic_id=topic_id, partitions=partitions)
                for topic_id, _, partitions in by_topic(ctx, answer.assignment)
            ),
        )
    member_id = request.member_id if answer.error is ErrorCode.none else None
    return heartbeat_response(
        ctx, answer.error, answer.message, member_id, answer.member_epoch, interval, assignment
    )


def share_overviews(ctx: RequestContext) -> list[GroupOverview]:
    """ListGroups' rows of the share groups this broker coordinates (type "share")."""
    coordinator = share_coordinator(ctx)
    out = []
    for group_id in sorted(coordinator.group_ids()):
        if not ctx.broker.coordinator_available(GROUP_KEY, group_id):
            continue
        group = coordinator.group(group_id)
        state = group.state.value if group is not None else ShareGroupState.EMPTY.value
        out.append(GroupOverview(group_id, SHARE_TYPE, state, SHARE_TYPE))
    return out


async def handle_share_group_describe(ctx: RequestContext, request: Any) -> Any:
    coordinator = share_coordinator(ctx)
    groups = []
    for group_id in request.group_ids:
        if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            groups.append(_described(ctx, group_id, ErrorCode.group_authorization_failed))
            continue
        if not ctx.broker.coordinator_available(GROUP_KEY, group_id):
            groups.append(_described(ctx, group_id, ErrorCode.not_coordinator))
            continue
        group = coordinator.group(group_id)
        if group is None:
            if other_group_type(ctx, group_id):
                message = f"Group {group_id} is not a share group."
            else:
                message = f"Group {group_id} not found."
            groups.append(_described(ctx, group_id, ErrorCode.group_id_not_found, message))
            continue
        operations = OPERATIONS_NOT_REQUESTED
        if request.include_authorized_operations:
            operations = authz.authorized_operations(ctx, ResourceType.GROUP, group_id)
        members = tuple(
            ctx.entity(
                "Member",
                member_id=m.member_id,
                rack_id=m.rack_id,
                member_epoch=m.epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=m.subscribed,
                assignment=ctx.entity(
                    "Assignment",
                    topic_partitions=tuple(
                        ctx.entity(
                            "TopicPartitions", topic_id=tid, topic_name=name, partitions=parts
                        )
                        for tid, name, parts in by_topic(ctx, m.assignment)
                    ),
                ),
            )
            for m in group.members.values()
        )
        groups.append(
            ctx.entity(
                "DescribedGroup",
                error_code=ErrorCode.none,
                error_message=None,
                group_id=group_id,
                group_state=group.state.value,
                group_epoch=group.epoch,
                assignment_epoch=group.epoch,
                assignor_name=ASSIGNOR,
                members=members,
                authorized_operations=operations,
            )
        )
    return ctx.response(throttle_time=NO_THROTTLE, groups=tuple(groups))


def _described(
    ctx: RequestContext, group_id: str, error: ErrorCode, message: str | None = None
) -> Any:
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


HANDLERS: dict[int, Handler] = {
    ApiKey.SHARE_GROUP_HEARTBEAT: handle_share_group_heartbeat,
    ApiKey.SHARE_GROUP_DESCRIBE: handle_share_group_describe,
}
