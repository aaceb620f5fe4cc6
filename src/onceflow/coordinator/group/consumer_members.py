"""Who a ConsumerGroupHeartbeat comes from: joining, rejoining, fencing and leaving.

As Kafka's GroupMetadataManager: a member joins with epoch 0 and leaves with -1. A static
member (with an instance id) may instead leave with -2: it stays in the group with its
partitions, which nobody else gets, until its session times out or a new incarnation of
the same instance id joins and takes its place, assignment included, without a rebalance.
An instance id still held by a member that did not leave so answers UNRELEASED_INSTANCE_ID;
a heartbeat from a replaced incarnation FENCED_INSTANCE_ID.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from onceflow.coordinator.group.consumer_group import ConsumerGroup, ConsumerMember
from onceflow.coordinator.group.consumer_messages import (
    JOIN_EPOCH,
    LEAVE_STATIC_EPOCH,
    HeartbeatRequest,
    HeartbeatResult,
    failure,
)
from onceflow.coordinator.group.reconcile import Reconciliation
from onceflow.errors import ErrorCode

log = logging.getLogger(__name__)


def member_for(
    group: ConsumerGroup,
    request: HeartbeatRequest,
    max_size: int,
    new_uuid: Callable[[], str],
) -> ConsumerMember | HeartbeatResult:
    """The member a (non-leaving) heartbeat is from, made when it joins; else the error."""
    if request.member_epoch != JOIN_EPOCH:
        known = _known(group, request)
        return known if isinstance(known, HeartbeatResult) else _check_epoch(known, request)
    member = group.members.get(request.member_id)
    if member is None and len(group.members) >= max_size:
        return failure(
            request,
            ErrorCode.group_max_size_reached,
            f"The consumer group has reached its maximum capacity of {max_size} members.",
        )
    member_id = request.member_id or new_uuid()
    if request.instance_id is not None:
        previous_id = group.static_members.get(request.instance_id)
        if previous_id is not None:
            return _replace(group, group.members[previous_id], member_id, request)
    if member is not None:
        # A rejoin: the member dropped everything (it sent no partitions), so what it
        # owned is free now and it starts over.
        group.remove(member.member_id)
    # Its subscription, set next, bumps the group epoch.
    member = ConsumerMember(
        member_id, request.client_id, request.client_host, instance_id=request.instance_id
    )
    group.add(member)
    return member


def _known(group: ConsumerGroup, request: HeartbeatRequest) -> ConsumerMember | HeartbeatResult:
    """The member a heartbeat names (by its instance id, if static); else the error."""
    member = group.members.get(request.member_id)
    if request.instance_id is not None:
        static = _static(group, request)
        if isinstance(static, HeartbeatResult):
            return static
        member = static
    return _unknown(request) if member is None else member


def leave(group: ConsumerGroup, request: HeartbeatRequest) -> HeartbeatResult:
    """Epoch -1 removes the member; -2 (a static member's) keeps its place for its session."""
    member = _known(group, request)
    if isinstance(member, HeartbeatResult):
        return member
    if request.member_epoch == LEAVE_STATIC_EPOCH:
        recon = dataclasses.replace(member.recon, epoch=LEAVE_STATIC_EPOCH)
        group.set_reconciliation(member, recon)
        log.info(
            "consumer group %s: static member %s left for now", request.group_id, member.member_id
        )
    else:
        group.remove(member.member_id)
        log.info("consumer group %s: member %s left", request.group_id, member.member_id)
    return HeartbeatResult(
        ErrorCode.none,
        member_id=request.member_id,
        member_epoch=request.member_epoch,
        heartbeat_interval_ms=0,
    )


def _replace(
    group: ConsumerGroup, previous: ConsumerMember, member_id: str, request: HeartbeatRequest
) -> ConsumerMember | HeartbeatResult:
    if previous.recon.epoch != LEAVE_STATIC_EPOCH:
        return failure(
            request,
            ErrorCode.unreleased_instance_id,
            f"Static member {member_id} with instance id {request.instance_id} cannot join "
            f"the group because the instance id is owned by {previous.member_id} member.",
        )
    recon: Reconciliation = dataclasses.replace(previous.recon, epoch=0, previous_epoch=0)
    member = dataclasses.replace(
        previous,
        member_id=member_id,
        client_id=request.client_id,
        client_host=request.client_host,
        recon=recon,
    )
    group.replace(previous, member)
    log.info(
        "consumer group %s: static member %s replaces %s (instance id %s)",
        request.group_id,
        member_id,
        previous.member_id,
        request.instance_id,
    )
    return member


def _static(group: ConsumerGroup, request: HeartbeatRequest) -> ConsumerMember | HeartbeatResult:
    member_id = group.static_members.get(request.instance_id or "")
    if member_id is None:
        return failure(
            request,
            ErrorCode.unknown_member_id,
            f"Instance id {request.instance_id} is unknown.",
        )
    if member_id != request.member_id:
        return failure(
            request,
            ErrorCode.fenced_instance_id,
            f"Static member {request.member_id} with instance id {request.instance_id} was "
            f"fenced by member {member_id}.",
        )
    return group.members[member_id]


def _unknown(request: HeartbeatRequest) -> HeartbeatResult:
    return failure(
        request,
        ErrorCode.unknown_member_id,
        f"Member {request.member_id} is not a member of group {request.group_id}.",
    )


def _check_epoch(
    member: ConsumerMember, request: HeartbeatRequest
) -> ConsumerMember | HeartbeatResult:
    """Kafka's member epoch check: the current epoch, or the previous one with a subset of
    the assignment (its answer to the epoch bump was lost)."""
    received, current = request.member_epoch, member.recon.epoch
    if received == current or (
        received == member.recon.previous_epoch
        and request.owned is not None
        and request.owned <= member.recon.assigned
        and received < current
    ):
        return member
    return failure(
        request,
        ErrorCode.fenced_member_epoch,
        f"The consumer group member has a {'greater' if received > current else 'smaller'} "
        f"member epoch ({received}) than the one known by the group coordinator ({current}). "
        "The member must abandon all its partitions and rejoin.",
    )
