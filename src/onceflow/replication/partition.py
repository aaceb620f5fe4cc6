"""Partition: one local replica of a replicated partition, leader or follower (Kafka's
`Partition`).

As leader it tracks how far each follower has copied the log (a follower's fetch offset is
its log end, and in durable mode a follower fsyncs before it fetches again, so the offset
is on its disk) and moves the high watermark to the lowest such offset over the ISR,
including its own flushed offset: a record below the high watermark is on the disk of every
in-sync replica. acks=all producers wait here until the high watermark passes their
records. Followers that fall behind for replica.lag.time.max.ms leave the ISR; those that
catch up rejoin it. The ISR itself is changed only through ZooKeeper (the caller writes the
proposal and applies what the watch brings back).

A follower's fetch also carries its log start offset; the lowest over the replicas on live
brokers, this one's included, is the low watermark a DeleteRecords waits for (Kafka's
lowWatermarkIfLeader and DelayedDeleteRecords).
"""

from __future__ import annotations

import asyncio
import enum
import uuid
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from onceflow.clock import Clock
from onceflow.errors import ErrorCode, KafkaError, fail_future
from onceflow.replication.throttle import ReplicationQuota
from onceflow.storage.partition_log import PartitionLog


class Role(enum.Enum):
    LEADER = "leader"
    FOLLOWER = "follower"
    OFFLINE = "offline"  # no leader anywhere, or this replica is not assigned


@dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    version: int  # the znode version this state was read at


@dataclass(slots=True)
class ReplicaProgress:
    log_end_offset: int = -1  # unknown until the follower's first fetch
    last_caught_up_ms: int = 0
    log_start_offset: int = -1  # unknown until a fetch reports it


