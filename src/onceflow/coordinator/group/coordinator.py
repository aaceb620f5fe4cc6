"""GroupCoordinator: the classic consumer group protocol, without sockets.

The request handlers call one method per API and turn the returned values into responses.
JoinGroup and SyncGroup may wait (for the other members, for the leader's assignment); they
park a future and return when a later request or `poll()` resolves it. Everything else
answers at once. The broker calls `await poll()` periodically (every 100 ms or so) to expire
sessions, finish timed-out rebalances and expire offsets.

Which groups are coordinated here goes by `__consumer_offsets` partition. A single broker
calls `await load()` at startup: every partition, rebuilt from the log (until then every
group answers COORDINATOR_LOAD_IN_PROGRESS). A broker of a cluster coordinates the groups of
the partitions it leads: it makes the coordinator with `serve_all=False` (or calls
`serve_loaded_only()`), calls `await load_partition(p)` when it becomes the leader of
partition p (its groups answer COORDINATOR_LOAD_IN_PROGRESS until the load is done) and
`unload(p)` when it stops leading it (its groups are forgotten and answer NOT_COORDINATOR).

Transactions: TxnOffsetCommit writes a transactional batch through `txn_offset_commit`, and
the broker calls `complete_txn` after each COMMIT or ABORT marker it writes to a
`__consumer_offsets` partition, which is when those offsets become visible or vanish.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from onceflow.clock import Clock
from onceflow.coordinator.group.config import GroupCoordinatorConfig
from onceflow.coordinator.group.consumer_classic import ClassicJoin, ClassicMembers
from onceflow.coordinator.group.consumer_conversion import (
    can_downgrade,
    to_classic_group,
    undo_classic_group,
)
from onceflow.coordinator.group.consumer_group import ConsumerGroup
from onceflow.coordinator.group.consumer_messages import HeartbeatRequest, HeartbeatResult
from onceflow.coordinator.group.consumer_protocol import (
    ConsumerHeartbeats,
    TopicLookup,
    TopicNames,
)
from onceflow.coordinator.group.consumer_records import change_records, tombstones
from onceflow.coordinator.group.deletion import GroupDeleter
from onceflow.coordinator.group.join import Joiner, JoinRequest
from onceflow.coordinator.group.log import OffsetsLog
from onceflow.coordinator.group.manager import GroupMetadataManager, append_error
from onceflow.coordinator.group.metadata import CONSUMER_PROTOCOL_TYPE, GroupMetadata
from onceflow.coordinator.group.offsets import OFFSETS_TOPIC, OffsetAndMetadata, TopicPartition
from onceflow.coordinator.group.rebalance import Rebalancer, new_future
from onceflow.coordinator.group.results import (
    CONSUMER_GROUP,
    NO_MEMBER_ID,
    GroupOverview,
    GroupSummary,
    JoinResult,
    LeaveMemberResult,
    LeaveResult,
    OffsetCommitEntry,
    OffsetFetchResult,
    SyncResult,
)
from onceflow.coordinator.group.state import GroupState
from onceflow.errors import ErrorCode
from onceflow.protocol.txn_support import TxnSupport

log = logging.getLogger(__name__)

_E = GroupState.EMPTY
_P = GroupState.PREPARING_REBALANCE
_C = GroupState.COMPLETING_REBALANCE
_S = GroupState.STABLE
_D = GroupState.DEAD


class GroupCoordinator:
    def __init__(
        self,
        log: OffsetsLog,
        clock: Clock,
        config: GroupCoordinatorConfig | None = None,
        *,
        offsets_partitions: int | None = None,
        min_session_timeout_ms: int | None = None,
        max_session_timeout_ms: int | None = None,
        initial_rebalance_delay_ms: int | None = None,
        offsets_retention_ms: int | None = None,
        new_uuid: Callable[[], str] | None = None,
        serve_all: bool = True,
        topics: TopicLookup | None = None,
        topic_names: TopicNames | None = None,
    ) -> None:
        """Settings come from `config` (default: Kafka's), each keyword overriding one.

        `serve_all=False` is for a broker of a cluster: no partition is served (every group
        answers NOT_COORDINATOR) until `load_partition` loads it. `topics` tells a topic's
        id and partition count (None: no such topic), for consumer-protocol assignments, and
        `topic_names` lists the topics their regex subscriptions may match.
        """
        overrides: dict[str, Any] = {
            "offsets_topic_num_partitions": offsets_partitions,
            "group_min_session_timeout_ms": min_session_timeout_ms,
            "group_max_session_timeout_ms": max_session_timeout_ms,
            "group_initial_rebalance_delay_ms": initial_rebalance_delay_ms,
            "offsets_retention_ms": offsets_retention_ms,
        }
        self.config = dataclasses.replace(
            config or GroupCoordinatorConfig(),
            **{name: value for name, value in overrides.items() if value is not None},
        )
        self._clock = clock
        self._manager = GroupMetadataManager(log, clock, self.config, serve_all=serve_all)
        self._partitions = self._manager.partitions
        self._rebalancer = Rebalancer(clock, self.config, self._manager)
        self._deleter = GroupDeleter(clock, self._manager)
        make_uuid = new_uuid or (lambda: str(uuid.uuid4()))
        self._joiner = Joiner(clock, self.config, self._manager, self._rebalancer, make_uuid)
        self._consumers = ConsumerHeartbeats(
            clock,
            self.config,
            self._manager,
            topics or (lambda _: None),
            topic_names or (lambda: ()),
            make_uuid,
        )
        self._classic_members = ClassicMembers(
            clock, self._consumers, self.config.consumer_max_size, make_uuid
        )
        self._closed = False
        # The offsets-expiry timer: armed by the first load (of all or of one partition).
        self._next_retention_check_ms: int | None = None

    # -- lifecycle

    def partition_for(self, group_id: str) -> int:
        """The __consumer_offsets partition holding the group (FindCoordinator, tools)."""
        return self._manager.partition_for(group_id)

    async def load(self) -> None:
        """A single broker: serve every partition, each rebuilt from the log."""
        for partition in range(self.config.offsets_topic_num_partitions):
            await self._load(partition, None, force=True)

    async def load_partition(self, partition: int, coordinator_epoch: int | None = None) -> None:
        """Start serving one partition (its broker became the leader): replay it from the
        log and install its groups and offsets, replacing anything of it still in memory.

        Its groups answer COORDINATOR_LOAD_IN_PROGRESS until the load is done. Nothing is
        done for a partition already served or loading, unless `coordinator_epoch` (the
        partition's leader epoch) is newer than the one it was loaded with, which starts
        over; nor for an epoch older than the newest seen for it (a stale call). The first
        call leaves the single-broker initial state (`serve_loaded_only`). Returns when the
        partition is served, or when an unload or a newer load overtook this one. If the
        read fails the partition is left unserved (NOT_COORDINATOR) and the error raised.
        """
        if self._closed:
            return
        self.serve_loaded_only()
        await self._load(partition, coordinator_epoch, force=False)

    async def _load(self, partition: int, epoch: int | None, *, force: bool) -> None:
        token = self._partitions.begin(partition, epoch, force=force)
        if token is None:
            return
        self._forget(partition)  # what a newer epoch replaces: parked requests are answered
        loaded = await self._manager.load_partition(partition, token)
        if loaded is None:
            return
        for group in loaded:
            for member in group.members.values():
                self._rebalancer.schedule_heartbeat(member)
            if len(group.members) > self.config.group_max_size:
                self._rebalancer.prepare_rebalance(group)
        if self._next_retention_check_ms is None:
            interval = self.config.offsets_retention_check_interval_ms
            self._next_retention_check_ms = self._clock.monotonic_ms() + interval
        if force and not loaded:
            return  # a single broker's start: one line per empty partition says nothing
        log.info(
            "loaded %d groups of %s-%d%s",
            len(loaded),
            OFFSETS_TOPIC,
            partition,
            "" if epoch is None else f" for coordinator epoch {epoch}",
        )

    def unload(self, partition: int, coordinator_epoch: int | None = None) -> None:
        """Stop coordinating the groups of an offsets partition (its broker no longer leads
        it, or its log went offline) and forget them: parked joins and syncs answer
        NOT_COORDINATOR, their timers stop, and so does a load of it in progress. Later
        requests get NOT_COORDINATOR; a later `load_partition` starts from the log again.

        Ignored when `coordinator_epoch` is older than the newest seen for the partition.
        """
        if not self._partitions.drop(partition, coordinator_epoch):
            return
        gone = self._forget(partition)
        if gone:
            log.info("unloaded %d groups of %s-%d", len(gone), OFFSETS_TOPIC, partition)

    def _forget(self, partition: int) -> list[GroupMetadata]:
        gone = self._manager.forget(partition)
        now = self._clock.now_ms()
        for group in gone:
            self._rebalancer.close(group)
            # Dead, so that a request still working on this object leaves it alone.
            group.transition_to(_D, now)
        return gone

    def serve_loaded_only(self) -> None:
        """Serve only what `load_partition` loads: leave the initial state of a coordinator
        made with `serve_all` (every group loading until `load()`), for a broker that turns
        out to be one of a cluster. Partitions loaded already stay served."""
        self._partitions.serve_loaded_only()

    def owns(self, group_id: str) -> bool:
        """Whether this coordinator serves the group: its partition is loaded here."""
        return self._partitions.owns(self.partition_for(group_id))

    def loading(self, group_id: str) -> bool:
        """Whether the group's partition is being loaded (COORDINATOR_LOAD_IN_PROGRESS)."""
        return self._partitions.loading(self.partition_for(group_id))

    def coordinator_error(self, group_id: str) -> ErrorCode:
        """What a request for the group gets before anything else is looked at: NONE when
        served here, else COORDINATOR_NOT_AVAILABLE (closed), COORDINATOR_LOAD_IN_PROGRESS
        or NOT_COORDINATOR."""
        if self._closed:
            return ErrorCode.coordinator_not_available
        return self._partitions.error(self.partition_for(group_id)) or ErrorCode.none

    @property
    def loaded_partitions(self) -> frozenset[int]:
        """The __consumer_offsets partitions served here."""
        return self._partitions.owned

    @property
    def loading_partitions(self) -> frozenset[int]:
        return self._partitions.loading_partitions

    def close(self) -> None:
        """Answer every parked request with NOT_COORDINATOR and refuse new ones."""
        self._closed = True
        for group in self._manager.groups.values():
            self._rebalancer.close(group)

    async def poll(self) -> None:
        """Apply every deadline that has passed: sessions, delayed joins, syncs, retention."""
        if self._closed:
            return
        for group in list(self._manager.groups.values()):
            if self.owns(group.group_id):
                self._rebalancer.expire(group)
                if group.consumer is not None:
                    self._consumers.expire(group.group_id, group.consumer)
                    if await self._write_consumer_changes(group.group_id) is None:
                        await self._maybe_downgrade(group.group_id)
        now = self._clock.monotonic_ms()
        if self._next_retention_check_ms is not None and now >= self._next_retention_check_ms:
            self._next_retention_check_ms = now + self.config.offsets_retention_check_interval_ms
            await self._manager.expire_offsets(self.owns)
        await self._rebalancer.flush()

    async def expire_offsets(self) -> int:
        """Run the retention check now; returns the number of tombstones written."""
        return await self._manager.expire_offsets(self.owns)

    def group(self, group_id: str) -> GroupMetadata | None:
        """The live metadata of a group (tests and tools; do not mutate)."""
        return self._manager.get(group_id)

    def _status_error(self, group_id: str | None, *, allow_empty_id: bool) -> ErrorCode | None:
        if group_id is None or (not group_id and not allow_empty_id):
            return ErrorCode.invalid_group_id
        error = self.coordinator_error(group_id)
        return None if error is ErrorCode.none else error

    # -- JoinGroup

    async def join_group(
        self,
        group_id: str,
        member_id: str,
        *,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        group_instance_id: str | None = None,
        require_known_member_id: bool = False,
        supports_skipping_assignment: bool = False,
        client_id: str = "",
        client_host: str = "",
    ) -> JoinResult:
        """Join (or rejoin) a group; returns when the rebalance this starts is complete.

        `require_known_member_id` is for JoinGroup v4+ dynamic members: the first join only
        hands out a member id (MEMBER_ID_REQUIRED) and the client joins again with it.
        """
        error = self._status_error(group_id, allow_empty_id=False)
        if error is None and not (
            self.config.group_min_session_timeout_ms
            <= session_timeout_ms
            <= self.config.group_max_session_timeout_ms
        ):
            error = ErrorCode.invalid_session_timeout
        if error is not None:
            return JoinResult.failed(member_id, error)
        group = self._manager.get(group_id)
        if group is not None and group.consumer is not None and group.consumer.members:
            join = ClassicJoin(
                group_id,
                member_id,
                group_instance_id,
                client_id,
                client_host,
                session_timeout_ms,
                rebalance_timeout_ms,
                protocol_type,
                tuple((name, bytes(data)) for name, data in protocols),
                require_known_member_id,
            )
            joined = self._classic_members.join(group.consumer, join)
            failed = await self._write_consumer_changes(group_id)
            return joined if failed is None else JoinResult.failed(member_id, failed)
        error = await self._classic_join_to_consumer_group(group_id)
        if error is not None:
            return JoinResult.failed(member_id, error)
        request = JoinRequest(
            member_id=member_id,
            group_instance_id=group_instance_id,
            client_id=client_id,
            client_host=client_host,
            rebalance_timeout_ms=rebalance_timeout_ms,
            session_timeout_ms=session_timeout_ms,
            protocol_type=protocol_type,
            protocols=tuple((name, bytes(data)) for name, data in protocols),
            require_known_member_id=require_known_member_id,
            supports_skipping_assignment=supports_skipping_assignment,
        )
        future = await self._joiner.join(group_id, request)
        await self._rebalancer.flush()
        # Shielded: a cancelled request (its client went away) must not cancel a future
        # that another request for the same member may share.
        return await asyncio.shield(future)

    async def _classic_join_to_consumer_group(self, group_id: str) -> ErrorCode | None:
        """A classic JoinGroup meeting an empty consumer-protocol group: it becomes a
        classic group (its offsets kept), as in Kafka (a non-empty one takes the member
        as a classic member of it, consumer_classic.py)."""
        group = self._manager.get(group_id)
        if group is None or group.consumer is None:
            return None
        consumer = group.consumer
        group.consumer = None
        try:
            await self._manager.append_records(group_id, tombstones(group_id, consumer))
        except Exception as exc:
            if group.consumer is None and not group.members:  # nobody joined meanwhile
                group.consumer = consumer
            return append_error(exc, offsets=False)
        return None

    # -- ConsumerGroupHeartbeat and ConsumerGroupDescribe (KIP-848)

    async def consumer_group_heartbeat(self, request: HeartbeatRequest) -> HeartbeatResult:
        """One ConsumerGroupHeartbeat; answered once what it changed is in the log."""
        error = self.coordinator_error(request.group_id) if request.group_id else ErrorCode.none
        if error is not ErrorCode.none:
            return HeartbeatResult(error, None, request.member_id or None)
        before = self._manager.get(request.group_id)
        known = (
            before is not None
            and before.consumer is not None
            and (request.member_id in before.consumer.members)
        )
        result = self._consumers.heartbeat(request)
        failed = await self._write_consumer_changes(request.group_id)
        if failed is not None:
            if result.error is not ErrorCode.none:
                return result
            if not known and result.member_id is not None:
                self._forget_new_member(request.group_id, result.member_id)
            return HeartbeatResult(failed, None, request.member_id or None)
        await self._maybe_downgrade(request.group_id)
        return result

    def _forget_new_member(self, group_id: str, member_id: str) -> None:
        """A join whose records were not written: its client never learns the member id
        (v0 has the coordinator make it), so the member goes rather than hold partitions
        until its session ends. Its tombstone goes with the next write."""
        group = self._manager.get(group_id)
        if group is not None and group.consumer is not None:
            group.consumer.remove(member_id)

    async def _maybe_downgrade(self, group_id: str) -> None:
        """After a KIP-848 member went: a group of classic members only turns classic and
        rebalances, when the policy allows (consumer_conversion.py)."""
        group = self._manager.get(group_id)
        if group is None or group.consumer is None or not group.consumer.consumer_member_left:
            return
        group.consumer.consumer_member_left = False
        if not can_downgrade(group.consumer, self.config):
            return
        consumer, generation = group.consumer, group.generation_id
        records = to_classic_group(group, self._clock.now_ms())
        try:
            await self._manager.append_records(group_id, records)
        except Exception as exc:
            log.warning("group %s: the downgrade's records were not written: %s", group_id, exc)
            undo_classic_group(group, consumer, generation, self._clock.now_ms())
            return
        log.info("group %s: downgraded from consumer to classic", group_id)
        for member in group.members.values():
            self._rebalancer.schedule_heartbeat(member)
        if group.is_(_S):
            self._rebalancer.prepare_rebalance(group)

    async def _write_consumer_changes(self, group_id: str) -> ErrorCode | None:
        """Append the records of what changed in a consumer group; the error, if that
        failed (the client retries, or finds the new coordinator)."""
        group = self._manager.get(group_id)
        if group is None or group.consumer is None:
            return None
        consumer = group.consumer
        changes = consumer.take_changes()
        records = change_records(group_id, consumer, changes)
        if not records:
            return None
        try:
            await self._manager.append_records(group_id, records)
        except Exception as exc:
            consumer.keep_changes(changes)  # the next write brings the log up to date
            return append_error(exc, offsets=False)
        return None

    def consumer_group(self, group_id: str) -> tuple[ErrorCode, str | None, ConsumerGroup | None]:
        """ConsumerGroupDescribe's view of one group: its error and message, or the group."""
        error = self.coordinator_error(group_id)
        if error is not ErrorCode.none:
            return error, None, None
        group = self._manager.get(group_id)
        if group is None or group.is_(_D):
            return ErrorCode.group_id_not_found, f"Group {group_id} not found.", None
        if group.consumer is None:
            return ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group.", None
        return ErrorCode.none, None, group.consumer

    # -- SyncGroup

    async def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        *,
        assignments: Mapping[str, bytes] | None = None,
        group_instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> SyncResult:
        error = self._status_error(group_id, allow_empty_id=False)
        if error is ErrorCode.coordinator_load_in_progress:
            # The rebalance was lost with the old coordinator; rejoining starts a new one.
            return SyncResult(ErrorCode.rebalance_in_progress)
        if error is not None:
            return SyncResult(error)
        group = self._manager.get(group_id)
        if group is None:
            return SyncResult(ErrorCode.unknown_member_id)
        if group.is_(_D):
            return SyncResult(ErrorCode.coordinator_not_available)
        if group.consumer is not None:
            synced = self._classic_members.sync(
                group.consumer,
                member_id,
                group_instance_id,
                generation_id,
                protocol_type,
                protocol_name,
            )
            failed = await self._write_consumer_changes(group_id)
            return synced if failed is None else SyncResult(failed)
        error = group.validate_member(member_id, group_instance_id)
        if error is None and generation_id != group.generation_id:
            error = ErrorCode.illegal_generation
        if error is None and (
            (protocol_type is not None and protocol_type != group.protocol_type)
            or (protocol_name is not None and protocol_name != group.protocol)
        ):
            error = ErrorCode.inconsistent_group_protocol
        if error is not None:
            return SyncResult(error)
        if group.is_(_E):
            return SyncResult(ErrorCode.unknown_member_id)
        if group.is_(_P):
            return SyncResult(ErrorCode.rebalance_in_progress)
        member = group.get(member_id)
        self._rebalancer.remove_pending_sync(group, member_id)
        if group.is_(_S):
            self._rebalancer.schedule_heartbeat(member)
            return SyncResult(
                ErrorCode.none, member.assignment, group.protocol_type, group.protocol
            )
        # CompletingRebalance: everyone waits for the leader's assignment to be durable.
        if member.sync_future is None or member.sync_future.done():
            member.sync_future = new_future()
        future = member.sync_future
        if group.is_leader(member_id):
            given = assignments or {}
            full = {mid: bytes(given.get(mid, b"")) for mid in group.members}
            generation = group.generation_id
            error = await self._manager.store_group(group, full)
            if group.is_(_C) and group.generation_id == generation:
                if error is not ErrorCode.none:
                    self._rebalancer.reset_and_propagate_assignment_error(group, error)
                    self._rebalancer.maybe_prepare_rebalance(group)
                else:
                    self._rebalancer.set_and_propagate_assignment(group, full)
                    group.transition_to(_S, self._clock.now_ms())
        return await asyncio.shield(future)

    # -- Heartbeat and LeaveGroup

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        *,
        group_instance_id: str | None = None,
    ) -> ErrorCode:
        error = self._status_error(group_id, allow_empty_id=False)
        if error is ErrorCode.coordinator_load_in_progress:
            return ErrorCode.none  # the group is not known yet; keep the member calm
        if error is not None:
            return error
        group = self._manager.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.is_(_D):
            return ErrorCode.coordinator_not_available
        if group.consumer is not None:
            return self._classic_members.heartbeat(
                group.consumer, member_id, group_instance_id, generation_id
            )
        error = group.validate_member(member_id, group_instance_id)
        if error is None and generation_id != group.generation_id:
            error = ErrorCode.illegal_generation
        if error is not None:
            return error
        if group.is_(_E):
            return ErrorCode.unknown_member_id
        self._rebalancer.schedule_heartbeat(group.get(member_id))
        if group.is_(_P):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    async def leave_group(
        self, group_id: str, members: Sequence[tuple[str, str | None]]
    ) -> LeaveResult:
        """Remove members, given as (member id, group instance id) pairs (v3 batches)."""
        error = self._status_error(group_id, allow_empty_id=False)
        if error is not None:
            return LeaveResult(error)
        group = self._manager.get(group_id)
        if group is None:
            return LeaveResult(
                ErrorCode.none,
                tuple(LeaveMemberResult(m, i, ErrorCode.unknown_member_id) for m, i in members),
            )
        if group.is_(_D):
            return LeaveResult(ErrorCode.coordinator_not_available)
        if group.consumer is not None:
            consumer = group.consumer
            left = tuple(
                LeaveMemberResult(m, i, self._classic_members.leave(consumer, m, i))
                for m, i in members
            )
            failed = await self._write_consumer_changes(group_id)
            if failed is not None:
                return LeaveResult(failed)
            await self._maybe_downgrade(group_id)
            return LeaveResult(ErrorCode.none, left)
        results = tuple(LeaveMemberResult(m, i, self._leave_one(group, m, i)) for m, i in members)
        await self._rebalancer.flush()
        return LeaveResult(ErrorCode.none, results)

    def _leave_one(
        self, group: GroupMetadata, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        if member_id == NO_MEMBER_ID:
            # Administrative removal of a static member by its instance id alone.
            current = group.static_members.get(instance_id) if instance_id is not None else None
            if current is None:
                return ErrorCode.unknown_member_id
            self._rebalancer.remove_member(group, group.get(current))
            return ErrorCode.none
        if member_id in group.pending_members:
            self._rebalancer.remove_pending_member(group, member_id)
            return ErrorCode.none
        error = group.validate_member(member_id, instance_id)
        if error is not None:
            return error
        self._rebalancer.remove_member(group, group.get(member_id))
        return ErrorCode.none

    # -- offsets

    async def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        offsets: Mapping[TopicPartition, OffsetCommitEntry],
        *,
        group_instance_id: str | None = None,
        retention_ms: int | None = None,
        unknown_group: ErrorCode = ErrorCode.illegal_generation,
        member_epochs: bool = True,
    ) -> dict[TopicPartition, ErrorCode]:
        """Commit offsets for a group member, or for a simple consumer (generation -1).

        A generation for a group that does not exist answers `unknown_group`: Kafka's
        GROUP_ID_NOT_FOUND from OffsetCommit v9, ILLEGAL_GENERATION before. In a
        consumer-protocol group `generation_id` is the member epoch, which only requests
        that carry one (`member_epochs`: OffsetCommit v9+) may commit with.
        """
        error = self._status_error(group_id, allow_empty_id=True)
        group = self._manager.get(group_id)
        if error is None and group is None:
            if generation_id < 0:  # not using group management: offsets storage only
                group = self._manager.add(GroupMetadata(group_id, self._clock.now_ms()))
            else:
                error = unknown_group
        if error is None and group is not None and group.consumer is not None:
            error = _validate_consumer_commit(
                group.consumer, member_id, generation_id, member_epochs=member_epochs
            )
        elif error is None and group is not None:
            error = _validate_commit(group, member_id, group_instance_id, generation_id)
            if error is None and group.is_(_C):
                error = ErrorCode.rebalance_in_progress
        if error is not None or group is None:
            return dict.fromkeys(offsets, error or ErrorCode.unknown_server_error)
        if group.is_(_S, _P):
            self._rebalancer.schedule_heartbeat(group.get(member_id))
        now = self._clock.now_ms()
        expire = None if retention_ms is None else now + retention_ms
        values = {
            tp: OffsetAndMetadata(e.offset, e.leader_epoch, e.metadata or "", now, expire)
            for tp, e in offsets.items()
        }
        return await self._manager.store_offsets(group, values)

    async def txn_offset_commit(
        self,
        transactional_id: str,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
        offsets: Mapping[TopicPartition, OffsetCommitEntry],
        support: TxnSupport = TxnSupport.DEFAULT_ERROR,
    ) -> dict[TopicPartition, ErrorCode]:
        """Write offsets inside a producer's transaction; visible once its COMMIT lands.

        An unknown group is created (a transactional copier may be its only committer).
        Member and generation are checked only when the request carries them (TxnOffsetCommit
        v3+), and unlike a plain commit one is accepted during a rebalance: the transaction
        fences zombies, the group need not.
        """
        error = self._status_error(group_id, allow_empty_id=False)
        if error is not None:
            return dict.fromkeys(offsets, error)
        group = self._manager.get(group_id)
        if group is None:
            group = self._manager.add(GroupMetadata(group_id, self._clock.now_ms()))
        if group.consumer is not None:
            anonymous = generation_id < 0 and not member_id and group_instance_id is None
            error = (
                None
                if anonymous
                else _validate_consumer_commit(group.consumer, member_id, generation_id)
            )
        else:
            error = _validate_txn_commit(group, member_id, group_instance_id, generation_id)
        if error is not None:
            return dict.fromkeys(offsets, error)
        now = self._clock.now_ms()
        values = {
            tp: OffsetAndMetadata(e.offset, e.leader_epoch, e.metadata or "", now)
            for tp, e in offsets.items()
        }
        return await self._manager.store_txn_offsets(
            group,
            values,
            transactional_id=transactional_id,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            support=support,
        )

    def complete_txn(self, producer_id: int, commit: bool, partition: int) -> None:
        """The broker wrote `producer_id`'s COMMIT (or ABORT) marker to __consumer_offsets-
        `partition`: materialise (or drop) its pending offsets in that partition's groups.

        For a partition not served here this does nothing: loading replays the marker from
        the log. During the partition's load it is applied once the load is done.
        """
        self._manager.complete_txn(producer_id, commit=commit, partition=partition)

    def fetch_offsets(
        self,
        group_id: str,
        partitions: Sequence[TopicPartition] | None,
        *,
        require_stable: bool = False,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> OffsetFetchResult:
        """Committed offsets of the given partitions, or of all (None), in any group state.

        With `require_stable` (OffsetFetch v7+) a partition with an unsettled commit answers
        UNSTABLE_OFFSET_COMMIT; otherwise it answers the last committed offset. A member of
        a consumer-protocol group (OffsetFetch v9) must give its current member epoch.
        """
        error = self._status_error(group_id, allow_empty_id=True)
        group = self._manager.get(group_id)
        as_member = member_id is not None or member_epoch >= 0
        if error is None and group is not None and group.consumer is not None and as_member:
            error = _validate_member_epoch(group.consumer, member_id or "", member_epoch)
        if error is not None:
            return OffsetFetchResult(error)
        wanted = None if partitions is None else list(partitions)
        fetched = self._manager.fetch_offsets(group_id, wanted, require_stable=require_stable)
        return OffsetFetchResult(ErrorCode.none, fetched)

    # -- DeleteGroups and OffsetDelete

    async def delete_groups(self, group_ids: Sequence[str]) -> dict[str, ErrorCode]:
        """Delete Empty groups with their offsets (tombstones); a code per distinct id."""
        return await self._deleter.delete_groups(
            group_ids, lambda g: self._status_error(g, allow_empty_id=True)
        )

    async def delete_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete: remove the group's offsets of topics it does not subscribe to."""
        return await self._deleter.delete_offsets(
            group_id, partitions, lambda g: self._status_error(g, allow_empty_id=False)
        )

    # -- DescribeGroups and ListGroups

    def describe_group(self, group_id: str) -> GroupSummary:
        error = self._status_error(group_id, allow_empty_id=True)
        if error is not None:
            return GroupSummary(group_id, error, "", "", "")
        group = self._manager.get(group_id)
        if group is None or group.consumer is not None:
            # A consumer-protocol group is not a classic one: Kafka describes it as Dead
            # here (ConsumerGroupDescribe describes it).
            return GroupSummary(group_id, ErrorCode.none, _D.value, "", "")
        return group.summary()

    def list_groups(self) -> tuple[ErrorCode, list[GroupOverview]]:
        if self._closed:
            return ErrorCode.coordinator_not_available, []
        # As Kafka: the groups of the partitions served, and LOAD_IN_PROGRESS while any
        # partition loads (its groups are not listed yet).
        loading = bool(self._partitions.loading_partitions)
        error = ErrorCode.coordinator_load_in_progress if loading else ErrorCode.none
        return error, [_overview(g) for g in self._manager.groups.values()]


def _overview(group: GroupMetadata) -> GroupOverview:
    if group.consumer is not None:
        return GroupOverview(
            group.group_id, CONSUMER_PROTOCOL_TYPE, group.consumer.state.value, CONSUMER_GROUP
        )
    return GroupOverview(group.group_id, group.protocol_type or "", group.state.value)


def _validate_consumer_commit(
    group: ConsumerGroup, member_id: str, member_epoch: int, *, member_epochs: bool = True
) -> ErrorCode | None:
    """Kafka's ConsumerGroup.validateOffsetCommit: anyone may commit to an empty group
    without an epoch (tools, simple consumers); else only a member, at its current epoch,
    and a plain commit only with a version that carries member epochs."""
    if member_epoch < 0 and not group.members:
        return None
    member = group.members.get(member_id)
    if member is None:
        return ErrorCode.unknown_member_id
    if member.classic is not None:
        # A classic member commits with its generation, which is its member epoch.
        return None if member.recon.epoch == member_epoch else ErrorCode.illegal_generation
    if not member_epochs:
        return ErrorCode.unsupported_version
    return _validate_member_epoch(group, member_id, member_epoch)


def _validate_member_epoch(group: ConsumerGroup, member_id: str, epoch: int) -> ErrorCode | None:
    member = group.members.get(member_id)
    if member is None:
        return ErrorCode.unknown_member_id
    return None if member.recon.epoch == epoch else ErrorCode.stale_member_epoch


def _validate_txn_commit(
    group: GroupMetadata, member_id: str, instance_id: str | None, generation_id: int
) -> ErrorCode | None:
    """Kafka's checks for TxnOffsetCommit: v0-v2 carry no member, so nothing to check then."""
    if group.is_(_D):
        return ErrorCode.coordinator_not_available
    if generation_id >= 0 or member_id != NO_MEMBER_ID or instance_id is not None:
        error = group.validate_member(member_id, instance_id)
        if error is None and generation_id != group.generation_id:
            error = ErrorCode.illegal_generation
        return error
    return None


def _validate_commit(
    group: GroupMetadata, member_id: str, instance_id: str | None, generation_id: int
) -> ErrorCode | None:
    if group.is_(_D):
        return ErrorCode.coordinator_not_available
    if generation_id < 0 and group.is_(_E):
        return None  # admin tools and simple consumers may commit while nobody is a member
    if generation_id >= 0 or member_id != NO_MEMBER_ID or instance_id is not None:
        error = group.validate_member(member_id, instance_id)
        if error is None and generation_id != group.generation_id:
            error = ErrorCode.illegal_generation
        return error
    if not group.is_(_E):
        return ErrorCode.unknown_member_id  # only members commit while the group is active
    return None
