"""The share-group coordinator: membership, share sessions and the share-partitions this
broker leads (Kafka's GroupCoordinator for share groups plus its SharePartitionManager).

Each share-partition is held in memory by the leader of its topic partition and
initialized from `__share_group_state` (or `share.auto.offset.reset`) the first time it is
fetched. Every change an acknowledgement, a release or an expired lock makes is written to
`__share_group_state` before it is answered, so a broker killed at any point loses no
acknowledgement and delivers nothing acknowledged again; what was only acquired comes back
as available, with its delivery count.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from onceflow.clock import Clock
from onceflow.config import BrokerConfig
from onceflow.coordinator.share import durable_membership as durable
from onceflow.coordinator.share import group as membership
from onceflow.coordinator.share.durable_membership import DurableMembership
from onceflow.coordinator.share.group import (
    Heartbeat,
    HeartbeatAnswer,
    MembershipLimits,
    ShareGroup,
)
from onceflow.coordinator.share.group_configs import GroupConfigs
from onceflow.coordinator.share.partition import (
    AcquiredRange,
    FetchedBatch,
    ShareLimits,
    SharePartition,
    StateBatch,
)
from onceflow.coordinator.share.persister import LocalPersister, SnapshotPersister
from onceflow.coordinator.share.records import ShareKey, ShareSnapshot
from onceflow.coordinator.share.sessions import ShareSessions
from onceflow.coordinator.share.state import AcknowledgeType, RecordState
from onceflow.coordinator.share.store import ShareStateStore
from onceflow.coordinator.share.txn_acks import (
    PENDING_CHECK_MS,
    RECOVERED_MEMBER,
    UNKNOWN_PRODUCER,
    AckBatch,
    HeldPartition,
    TransactionalAcknowledgements,
)
from onceflow.errors import ErrorCode, KafkaError

__all__ = ["AckBatch", "HeldPartition", "ShareCoordinator", "ShareCoordinatorConfig"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ShareCoordinatorConfig:
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 200
    lock_duration_ms: int = 30_000
    delivery_count_limit: int = 5
    max_record_locks: int = 2000

    @classmethod
    def from_broker_config(cls, cfg: BrokerConfig) -> ShareCoordinatorConfig:
        return cls(
            session_timeout_ms=cfg.group_share_session_timeout_ms,
            heartbeat_interval_ms=cfg.group_share_heartbeat_interval_ms,
            max_size=cfg.group_share_max_size,
            lock_duration_ms=cfg.group_share_record_lock_duration_ms,
            delivery_count_limit=cfg.group_share_delivery_count_limit,
            max_record_locks=cfg.group_share_partition_max_record_locks,
        )


@dataclass(slots=True)
class ShareCounters:
    """Plain integers the metrics read at scrape time."""

    acquired: int = 0
    redelivered: int = 0
    acknowledged: dict[str, int] = field(
        default_factory=lambda: {"accept": 0, "release": 0, "reject": 0}
    )
    lock_expired: int = 0


CONFIGS_REFRESH_MS = 5_000  # how long a group's configs read from another broker are used


class ShareCoordinator(TransactionalAcknowledgements):
    def __init__(
        self,
        clock: Clock,
        config: ShareCoordinatorConfig,
        store: ShareStateStore,
        partitions_of: Callable[[str], int | None],
        broker_config: BrokerConfig,
    ) -> None:
        self._clock = clock
        self.config = config
        self.store = store
        #: Snapshots go here; the broker replaces it with one that reaches other brokers.
        self.persister: SnapshotPersister = LocalPersister(store)
        self._partitions_of = partitions_of
        self.group_configs = GroupConfigs(broker_config, store.group_configs)
        self.groups: dict[str, ShareGroup] = {}
        self.held: dict[ShareKey, HeldPartition] = {}
        self.sessions = ShareSessions()
        self.counters = ShareCounters()
        self._configs_fresh_until: dict[str, int] = {}
        #: Where membership is kept (`__consumer_offsets`); set by the broker.
        self.membership: DurableMembership | None = None
        #: Called with (topic, partition) when records there become available again.
        self.on_available: Callable[[str, int], None] = lambda topic, partition: None

    # -- membership

    def heartbeat(self, hb: Heartbeat) -> tuple[HeartbeatAnswer, int, Awaitable[int] | None]:
        """The answer, the heartbeat interval to tell, and the membership write to await
        before answering (None: nothing changed)."""
        settings = self.group_configs.of(hb.group_id)
        limits = MembershipLimits(settings.session_timeout_ms, self.config.max_size)
        group = self.groups.get(hb.group_id)
        before = durable.view(group)
        if group is None:
            if hb.member_epoch != membership.JOIN_EPOCH:
                return HeartbeatAnswer(ErrorCode.unknown_member_id, "unknown member"), 0, None
            group = self.groups[hb.group_id] = ShareGroup(hb.group_id)
        answer = membership.heartbeat(
            group, hb, self._clock.monotonic_ms(), limits, self._partitions_of
        )
        if answer.left:
            self._member_gone(hb.group_id, hb.member_id)
        return answer, settings.heartbeat_interval_ms, self._record(hb.group_id, before)

    def _record(
        self, group_id: str, before: tuple[int, dict[str, durable.MemberView]]
    ) -> Awaitable[int] | None:
        if self.membership is None:
            return None
        return self.membership.changes(
            group_id, before, self.groups.get(group_id), self._clock.now_ms()
        )

    def load_groups(self, partition: int) -> None:
        """This broker now leads `__consumer_offsets-<partition>`: its share groups, as
        their records left them, each member given a session to come back in."""
        if self.membership is None:
            return
        self.unload_groups(partition)
        now = self._clock.monotonic_ms()
        try:
            loaded = self.membership.load(partition, now)
        except (KafkaError, OSError) as exc:  # the group coordinator's load reports it too
            log.warning("share groups of __consumer_offsets-%d not loaded: %s", partition, exc)
            return
        for group_id, group in loaded.items():
            timeout = self.group_configs.of(group_id).session_timeout_ms
            for member in group.members.values():
                member.deadline_ms = now + timeout
            self.groups[group_id] = group
            log.info(
                "share group %s loaded: epoch %d, %d members",
                group_id,
                group.epoch,
                len(group.members),
            )

    def unload_groups(self, partition: int) -> None:
        """Another broker coordinates the groups of that partition now."""
        if self.membership is None:
            return
        for group_id in [g for g in self.groups if self.membership.partition_for(g) == partition]:
            for member_id in self.groups.pop(group_id).members:
                self.sessions.close_member(group_id, member_id)

    def _member_gone(self, group_id: str, member_id: str) -> None:
        self.sessions.close_member(group_id, member_id)
        for key, held in self.held.items():
            if key.group_id == group_id and held.partition.release_member(member_id):
                self._changed(key, held)

    def group(self, group_id: str) -> ShareGroup | None:
        return self.groups.get(group_id)

    def is_share_group(self, group_id: str) -> bool:
        return group_id in self.groups or bool(self.store_keys(group_id))

    def store_keys(self, group_id: str) -> list[ShareKey]:
        return self.store.share_keys(group_id)

    def group_ids(self) -> set[str]:
        return set(self.groups) | {k.group_id for k in self.store.share_keys()}

    async def delete_group(self, group_id: str) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is not None and group.members:
            return ErrorCode.non_empty_group
        if group is None and not self.store_keys(group_id):
            return ErrorCode.group_id_not_found
        before = durable.view(self.groups.pop(group_id, None))
        written = self._record(group_id, before)
        if written is not None:
            await written
        for key in [k for k in self.held if k.group_id == group_id]:
            del self.held[key]
        await self.delete_states(self.store_keys(group_id))
        if self.group_configs.overrides(group_id):
            await self.set_group_configs(group_id, {})
        return ErrorCode.none

    async def refresh_group_configs(self, group_id: str) -> None:
        """Read a group's configs where its partition is led, if not here (at most every
        few seconds: a fetch, a heartbeat and a describe of the group all ask)."""
        now = self._clock.monotonic_ms()
        if now < self._configs_fresh_until.get(group_id, 0):
            return
        try:
            remote = await self.persister.group_configs(group_id)
        except KafkaError:
            return  # the last known ones (or the defaults) until it answers
        self._configs_fresh_until[group_id] = now + CONFIGS_REFRESH_MS
        if remote is None:
            self.group_configs.remote.pop(group_id, None)
        else:
            self.group_configs.remote[group_id] = remote

    def forget_group_configs(self, group_id: str) -> None:
        """The group's configs changed elsewhere: read them again at the next use."""
        self._configs_fresh_until.pop(group_id, None)

    async def set_group_configs(self, group_id: str, configs: dict[str, str]) -> None:
        """Replace a group's config overrides (validated by the caller), durably."""
        await self.store.write_group_configs(group_id, configs, self._clock.now_ms())

    async def delete_states(self, keys: Sequence[ShareKey]) -> None:
        now = self._clock.now_ms()
        writes = [self.persister.delete(key, now) for key in keys]
        for key in keys:
            self.held.pop(key, None)
        for written in writes:
            await written

    # -- share-partitions

    async def held_partition(
        self,
        key: ShareKey,
        topic: str,
        log_start: int,
        log_end: int,
        offset_for_time: Callable[[int], int | None] = lambda ts: None,
    ) -> HeldPartition:
        """The share-partition, initialized on first use: from its durable state, else at
        the group's share.auto.offset.reset (written at once, as Kafka's Initialize, so
        "latest" means the end when the group first read, not at every restart).
        by_duration:<d> starts at the first record of the last <d> (`offset_for_time`, a
        ListOffsets by timestamp), the end when there is none."""
        held = self.held.get(key)
        if held is None:
            settings = self.group_configs.of(key.group_id)
            limits = ShareLimits(
                settings.lock_duration_ms,
                settings.delivery_count_limit,
                self.config.max_record_locks,
            )
            snapshot = await self.persister.read(key)
            held = self.held.get(key)  # another fetch initialized it meanwhile
            if held is not None:
                return held
            sp = SharePartition(log_start, limits)
            if snapshot is not None:
                held_by_txn = [b for b in snapshot.batches if b.state is RecordState.ACQUIRED]
                sp.restore(snapshot.start_offset, _as_available(snapshot.batches))
                held = HeldPartition(topic, sp, snapshot.state_epoch)
                for b in held_by_txn:  # held until their transaction ends
                    sp.mark_pending(
                        b.first, b.last, UNKNOWN_PRODUCER, RecordState.AVAILABLE, RECOVERED_MEMBER
                    )
                for producer_id, ranges in self.store.pending_for(key):
                    for first, last, target in ranges:  # held until the transaction ends
                        sp.mark_pending(first, last, producer_id, target, RECOVERED_MEMBER)
            else:
                start = log_start if settings.auto_offset_reset == "earliest" else log_end
                duration = settings.reset_duration_ms
                if duration is not None:
                    found = offset_for_time(self._clock.now_ms() - duration)
                    start = log_end if found is None else max(found, log_start)
                sp.restore(start, ())
                held = HeldPartition(topic, sp)
                _background(self._persist(key, held))
            self.held[key] = held
        if held.partition.start_offset < log_start:  # retention or DeleteRecords passed it
            held.partition.reset_start(log_start)
            _background(self._persist(key, held))
        return held

    def acquire(
        self,
        key: ShareKey,
        held: HeldPartition,
        member: str,
        batches: Sequence[FetchedBatch],
        max_records: int,
        mode: int,
    ) -> list[AcquiredRange]:
        before = held.partition.redelivered_total
        got = held.partition.acquire(member, batches, max_records, self._clock.monotonic_ms(), mode)
        self.counters.acquired += sum(r.last - r.first + 1 for r in got)
        self.counters.redelivered += held.partition.redelivered_total - before
        if any(b.skip for b in batches):
            _background(self._persist(key, held))  # archived aborted and control records
        return got

    def acknowledge(
        self, key: ShareKey, member: str, batches: Sequence[AckBatch]
    ) -> tuple[ErrorCode, Awaitable[int] | None]:
        """Apply a partition's acknowledgement batches; the first error stops them. The
        write to await before answering is returned (None: nothing changed)."""
        held = self.held.get(key)
        if held is None:
            return ErrorCode.invalid_record_state, None
        now = self._clock.monotonic_ms()
        error = ErrorCode.none
        changed = False
        for first, last, types in batches:
            error = held.partition.acknowledge(member, first, last, types, now)
            if error is not ErrorCode.none:
                break
            changed = True
            self._count_acks(first, last, types)
        if any(t == AcknowledgeType.RELEASE for _, _, ts in batches for t in ts):
            self.on_available(held.topic, key.partition)
        return error, (self._persist(key, held) if changed else None)

    def _count_acks(self, first: int, last: int, types: Sequence[int]) -> None:
        names = {1: "accept", 2: "release", 3: "reject"}
        if len(types) == 1:
            name = names.get(types[0])
            if name is not None:
                self.counters.acknowledged[name] += last - first + 1
            return
        for t in types:
            name = names.get(t)
            if name is not None:
                self.counters.acknowledged[name] += 1

    def _persist(self, key: ShareKey, held: HeldPartition) -> Awaitable[int]:
        snapshot = ShareSnapshot(
            held.state_epoch, held.partition.start_offset, tuple(held.partition.state_batches())
        )
        return self.persister.write(key, snapshot, self._clock.now_ms())

    def _changed(self, key: ShareKey, held: HeldPartition) -> None:
        """A change nobody waits for (a lock ran out, a member left): written, and the
        partition's parked fetches woken."""
        try:
            written = self._persist(key, held)
        except KafkaError as exc:
            log.warning("share state of %s not written: %s", key, exc)
        else:
            _background(written)
        self.on_available(held.topic, key.partition)

    async def reset_start(self, key: ShareKey, offset: int) -> None:
        """AlterShareGroupOffsets: a new start offset, everything in flight forgotten."""
        held = self.held.get(key)
        if held is not None:
            held.partition.reset_start(offset)
            held.state_epoch += 1
            await self._persist(key, held)
            return
        snapshot = await self.persister.read(key)
        epoch = 0 if snapshot is None else snapshot.state_epoch + 1
        await self.persister.write(key, ShareSnapshot(epoch, offset, ()), self._clock.now_ms())

    # -- time

    async def poll(self) -> None:
        """Expire members whose session ran out and acquisition locks that ran out."""
        now = self._clock.monotonic_ms()
        for group in self.groups.values():
            before = durable.view(group)
            for member_id in membership.expire(group, now):
                log.info("share group %s: member %s expired", group.group_id, member_id)
                self._member_gone(group.group_id, member_id)
            written = self._record(group.group_id, before)
            if written is not None:
                _background(written)
        for key, held in self.held.items():
            if held.next_pending_check_ms <= now and held.partition.pending_producers():
                held.next_pending_check_ms = now + PENDING_CHECK_MS
                _background(self.check_pending(key, held))
            deadline = held.partition.next_deadline()
            if deadline is not None and deadline <= now:
                released = held.partition.expire_locks(now)
                if released:
                    self.counters.lock_expired += released
                    self._changed(key, held)


def _as_available(batches: Sequence[StateBatch]) -> list[StateBatch]:
    return [
        b._replace(state=RecordState.AVAILABLE) if b.state is RecordState.ACQUIRED else b
        for b in batches
    ]


def _background(written: Awaitable[Any]) -> None:
    """A write nobody waits for: a failure is logged (the next write carries the state)."""
    asyncio.ensure_future(written).add_done_callback(_log_failure)


def _log_failure(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("share state write failed: %s", task.exception())