class Partition:
    def __init__(
        self, log: PartitionLog, local_id: int, clock: Clock, topic_id: uuid.UUID | None = None
    ) -> None:
        self.log = log
        #: The topic's id (KIP-516): a follower fetches by it, so it never copies a
        #: recreated topic of the same name into this replica.
        self.topic_id = topic_id
        self.local_id = local_id
        self.clock = clock
        self.role = Role.OFFLINE
        self.state = LeaderAndIsr(-1, -1, (), (), -1)
        self.progress: dict[int, ReplicaProgress] = {}
        # An ISR this leader proposed and has not seen applied yet (Kafka's pending
        # AlterPartition): the high watermark counts its members too, see
        # maybe_advance_high_watermark.
        self.proposed_isr: tuple[int, ...] | None = None
        self.min_insync_replicas = 1  # the topic's min.insync.replicas, set by the owner
        # The replication throttles this replica counts against when its topic lists it
        # (set by the owner): as leader, its sends to followers outside the ISR; as a
        # follower outside the ISR, its copying. None: not throttled.
        self.leader_throttle: ReplicationQuota | None = None
        self.follower_throttle: ReplicationQuota | None = None
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        # DeleteRecords waiting for the low watermark to reach an offset.
        self._start_waiters: list[tuple[int, asyncio.Future[int]]] = []
        # Nothing is known to be replicated until the ISR says so: as leader the followers'
        # fetches move it, as follower the leader's answers do. Starting from the log end
        # would show consumers a tail that a new leader may truncate.
        log.hw_follows_local = False
        log.set_high_watermark(log.log_start_offset)

    @property
    def key(self) -> tuple[str, int]:
        return self.log.topic, self.log.partition

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    @property
    def isr_change_pending(self) -> bool:
        return self.proposed_isr is not None

    def isr_proposed(self, isr: tuple[int, ...] | None) -> None:
        """An ISR change was sent to the controller's store (None: it failed, or lost to a
        newer state): until the new state comes back, the high watermark waits for the
        members of both."""
        self.proposed_isr = isr
        self.maybe_advance_high_watermark()

    @property
    def leading(self) -> bool:
        """Whether this replica leads and its log is online: what a read from it needs."""
        return self.role is Role.LEADER and self.log.offline is None

    @property
    def isr(self) -> tuple[int, ...]:
        return self.state.isr

    # ---- role changes ----------------------------------------------------------------

    def make_leader(self, state: LeaderAndIsr) -> bool:
        """Lead from this state on; True when this is a new leadership (a new epoch)."""
        new_term = self.role is not Role.LEADER or state.leader_epoch != self.state.leader_epoch
        now = self.clock.now_ms()
        if new_term:
            # A new epoch starts at the log end: followers truncate anything of theirs
            # beyond it (KIP-101), and every follower gets a full lag period to catch up.
            self.log.leader_epoch = state.leader_epoch
            self.log.epochs.assign(state.leader_epoch, self.log.log_end_offset)
            self.progress = {
                r: ReplicaProgress(-1, now) for r in state.replicas if r != self.local_id
            }
        else:
            for r in state.replicas:
                if r != self.local_id:
                    self.progress.setdefault(r, ReplicaProgress(-1, now))
        if new_term or state.version > self.state.version:
            self.proposed_isr = None  # a newer state: the proposal's or a later one
        self.role = Role.LEADER
        self.state = state
        self.maybe_advance_high_watermark()
        self._check_waiters()
        return new_term

    def make_follower(self, state: LeaderAndIsr) -> bool:
        """Follow state.leader; True when the fetcher must start over (new leader or epoch)."""
        changed = (
            self.role is not Role.FOLLOWER
            or state.leader != self.state.leader
            or state.leader_epoch != self.state.leader_epoch
        )
        self.role = Role.FOLLOWER
        self.state = state
        self.progress = {}
        self.proposed_isr = None
        self.log.leader_epoch = state.leader_epoch
        self._fail_waiters(ErrorCode.not_leader_or_follower)
        return changed

    def make_offline(self, state: LeaderAndIsr) -> None:
        self.role = Role.OFFLINE
        self.state = state
        self.progress = {}
        self._fail_waiters(ErrorCode.not_leader_or_follower)

    # ---- the leader's view of its followers ------------------------------------------

    def local_end(self) -> int:
        """What this replica holds for sure: flushed in durable mode, else the log end."""
        return self.log.flushed_offset if self.log.config.durable else self.log.log_end_offset

    def follower_fetched(
        self, replica: int, fetch_offset: int, log_start_offset: int | None = None
    ) -> bool:
        """A follower asked for fetch_offset, so it holds everything below (and its log
        starts at log_start_offset, when the fetch says); True when the high watermark
        moved."""
        progress = self.progress.get(replica)
        if progress is None:
            return False
        progress.log_end_offset = fetch_offset
        if log_start_offset is not None and log_start_offset != progress.log_start_offset:
            progress.log_start_offset = log_start_offset
        if fetch_offset >= self.log.log_end_offset:
            progress.last_caught_up_ms = self.clock.now_ms()
        return self.maybe_advance_high_watermark()

    def still_caught_up(self, replica: int, now_ms: int) -> bool:
        """A follower's fetch that reads nothing of this partition (its fetch session names
        the offset it sent before): True, noted as caught up at now_ms, when it is in the ISR at
        the log end, which is all a read would have recorded; False when a read must say
        more (behind, outside the ISR, or a DeleteRecords waiting for its log start)."""
        progress = self.progress.get(replica)
        if (
            progress is None
            or progress.log_end_offset < self.log.log_end_offset
            or replica not in self.state.isr
            or self.awaits_low_watermark
        ):
            return False
        progress.last_caught_up_ms = now_ms
        return True

    def maybe_advance_high_watermark(self) -> bool:
        if self.role is not Role.LEADER:
            return False
        candidate = self.local_end()
        # Kafka's maximal ISR (KIP-497): a follower whose return is proposed may be in the
        # controller's ISR already, and so be elected; everything acknowledged must be on
        # it too, whatever this leader's ISR still says.
        members = self.state.isr
        if self.proposed_isr is not None:
            members = (*members, *(r for r in self.proposed_isr if r not in members))
        for replica in members:
            if replica == self.local_id:
                continue
            progress = self.progress.get(replica)
            candidate = min(candidate, progress.log_end_offset if progress else -1)
        if candidate <= self.log.high_watermark:
            return False
        self.log.update_high_watermark(candidate)
        self._check_waiters()
        return True

    def isr_proposal(
        self, lag_ms: int, ineligible: AbstractSet[int] = frozenset()
    ) -> tuple[int, ...] | None:
        """The ISR this leader should have now, or None if it is right: followers behind for
        lag_ms leave, followers at the high watermark rejoin (Kafka's shrink and expand).
        An ineligible follower (in controlled shutdown, or unregistered) never rejoins, as
        KIP-841 has it: the controller would only take it out again, bumping the epoch."""
        if self.role is not Role.LEADER or self.isr_change_pending:
            return None
        now = self.clock.now_ms()
        hw = self.log.high_watermark
        wanted = [self.local_id]
        for replica in self.state.replicas:
            if replica == self.local_id:
                continue
            progress = self.progress.get(replica)
            if progress is None:
                continue
            if replica in self.state.isr:
                lagging = (
                    now - progress.last_caught_up_ms > lag_ms
                    and progress.log_end_offset < self.log.log_end_offset
                )
                if not lagging:
                    wanted.append(replica)
            elif replica in ineligible:
                continue
            elif progress.log_end_offset >= max(hw, self.log.epochs.start_of_latest()):
                wanted.append(replica)
        proposal = tuple(r for r in self.state.replicas if r in wanted)
        if set(proposal) == set(self.state.isr):
            return None
        return proposal

    # ---- DeleteRecords: the low watermark ---------------------------------------------

    def low_watermark(self, alive: AbstractSet[int]) -> int:
        """The lowest log start offset over this leader and its followers on `alive`
        brokers (-1 while one of them has not reported it yet)."""
        low = self.log.log_start_offset
        for replica in self.state.replicas:
            if replica == self.local_id or replica not in alive:
                continue
            progress = self.progress.get(replica)
            low = min(low, progress.log_start_offset if progress is not None else -1)
        return low

    def wait_low_watermark(self, offset: int, alive: AbstractSet[int]) -> asyncio.Future[int]:
        """Done with the low watermark once it reaches `offset`; fails with Kafka's error
        if this replica stops leading first. Cancel it to stop waiting."""
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._start_waiters = [(o, f) for o, f in self._start_waiters if not f.done()]
        self._start_waiters.append((offset, fut))
        self.check_low_watermark(alive)
        return fut

    @property
    def awaits_low_watermark(self) -> bool:
        return bool(self._start_waiters)

    def check_low_watermark(self, alive: AbstractSet[int]) -> None:
        """Complete the DeleteRecords waits the low watermark now satisfies (after a
        follower's fetch, or a change of the leader's own log start)."""
        if not self._start_waiters or self.role is not Role.LEADER:
            return
        low = self.low_watermark(alive)
        keep = []
        for offset, fut in self._start_waiters:
            if fut.done():
                continue
            if low >= offset:
                fut.set_result(low)
            else:
                keep.append((offset, fut))
        self._start_waiters = keep

    # ---- acks=all --------------------------------------------------------------------

    def check_enough_replicas(self, min_isr: int) -> None:
        if len(self.state.isr) < min_isr:
            raise KafkaError(
                ErrorCode.not_enough_replicas,
                f"{self.log.name} has {len(self.state.isr)} in-sync replicas, "
                f"min.insync.replicas is {min_isr}",
            )

    def wait_replicated(self, last_offset: int) -> asyncio.Future[None]:
        """Done once the high watermark is past last_offset; fails with Kafka's error if
        this replica stops leading first."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.log.high_watermark > last_offset:
            fut.set_result(None)
        else:
            if len(self._waiters) > 64:  # drop those whose requests timed out
                self._waiters = [(o, f) for o, f in self._waiters if not f.done()]
            self._waiters.append((last_offset, fut))
        return fut

    def _check_waiters(self) -> None:
        hw = self.log.high_watermark
        keep = []
        for offset, fut in self._waiters:
            if fut.done():
                continue
            if hw > offset:
                fut.set_result(None)
            else:
                keep.append((offset, fut))
        self._waiters = keep

    def _fail_waiters(self, code: ErrorCode) -> None:
        waiters, self._waiters = self._waiters, []
        starts, self._start_waiters = self._start_waiters, []
        for fut in [f for _, f in waiters] + [f for _, f in starts]:
            if not fut.done():
                # Its request may have timed out and gone, or the loop stopped (shutdown).
                fail_future(fut, KafkaError(code, f"{self.log.name} is no longer led here"))

    def close(self) -> None:
        """No longer a replica here (unassigned, or the broker stops)."""
        self.role = Role.OFFLINE
        self._fail_waiters(ErrorCode.not_leader_or_follower)
