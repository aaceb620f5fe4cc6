"""Classic members (JoinGroup/SyncGroup/Heartbeat/LeaveGroup) of a consumer-protocol group.

As Kafka's classicGroup*ToConsumerGroup: a classic consumer's JoinGroup carries the
"consumer" embedded protocol (topics, owned partitions); the coordinator makes or updates
the member, computes the target with the server-side assignor like any member's and
reconciles it at once, so JoinGroup answers without waiting for others: no leader, no
members, the member epoch as generation. SyncGroup answers the member's assigned partitions
as a ConsumerProtocolAssignment. Partitions move through rebalances of the member alone:
its heartbeat answers REBALANCE_IN_PROGRESS when it must catch up with a new group epoch,
revoke partitions (it rejoins without them), or may take partitions others released.
A classic member is fenced when its session times out (its own session timeout), or when
it does not sync after a join, or rejoin when told to, within its rebalance timeout.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from onceflow.clock import Clock
from onceflow.coordinator.group.consumer_embedded import (
    MalformedProtocol,
    decode_subscription,
    encode_assignment,
    subscription_version,
)
from onceflow.coordinator.group.consumer_group import (
    ClassicMetadata,
    ConsumerGroup,
    ConsumerMember,
)
from onceflow.coordinator.group.consumer_protocol import ConsumerHeartbeats
from onceflow.coordinator.group.metadata import CONSUMER_PROTOCOL_TYPE
from onceflow.coordinator.group.reconcile import MemberState
from onceflow.coordinator.group.results import NO_MEMBER_ID, JoinResult, SyncResult
from onceflow.errors import ErrorCode

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ClassicJoin:
    group_id: str
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    require_known_member_id: bool


class ClassicMembers:
    def __init__(
        self,
        clock: Clock,
        heartbeats: ConsumerHeartbeats,
        max_size: int,
        new_uuid: Callable[[], str],
    ) -> None:
        self._clock = clock
        self._heartbeats = heartbeats
        self._max_size = max_size
        self._new_uuid = new_uuid

    def join(self, group: ConsumerGroup, request: ClassicJoin) -> JoinResult:
        if not _supported(group, request):
            return JoinResult.failed(request.member_id, ErrorCode.inconsistent_group_protocol)
        try:
            subscription = decode_subscription(request.protocols[0][1])
        except MalformedProtocol:
            return JoinResult.failed(request.member_id, ErrorCode.inconsistent_group_protocol)
        unknown = request.member_id == NO_MEMBER_ID
        member_id = self._new_uuid() if unknown else request.member_id
        if unknown and request.instance_id is None and request.require_known_member_id:
            return JoinResult.failed(member_id, ErrorCode.member_id_required)
        found = self._member(group, member_id, request, unknown)
        if isinstance(found, ErrorCode):
            return JoinResult.failed(request.member_id, found)
        member = found
        subscribed = tuple(sorted(set(subscription.topics)))
        changed = subscribed != member.subscribed or member.regex is not None
        member.subscribed, member.regex, member.server_assignor = subscribed, None, None
        member.client_id, member.client_host = request.client_id, request.client_host
        member.rack_id = subscription.rack_id
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.classic = ClassicMetadata(request.session_timeout_ms, request.protocols)
        group.changed_members.add(member.member_id)
        if changed:
            group.subscriptions_changed()
        self._heartbeats.advance(request.group_id, group, member, subscription.owned, changed)
        now = self._clock.monotonic_ms()
        member.session_deadline_ms = now + request.session_timeout_ms
        member.sync_deadline_ms = now + request.rebalance_timeout_ms
        member.join_deadline_ms = None
        return JoinResult(
            ErrorCode.none,
            member.member_id,
            generation_id=member.recon.epoch,
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocol_name=request.protocols[0][0],
        )

    def sync(
        self,
        group: ConsumerGroup,
        member_id: str,
        instance_id: str | None,
        generation_id: int,
        protocol_type: str | None,
        protocol_name: str | None,
    ) -> SyncResult:
        found = _classic_member(group, member_id, instance_id, generation_id)
        if isinstance(found, ErrorCode):
            return SyncResult(found)
        member = found
        assert member.classic is not None  # _classic_member checked it
        name, metadata = member.classic.protocols[0]
        if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE) or (
            protocol_name is not None and protocol_name != name
        ):
            return SyncResult(ErrorCode.inconsistent_group_protocol)
        now = self._clock.monotonic_ms()
        if (
            group.group_epoch > member.recon.epoch
            and member.recon.state is not MemberState.UNREVOKED_PARTITIONS
        ):
            self._expect_rejoin(member, now)
            return SyncResult(ErrorCode.rebalance_in_progress)
        member.sync_deadline_ms = None
        member.session_deadline_ms = now + member.classic.session_timeout_ms
        assignment = encode_assignment(member.recon.assigned, subscription_version(metadata))
        return SyncResult(ErrorCode.none, assignment, CONSUMER_PROTOCOL_TYPE, name)

    def heartbeat(
        self, group: ConsumerGroup, member_id: str, instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        found = _classic_member(group, member_id, instance_id, generation_id)
        if isinstance(found, ErrorCode):
            return found
        member = found
        assert member.classic is not None
        now = self._clock.monotonic_ms()
        member.session_deadline_ms = now + member.classic.session_timeout_ms
        if _must_rejoin(group, member):
            self._expect_rejoin(member, now)
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(self, group: ConsumerGroup, member_id: str, instance_id: str | None) -> ErrorCode:
        """A LeaveGroup member: a classic member by its member id, or any static member
        by its instance id (an admin's removal, as Kafka allows for KIP-848 members too)."""
        member: ConsumerMember | None
        if instance_id is None:
            member = group.members.get(member_id)
            if member is not None and member.classic is None:
                return ErrorCode.unknown_member_id
        else:
            static_id = group.static_members.get(instance_id)
            member = group.members.get(static_id) if static_id is not None else None
            if member is not None and member_id not in (NO_MEMBER_ID, member.member_id):
                return ErrorCode.fenced_instance_id
        if member is None:
            return ErrorCode.unknown_member_id
        group.remove(member.member_id)
        log.info("consumer group: member %s left (LeaveGroup)", member.member_id)
        return ErrorCode.none

    def _member(
        self, group: ConsumerGroup, member_id: str, request: ClassicJoin, unknown: bool
    ) -> ConsumerMember | ErrorCode:
        """The joining member: found, made, or (a static member's new incarnation) put in
        its instance id's place with its assignment."""
        if request.instance_id is not None:
            previous_id = group.static_members.get(request.instance_id)
            if previous_id is not None and previous_id != member_id:
                if not unknown:
                    return ErrorCode.fenced_instance_id
                previous = group.members[previous_id]
                member = _fresh(member_id, request)
                member.recon = previous.recon
                group.replace(previous, member)
                return member
        existing = group.members.get(member_id)
        if existing is not None:
            return existing if existing.classic is not None else ErrorCode.unknown_member_id
        # An id not in the group is made here, as Kafka does: MEMBER_ID_REQUIRED gave it.
        if len(group.members) >= self._max_size:
            return ErrorCode.group_max_size_reached
        member = _fresh(member_id, request)
        group.add(member)
        return member

    @staticmethod
    def _expect_rejoin(member: ConsumerMember, now: int) -> None:
        if member.join_deadline_ms is None:
            member.join_deadline_ms = now + member.rebalance_timeout_ms


def _fresh(member_id: str, request: ClassicJoin) -> ConsumerMember:
    return ConsumerMember(
        member_id, request.client_id, request.client_host, instance_id=request.instance_id
    )


def _supported(group: ConsumerGroup, request: ClassicJoin) -> bool:
    """The "consumer" protocol type, with a protocol every classic member also lists (the
    first one each lists is what it uses)."""
    if request.protocol_type != CONSUMER_PROTOCOL_TYPE or not request.protocols:
        return False
    names = {name for name, _ in request.protocols}
    return all(
        names & {name for name, _ in m.classic.protocols}
        for m in group.members.values()
        if m.classic is not None and m.member_id != request.member_id
    )


def _classic_member(
    group: ConsumerGroup, member_id: str, instance_id: str | None, generation_id: int
) -> ConsumerMember | ErrorCode:
    if instance_id is not None:
        static_id = group.static_members.get(instance_id)
        if static_id is None:
            return ErrorCode.unknown_member_id
        if static_id != member_id:
            return ErrorCode.fenced_instance_id
    member = group.members.get(member_id)
    if member is None or member.classic is None:
        return ErrorCode.unknown_member_id
    if generation_id != member.recon.epoch:
        return ErrorCode.illegal_generation
    return member


def _must_rejoin(group: ConsumerGroup, member: ConsumerMember) -> bool:
    """Behind the group epoch, asked to revoke, or partitions it waits for are free now."""
    recon = member.recon
    if recon.epoch < group.group_epoch or recon.state is MemberState.UNREVOKED_PARTITIONS:
        return True
    if recon.state is not MemberState.UNRELEASED_PARTITIONS:
        return False
    waiting = group.target.get(member.member_id, frozenset()) - recon.assigned
    return not any(group.owner(tp) not in (None, member.member_id) for tp in waiting)
