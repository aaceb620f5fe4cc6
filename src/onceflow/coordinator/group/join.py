"""JoinGroup: new members, rejoining members, MEMBER_ID_REQUIRED and static members.

Every path ends in a future: already resolved when the answer is immediate (an error, or
the current generation for a member that merely re-asks), or parked on the member until
the rebalance completes. The coordinator awaits it after flushing deferred writes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from onceflow.clock import Clock
from onceflow.coordinator.group.config import GroupCoordinatorConfig
from onceflow.coordinator.group.manager import GroupMetadataManager
from onceflow.coordinator.group.metadata import GroupMetadata, MemberMetadata, Protocols
from onceflow.coordinator.group.rebalance import Rebalancer, new_future
from onceflow.coordinator.group.results import NO_MEMBER_ID, JoinResult
from onceflow.coordinator.group.state import GroupState
from onceflow.errors import ErrorCode

_E = GroupState.EMPTY
_P = GroupState.PREPARING_REBALANCE
_C = GroupState.COMPLETING_REBALANCE
_S = GroupState.STABLE
_D = GroupState.DEAD


@dataclass(frozen=True, slots=True)
class JoinRequest:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    require_known_member_id: bool
    # JoinGroup v9+ (KIP-814): a static leader rejoining a Stable group learns it leads, gets
    # the members and is told to skip the assignment; older clients get the old leader id.
    supports_skipping_assignment: bool = False


class Joiner:
    def __init__(
        self,
        clock: Clock,
        config: GroupCoordinatorConfig,
        manager: GroupMetadataManager,
        rebalancer: Rebalancer,
        new_uuid: Callable[[], str],
    ) -> None:
        self._clock = clock
        self._config = config
        self._manager = manager
        self._rebalancer = rebalancer
        self._new_uuid = new_uuid

    async def join(self, group_id: str, req: JoinRequest) -> asyncio.Future[JoinResult]:
        """Apply one JoinGroup to the group (creating it for a new member)."""
        is_new = req.member_id == NO_MEMBER_ID
        group = self._manager.get(group_id)
        if group is None:
            if not is_new:
                return _done(JoinResult.failed(req.member_id, ErrorCode.unknown_member_id))
            group = self._manager.add(GroupMetadata(group_id, self._clock.now_ms()))
        if not self._accepts(group, req.member_id):
            member = group.members.get(req.member_id)
            if member is not None:
                self._rebalancer.remove_member(group, member)
            return _done(JoinResult.failed(NO_MEMBER_ID, ErrorCode.group_max_size_reached))
        if is_new:
            future = await self._join_new_member(group, req)
        else:
            future = self._join_known_member(group, req)
        self._rebalancer.maybe_complete_join(group)
        return future

    def _accepts(self, group: GroupMetadata, member_id: str) -> bool:
        """group.max.size: members already in the rebalance always get back in."""
        limit = self._config.group_max_size
        member = group.members.get(member_id)
        if group.is_(_E, _D):
            return True
        if group.is_(_P):
            return (member is not None and member.is_awaiting_join) or (
                group.num_awaiting_join() < limit
            )
        return member is not None or len(group.members) < limit

    async def _join_new_member(
        self, group: GroupMetadata, req: JoinRequest
    ) -> asyncio.Future[JoinResult]:
        if group.is_(_D):
            return _done(JoinResult.failed(NO_MEMBER_ID, ErrorCode.coordinator_not_available))
        if not group.supports_protocols(req.protocol_type, {n for n, _ in req.protocols}):
            return _done(JoinResult.failed(NO_MEMBER_ID, ErrorCode.inconsistent_group_protocol))
        prefix = req.group_instance_id if req.group_instance_id is not None else req.client_id
        new_id = f"{prefix}-{self._new_uuid()}"
        if req.group_instance_id is not None:
            old_id = group.static_members.get(req.group_instance_id)
            if old_id is not None:
                return await self._replace_static_member(group, req, old_id, new_id)
        elif req.require_known_member_id:
            # JoinGroup v4+: hand out the id first, so a client that times out and retries
            # comes back as the same member instead of leaving a ghost behind.
            deadline = self._clock.monotonic_ms() + req.session_timeout_ms
            group.pending_members[new_id] = deadline
            return _done(JoinResult.failed(new_id, ErrorCode.member_id_required))
        return self._add_member(group, req, new_id)

    def _join_known_member(
        self, group: GroupMetadata, req: JoinRequest
    ) -> asyncio.Future[JoinResult]:
        member_id = req.member_id
        if group.is_(_D):
            return _done(JoinResult.failed(member_id, ErrorCode.coordinator_not_available))
        if not group.supports_protocols(req.protocol_type, {n for n, _ in req.protocols}):
            return _done(JoinResult.failed(member_id, ErrorCode.inconsistent_group_protocol))
        if member_id in group.pending_members:
            if req.group_instance_id is not None:  # pending ids are only handed to dynamic ones
                return _done(JoinResult.failed(member_id, ErrorCode.unknown_server_error))
            return self._add_member(group, req, member_id)
        error = group.validate_member(member_id, req.group_instance_id)
        if error is not None:
            return _done(JoinResult.failed(member_id, error))
        member = group.get(member_id)
        if group.is_(_P):
            return self._update_member(group, member, req)
        if group.is_(_C):
            if member.matches(req.protocols):  # a retry after a lost response
                return _done(_current_generation(group, member_id, with_members=True))
            return self._update_member(group, member, req)
        if group.is_(_S):
            # The leader rejoining forces a rebalance: that is how it reacts to metadata
            # changes (new partitions) that do not change any member's subscription.
            if group.is_leader(member_id) or not member.matches(req.protocols):
                return self._update_member(group, member, req)
            return _done(_current_generation(group, member_id, with_members=False))
        return _done(JoinResult.failed(member_id, ErrorCode.unknown_member_id))

    def _add_member(
        self, group: GroupMetadata, req: JoinRequest, member_id: str
    ) -> asyncio.Future[JoinResult]:
        member = MemberMetadata(
            member_id=member_id,
            group_instance_id=req.group_instance_id,
            client_id=req.client_id,
            client_host=req.client_host,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            session_timeout_ms=req.session_timeout_ms,
            protocol_type=req.protocol_type,
            protocols=req.protocols,
            is_new=True,
        )
        future: asyncio.Future[JoinResult] = new_future()
        member.join_future = future
        if group.is_(_P) and group.generation_id == 0:
            group.new_member_added = True  # lets the initial delay wait once more
        group.add(member)
        self._rebalancer.schedule_new_member_expiry(member)
        self._rebalancer.maybe_prepare_rebalance(group)
        return future

    def _update_member(
        self, group: GroupMetadata, member: MemberMetadata, req: JoinRequest
    ) -> asyncio.Future[JoinResult]:
        future = _park_join(member, req)
        self._rebalancer.maybe_prepare_rebalance(group)
        return future

    async def _replace_static_member(
        self, group: GroupMetadata, req: JoinRequest, old_id: str, new_id: str
    ) -> asyncio.Future[JoinResult]:
        """A static member restarted: it takes over its old identity under a new member id.

        In a Stable group this avoids a rebalance when the protocol choice cannot change;
        the new id is persisted first, so a coordinator restart still knows it.
        """
        instance_id = req.group_instance_id
        assert instance_id is not None
        old_leader = group.leader_id
        member = group.replace_static_member(instance_id, old_id, new_id)
        self._rebalancer.schedule_heartbeat(member)
        saved = (member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms)
        future = _park_join(member, req)
        if group.is_(_C):
            # The leader may already be assigning to the old id: start over.
            self._rebalancer.prepare_rebalance(group)
        elif group.is_(_S):
            if group.select_protocol() != group.protocol:
                self._rebalancer.maybe_prepare_rebalance(group)
                return future
            assignments = {m.member_id: m.assignment for m in group.members.values()}
            error = await self._manager.store_group(group, assignments)
            if member.join_future is not future:  # a rebalance answered it meanwhile
                return future
            if error is not ErrorCode.none:
                member.join_future = None
                member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms = saved
                if group.members.get(new_id) is member:
                    group.replace_static_member(instance_id, new_id, old_id)
                    self._rebalancer.schedule_heartbeat(member)
                return _done(JoinResult(error, NO_MEMBER_ID, group.generation_id))
            # Before v9 the old leader id is returned on purpose: the restarted member must not
            # think it leads and compute an assignment a Stable group would never distribute.
            # From v9 a leader is told it leads and to skip the assignment (KIP-814).
            skip = req.supports_skipping_assignment and group.is_leader(new_id)
            member.complete_join(
                JoinResult(
                    error=ErrorCode.none,
                    member_id=new_id,
                    generation_id=group.generation_id,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol or "",
                    leader_id=(group.leader_id if req.supports_skipping_assignment else old_leader)
                    or "",
                    members=group.current_member_metadata() if skip else (),
                    skip_assignment=skip,
                )
            )
        return future


def _current_generation(group: GroupMetadata, member_id: str, *, with_members: bool) -> JoinResult:
    leader = group.is_leader(member_id)
    return JoinResult(
        error=ErrorCode.none,
        member_id=member_id,
        generation_id=group.generation_id,
        protocol_type=group.protocol_type,
        protocol_name=group.protocol or "",
        leader_id=group.leader_id or "",
        members=group.current_member_metadata() if with_members and leader else (),
    )


def _done(result: JoinResult) -> asyncio.Future[JoinResult]:
    future: asyncio.Future[JoinResult] = new_future()
    future.set_result(result)
    return future


def _park_join(member: MemberMetadata, req: JoinRequest) -> asyncio.Future[JoinResult]:
    """Record the member's new protocols and timeouts and park its JoinGroup.

    A second JoinGroup while one is parked shares the parked future, so both get answered.
    """
    member.protocols = req.protocols
    member.rebalance_timeout_ms = req.rebalance_timeout_ms
    member.session_timeout_ms = req.session_timeout_ms
    if member.join_future is None or member.join_future.done():
        member.join_future = new_future()
    return member.join_future
