"""The rebalance engine: starting and completing rebalances, timers, member removal.

Kafka drives these steps from purgatories of delayed operations. Here every deadline is a
number on the group or member (monotonic ms), and the engine checks them whenever something
happens (a join, a leave) and on the broker's periodic `poll()`. Completing a step resolves
the parked JoinGroup and SyncGroup futures, so no code path ever sleeps.
"""

from __future__ import annotations

import asyncio
from typing import TypeVar

from onceflow.clock import Clock
from onceflow.coordinator.group.config import NEW_MEMBER_JOIN_TIMEOUT_MS, GroupCoordinatorConfig
from onceflow.coordinator.group.manager import GroupMetadataManager
from onceflow.coordinator.group.metadata import GroupMetadata, InitialDelay, MemberMetadata
from onceflow.coordinator.group.offsets import GroupRecord
from onceflow.coordinator.group.results import NO_MEMBER_ID, JoinResult, SyncResult
from onceflow.coordinator.group.state import GroupState, can_transition
from onceflow.errors import ErrorCode

T = TypeVar("T")
_P = GroupState.PREPARING_REBALANCE
_C = GroupState.COMPLETING_REBALANCE
_S = GroupState.STABLE


class Rebalancer:
    def __init__(
        self, clock: Clock, config: GroupCoordinatorConfig, manager: GroupMetadataManager
    ) -> None:
        self._clock = clock
        self._config = config
        self._manager = manager
        # Group records to write once the current request's state changes are done: an
        # emptied group is persisted without making anyone wait for it (as in Kafka).
        self._deferred: list[tuple[GroupMetadata, GroupRecord]] = []

    # -- heartbeats

    def schedule_heartbeat(self, member: MemberMetadata) -> None:
        member.heartbeat_deadline_ms = self._clock.monotonic_ms() + member.session_timeout_ms

    def schedule_new_member_expiry(self, member: MemberMetadata) -> None:
        member.heartbeat_deadline_ms = self._clock.monotonic_ms() + NEW_MEMBER_JOIN_TIMEOUT_MS

    # -- starting a rebalance

    def maybe_prepare_rebalance(self, group: GroupMetadata) -> None:
        if can_transition(group.state, _P):
            self.prepare_rebalance(group)

    def prepare_rebalance(self, group: GroupMetadata) -> None:
        """Enter PreparingRebalance and arm the delayed join."""
        if group.is_(_C):  # members waiting in SyncGroup must rejoin instead
            self.reset_and_propagate_assignment_error(group, ErrorCode.rebalance_in_progress)
        group.pending_sync.clear()
        group.sync_deadline_ms = None
        now = self._clock.monotonic_ms()
        if group.is_(GroupState.EMPTY):
            # A brand-new group waits a little so that consumers starting together land
            # in one generation instead of rebalancing once per arrival.
            delay = self._config.group_initial_rebalance_delay_ms
            group.initial_delay = InitialDelay(delay, max(group.rebalance_timeout_ms() - delay, 0))
            group.new_member_added = False
            group.join_deadline_ms = now + delay
        else:
            group.initial_delay = None
            group.join_deadline_ms = now + group.rebalance_timeout_ms()
        group.transition_to(_P, self._clock.now_ms())
        self.maybe_complete_join(group)

    # -- completing the join phase

    def maybe_complete_join(self, group: GroupMetadata) -> None:
        """Complete the delayed join if everyone is in or its time is up."""
        if not group.is_(_P) or group.join_deadline_ms is None:
            return
        now = self._clock.monotonic_ms()
        if group.initial_delay is None:
            if group.all_members_joined() or group.join_deadline_ms <= now:
                self.complete_join(group)
            return
        # The initial delay never ends early; each wait that saw a newcomer buys another,
        # until the rebalance timeout is used up.
        while group.join_deadline_ms <= now:
            wait = group.initial_delay
            if group.new_member_added and wait.remaining_ms > 0:
                group.new_member_added = False
                delay = min(self._config.group_initial_rebalance_delay_ms, wait.remaining_ms)
                remaining = max(wait.remaining_ms - wait.delay_ms, 0)
                group.initial_delay = InitialDelay(delay, remaining)
                group.join_deadline_ms = now + delay
            else:
                self.complete_join(group)
                return

    def complete_join(self, group: GroupMetadata) -> None:
        for member in group.not_yet_rejoined():
            if not member.is_static:  # static members keep their place across restarts
                self._drop(group, member)
        if group.is_(GroupState.DEAD):
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Nobody rejoined: wait another round for session expiry to clear them out.
            group.initial_delay = None
            group.join_deadline_ms = self._clock.monotonic_ms() + group.rebalance_timeout_ms()
            return
        group.initial_delay = None
        group.join_deadline_ms = None
        group.init_next_generation(self._clock.now_ms())
        if group.is_(GroupState.EMPTY):
            self._deferred.append((group, group.to_record({})))
            return
        leader_view = group.current_member_metadata()
        for member in group.members.values():
            member.complete_join(
                JoinResult(
                    error=ErrorCode.none,
                    member_id=member.member_id,
                    generation_id=group.generation_id,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol or "",
                    leader_id=group.leader_id or "",
                    members=leader_view if group.is_leader(member.member_id) else (),
                )
            )
            self.schedule_heartbeat(member)
            member.is_new = False
            group.pending_sync.add(member.member_id)
        # Members that never send SyncGroup are removed after the rebalance timeout.
        group.sync_deadline_ms = self._clock.monotonic_ms() + group.rebalance_timeout_ms()

    # -- the sync phase

    def set_and_propagate_assignment(
        self, group: GroupMetadata, assignments: dict[str, bytes]
    ) -> None:
        for member in group.members.values():
            member.assignment = assignments.get(member.member_id, b"")
            result = SyncResult(
                ErrorCode.none, member.assignment, group.protocol_type, group.protocol
            )
            if member.complete_sync(result):
                self.schedule_heartbeat(member)

    def reset_and_propagate_assignment_error(self, group: GroupMetadata, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
            if member.complete_sync(SyncResult(error)):
                self.schedule_heartbeat(member)

    def remove_pending_sync(self, group: GroupMetadata, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            group.sync_deadline_ms = None

    # -- removing members

    def remove_member(self, group: GroupMetadata, member: MemberMetadata) -> None:
        """Remove a member that left or died, and let the group react."""
        self._drop(group, member)
        if group.is_(_S, _C):
            self.maybe_prepare_rebalance(group)
        elif group.is_(_P):
            self.maybe_complete_join(group)

    def remove_pending_member(self, group: GroupMetadata, member_id: str) -> None:
        group.pending_members.pop(member_id, None)
        self.maybe_complete_join(group)

    def _drop(self, group: GroupMetadata, member: MemberMetadata) -> None:
        # A parked request of a removed member is answered, so the client rejoins.
        member.complete_join(JoinResult.failed(NO_MEMBER_ID, ErrorCode.unknown_member_id))
        member.complete_sync(SyncResult(ErrorCode.unknown_member_id))
        group.remove(member.member_id)

    # -- timers

    def expire(self, group: GroupMetadata) -> None:
        """Apply every deadline of the group that has passed."""
        now = self._clock.monotonic_ms()
        for member_id, deadline in list(group.pending_members.items()):
            if deadline <= now:
                self.remove_pending_member(group, member_id)
        for member in list(group.members.values()):
            if member.heartbeat_deadline_ms > now or group.members.get(member.member_id) is None:
                continue
            # A member parked in JoinGroup or SyncGroup cannot heartbeat; it counts as alive
            # (a new member only until its join timeout).
            if not member.is_new and (member.is_awaiting_join or member.is_awaiting_sync):
                continue
            self.remove_member(group, member)
        if group.sync_deadline_ms is not None and group.sync_deadline_ms <= now:
            self._expire_pending_sync(group)
        self.maybe_complete_join(group)

    def _expire_pending_sync(self, group: GroupMetadata) -> None:
        group.sync_deadline_ms = None
        if not group.is_(_C, _S) or not group.pending_sync:
            return
        for member_id in list(group.pending_sync):
            member = group.members.get(member_id)
            if member is not None:
                self._drop(group, member)
        self.prepare_rebalance(group)

    # -- deferred writes

    async def flush(self) -> None:
        while self._deferred:
            pending, self._deferred = self._deferred, []
            for group, record in pending:
                # Not for a group whose partition was unloaded meanwhile: its record could
                # land behind a reload's back (or in a partition another broker leads).
                # Nor for one deleted, or turned into a consumer group, meanwhile: the record
                # would undo its tombstone. Nor once a later generation has its own record.
                current = (
                    self._manager.is_current(group)
                    and not group.is_(GroupState.DEAD)
                    and group.consumer is None
                    and group.generation_id == record.generation
                )
                if current:
                    await self._manager.store_group_record(group.group_id, record)

    def close(self, group: GroupMetadata) -> None:
        """Answer every parked request of the group: this coordinator is going away."""
        for member in group.members.values():
            member.complete_join(JoinResult.failed(member.member_id, ErrorCode.not_coordinator))
            member.complete_sync(SyncResult(ErrorCode.not_coordinator))


def new_future() -> asyncio.Future[T]:
    return asyncio.get_running_loop().create_future()
