"""ReplicaManager: this broker's replicas, kept in line with the cluster's metadata.

At every metadata change it walks the partitions assigned to this broker: it makes sure a
local log exists, and makes each replica leader, follower (handing it to the fetcher of its
leader's broker) or offline, as the partition's state in ZooKeeper says. Replicas no longer
assigned here (a deleted topic, a partition reassigned away, even while this broker was
down) are stopped and their files deleted.

Throttled replicas (KIP-73) carry this broker's leader or follower `ReplicationQuota`, as
their topic's `*.replication.throttled.replicas` name them; the rates are dynamic configs.

As leader of a partition it proposes ISR changes itself, by compare-and-set on the state's
znode version (Kafka's ZooKeeper-era leaders did): a follower that has not caught up for
replica.lag.time.max.ms leaves, one that caught up rejoins. The change takes effect when the
watch brings the new state back, so the ISR a leader acts on is always the one in ZooKeeper.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from onceflow.clock import Clock
from onceflow.cluster.link import ClusterLink, MetadataChange
from onceflow.cluster.zk_store import MetadataStoreError, StaleVersion
from onceflow.cluster.znodes import NO_LEADER, PartitionState
from onceflow.protocol.topic_ids import parse_topic_id
from onceflow.replication.fetcher import FetcherSettings, FollowerHost, ReplicaFetcher
from onceflow.replication.partition import LeaderAndIsr, Partition, Role
from onceflow.replication.throttle import UNLIMITED, ReplicationQuota, lists_replica
from onceflow.storage.log_manager import LogManager
from onceflow.storage.partition_log import PartitionLog

log = logging.getLogger(__name__)

#: Told (topic, partition, role, leader epoch) after this broker's role for a partition
#: changed; the broker moves its coordinators with the internal topics' leadership.
RoleListener = Callable[[str, int, Role, int], None]


@dataclass(frozen=True, slots=True)
class ReplicationSettings:
    lag_time_max_ms: int = 30_000
    fetcher: FetcherSettings = field(default_factory=FetcherSettings)
    quota_window_num: int = 11  # replication.quota.window.num
    quota_window_s: float = 1.0  # replication.quota.window.size.seconds


#: The topic keys listing the replicas each throttle applies to.
LEADER_THROTTLED = "leader.replication.throttled.replicas"
FOLLOWER_THROTTLED = "follower.replication.throttled.replicas"


class ReplicaManager:
    def __init__(
        self,
        link: ClusterLink,
        logs: LogManager,
        host: FollowerHost,
        settings: ReplicationSettings,
        clock: Clock,
        internal_topics: frozenset[str],
        min_isr_for: Callable[[str, Mapping[str, str]], int],
    ) -> None:
        self.link = link
        self.logs = logs
        self.host = host
        self.settings = settings
        self.clock = clock
        self.internal_topics = internal_topics
        self.min_isr_for = min_isr_for
        self.local_id = link.registration.broker_id
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self.role_listeners: list[RoleListener] = []
        self._task: asyncio.Task[None] | None = None
        self._started = False
        self._isr_writes: set[asyncio.Task[None]] = set()
        self.isr_shrinks = 0  # ISR changes written by this broker as leader (metrics)
        window = (settings.quota_window_num, settings.quota_window_s)
        self.leader_quota = ReplicationQuota(UNLIMITED, *window)
        self.follower_quota = ReplicationQuota(UNLIMITED, *window)
        self.isr_expands = 0
        link.listeners.append(self._changed)

    def start(self) -> None:
        """Take up every replica as the metadata says now. Changes seen before (while the
        link filled the cache at join) waited for this, so no role change is made before
        the broker listens for them (a coordinator would never load its partition)."""
        self._started = True
        self.reconcile()
        self.refresh_configs()
        self._task = asyncio.get_running_loop().create_task(self._isr_loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for fetcher in self.fetchers.values():
            await fetcher.stop()
        for partition in self.partitions.values():
            partition.close()

    def get(self, topic: str, partition: int) -> Partition | None:
        return self.partitions.get((topic, partition))

    # ---- metadata -> roles -----------------------------------------------------------

    def _changed(self, change: MetadataChange) -> None:
        if not self._started:
            return  # start() reconciles everything
        if change.kind == "partition":
            self._reconcile_one(change.topic, change.partition)  # the common change
        elif change.kind in ("topic", "brokers"):
            self.reconcile()
        if change.kind in ("topic", "configs"):
            self._apply_configs(change.topic)

    def set_throttle_rates(self, leader: int, follower: int) -> None:
        """leader/follower.replication.throttled.rate, dynamic broker configs."""
        self.leader_quota.rate = leader
        self.follower_quota.rate = follower

    def refresh_configs(self) -> None:
        """Every replica's min.insync.replicas again: the broker's defaults changed."""
        for topic in {name for name, _ in self.partitions}:
            self._apply_configs(topic)

    def _apply_configs(self, topic: str) -> None:
        """The topic's overrides from ZooKeeper, applied to the logs and replicas here."""
        meta = self.link.cache.topics.get(topic)
        if meta is None or topic not in self.logs.topics:
            return
        try:
            self.logs.update_topic_configs(topic, meta.configs)
        except Exception as exc:  # refused, or the topics file cannot be written
            log.warning("configs of %s not applied here: %s", topic, exc)
            return
        min_isr = self.min_isr_for(topic, meta.configs)
        for (name, _), partition in self.partitions.items():
            if name == topic:
                partition.min_insync_replicas = min_isr
                self._apply_throttles(partition, meta.configs)

    def _apply_throttles(self, partition: Partition, configs: Mapping[str, str]) -> None:
        """Whether the topic's throttled replica lists name this replica."""
        index = partition.key[1]

        def listed(key: str) -> bool:
            replicas = tuple(i.strip() for i in configs.get(key, "").split(",") if i.strip())
            return lists_replica(replicas, index, self.local_id)

        partition.leader_throttle = self.leader_quota if listed(LEADER_THROTTLED) else None
        partition.follower_throttle = self.follower_quota if listed(FOLLOWER_THROTTLED) else None

    def reconcile(self) -> None:
        cache = self.link.cache
        assigned: set[tuple[str, int]] = set()
        for topic, index, replicas in cache.partitions():
            if self.local_id in replicas:
                assigned.add((topic, index))
                self._reconcile_one(topic, index)
        for key in [k for k in self.partitions if k not in assigned]:
            self._remove(key)
        self._drop_moved_away(assigned)

    def _drop_moved_away(self, assigned: set[tuple[str, int]]) -> None:
        """Delete the replicas this broker still holds of partitions reassigned elsewhere
        while it was down (Kafka's ZooKeeper-era brokers kept such stray logs): the topic,
        by its id, is the one on disk and its assignment no longer names this broker."""
        cache = self.link.cache
        for plog in list(self.logs):
            key = (plog.topic, plog.partition)
            if key in assigned or key in self.partitions:
                continue
            meta = cache.topics.get(plog.topic)
            info = self.logs.topics.get(plog.topic)
            if meta is None or info is None or info.topic_id != meta.topic_id:
                continue
            if self.local_id not in meta.assignment.get(plog.partition, (self.local_id,)):
                log.info("%s-%d: reassigned away while this broker was down; removing it", *key)
                try:
                    self.logs.drop_partition(plog.topic, plog.partition, delete=True)
                except Exception:
                    log.exception("removing %s-%d failed", *key)

    def _reconcile_one(self, topic: str, index: int) -> None:
        cache = self.link.cache
        replicas = cache.replicas_of(topic, index)
        key = (topic, index)
        if self.local_id not in replicas:
            if key in self.partitions:
                self._remove(key)
            return
        current = cache.states.get(key)
        if current is None:
            return  # the controller has not elected a leader yet
        partition = self.partitions.get(key)
        if partition is not None and partition.topic_id != parse_topic_id(
            cache.topics[topic].topic_id
        ):
            # The topic was deleted and made again under its name, and this broker saw the
            # new one without the deletion between: the old replica goes, a new one starts.
            self._remove(key)
            partition = None
        if partition is None:
            partition = self._open(topic, index)
            if partition is None:
                return
        partition.min_insync_replicas = self.min_isr_for(topic, cache.topics[topic].configs)
        self._apply_throttles(partition, cache.topics[topic].configs)
        self._apply(partition, current.state, replicas, current.version)

    def _open(self, topic: str, index: int) -> Partition | None:
        meta = self.link.cache.topics[topic]
        try:
            plog = self.logs.host_partition(
                topic,
                meta.partitions,
                index,
                meta.configs,
                meta.topic_id,
                internal=topic in self.internal_topics,
            )
        except Exception:
            log.exception("cannot host %s-%d", topic, index)
            return None
        partition = Partition(plog, self.local_id, self.clock, parse_topic_id(meta.topic_id))
        self.partitions[(topic, index)] = partition
        return partition

    def _apply(
        self, partition: Partition, state: PartitionState, replicas: tuple[int, ...], version: int
    ) -> None:
        if version < partition.state.version and partition.role is not Role.OFFLINE:
            return  # an older read than what this replica already acts on
        wanted = LeaderAndIsr(state.leader, state.leader_epoch, state.isr, replicas, version)
        old_role, old_epoch = partition.role, partition.leader_epoch
        key = partition.key
        if partition.log.offline is not None:
            self._unfollow(key)
            partition.make_offline(wanted)
        elif state.leader == self.local_id:
            self._unfollow(key)
            if partition.make_leader(wanted):
                log.info(
                    "%s-%d: leader at epoch %d, ISR %s",
                    *key,
                    state.leader_epoch,
                    list(state.isr),
                )
        elif state.leader == NO_LEADER:
            self._unfollow(key)
            partition.make_offline(wanted)
        else:
            restart = partition.make_follower(wanted)
            fetcher = self.fetchers.get(state.leader)
            registration = self.link.cache.brokers.get(state.leader)
            moved = registration is not None and (
                fetcher is None or fetcher.address != (registration.host, registration.port)
            )
            if restart or moved or fetcher is None or key not in fetcher.partitions:
                # New leader or epoch; or the leader was not registered when this replica
                # became its follower, and is now.
                self._follow(partition, state.leader)
        if partition.role is not old_role or partition.leader_epoch != old_epoch:
            for listener in self.role_listeners:
                listener(key[0], key[1], partition.role, partition.leader_epoch)

    def _follow(self, partition: Partition, leader: int) -> None:
        self._unfollow(partition.key)
        registration = self.link.cache.brokers.get(leader)
        if registration is None:
            return  # the leader is not registered (dead): a new state is on its way
        fetcher = self.fetchers.get(leader)
        address = (registration.host, registration.port)
        if fetcher is not None and fetcher.address != address:
            asyncio.get_running_loop().create_task(fetcher.stop())
            fetcher = None
        if fetcher is None:
            fetcher = ReplicaFetcher(
                self.local_id, leader, address, self.settings.fetcher, self.host
            )
            self.fetchers[leader] = fetcher
        fetcher.follow(partition)

    def _unfollow(self, key: tuple[str, int]) -> None:
        for fetcher in self.fetchers.values():
            fetcher.unfollow(key)

    def _remove(self, key: tuple[str, int]) -> None:
        partition = self.partitions.pop(key)
        self._unfollow(key)
        partition.close()
        log.info("%s-%d: no longer assigned here; removing its replica", *key)
        try:
            self.logs.drop_partition(key[0], key[1], delete=True)
        except Exception:
            log.exception("removing %s-%d failed", *key)
        for listener in self.role_listeners:
            listener(key[0], key[1], Role.OFFLINE, -1)

    # ---- leaders: followers' progress and the ISR ------------------------------------

    def follower_fetched(
        self,
        partition: Partition,
        replica: int,
        fetch_offset: int,
        log_start_offset: int | None = None,
    ) -> bool:
        """A follower's fetch reached the leader: move the high watermark, let a follower
        that caught up rejoin the ISR at once, and complete DeleteRecords its log start
        offset satisfies."""
        moved = partition.follower_fetched(replica, fetch_offset, log_start_offset)
        if replica not in partition.isr:
            self._propose_isr(partition)
        if partition.awaits_low_watermark:  # rare: a DeleteRecords in progress
            partition.check_low_watermark(self.alive_brokers())
        return moved

    def alive_brokers(self) -> frozenset[int]:
        """The registered brokers: a replica elsewhere does not hold back the low watermark
        (Kafka's hasAliveBroker)."""
        return frozenset(self.link.cache.brokers)

    async def _isr_loop(self) -> None:
        interval = max(self.settings.lag_time_max_ms / 2, 100) / 1000
        while True:
            await asyncio.sleep(interval)
            for partition in list(self.partitions.values()):
                self._propose_isr(partition)

    def _propose_isr(self, partition: Partition) -> None:
        cache = self.link.cache
        ineligible = cache.shutting_down | (set(partition.state.replicas) - set(cache.brokers))
        proposal = partition.isr_proposal(self.settings.lag_time_max_ms, ineligible)
        if proposal is None:
            return
        partition.isr_proposed(proposal)
        current = partition.state
        state = PartitionState(
            current.leader, current.leader_epoch, proposal, self._controller_epoch(partition)
        )
        task = asyncio.get_running_loop().create_task(
            self._write_isr(partition, state, current.version)
        )
        self._isr_writes.add(task)
        task.add_done_callback(self._isr_writes.discard)

    def _controller_epoch(self, partition: Partition) -> int:
        current = self.link.cache.states.get(partition.key)
        return current.state.controller_epoch if current is not None else 0

    async def _write_isr(self, partition: Partition, state: PartitionState, version: int) -> None:
        topic, index = partition.key
        shrink = len(state.isr) < len(partition.isr)
        log.info(
            "%s-%d: %s ISR from %s to %s",
            topic,
            index,
            "shrinking" if shrink else "expanding",
            list(partition.isr),
            list(state.isr),
        )
        try:
            await asyncio.to_thread(self.link.store.update_isr, topic, index, state, version)
            if shrink:
                self.isr_shrinks += 1
            else:
                self.isr_expands += 1
        except StaleVersion as exc:
            log.info("%s-%d: ISR change lost to a newer state: %s", topic, index, exc)
            partition.isr_proposed(None)
        except (MetadataStoreError, Exception) as exc:  # ZooKeeper away: try again later
            log.warning("%s-%d: cannot write the ISR change: %r", topic, index, exc)
            partition.isr_proposed(None)

    def leader_logs(self) -> list[PartitionLog]:
        return [p.log for p in self.partitions.values() if p.role is Role.LEADER]
