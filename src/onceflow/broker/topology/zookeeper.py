"""A broker as one of a ZooKeeper-era cluster: its ZooKeeper link, controller, replica
manager and peers, and the cluster's answers to what the broker asks (who leads, which
brokers exist, what an acknowledgement waits for).

Built from the broker's collaborators; the ZooKeeper session and everything bound to the
event loop are made at `join`.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping

from onceflow.broker.dynamic_config import DynamicBrokerConfig, ZkDynamicConfigStore
from onceflow.broker.inter_broker import InterBroker
from onceflow.broker.quota_store import ZkQuotaStore
from onceflow.broker.quotas import ClientQuotas
from onceflow.broker.security import SecurityState
from onceflow.broker.topics import (
    INTERNAL_TOPICS,
    TXN_TOPIC,
    CreatedTopic,
    partition_count_message,
)
from onceflow.broker.topology.base import (
    ElectionResult,
    PartitionView,
    ReplicationSummary,
    RoleListener,
    TopicInfo,
)
from onceflow.clock import Clock
from onceflow.cluster.assignment import assign_replicas
from onceflow.cluster.controller import Controller, ControllerSettings
from onceflow.cluster.elections import ElectionType, plan_requested_election
from onceflow.cluster.link import ClusterLink
from onceflow.cluster.metadata import MetadataCache, TopicMetadata
from onceflow.cluster.reassignment import ongoing
from onceflow.cluster.reassignment_requests import alter_reassignments
from onceflow.cluster.replica_manager import ReplicaManager, ReplicationSettings
from onceflow.cluster.security_store import ZkSecurityStore
from onceflow.cluster.zk_store import (
    MetadataStoreError,
    NoSuchTopic,
    TopicExists,
    ZkMetadataStore,
)
from onceflow.cluster.znodes import NO_LEADER, BrokerRegistration, ElectionRequest
from onceflow.config import BrokerConfig, ConfigError
from onceflow.coordinator.transaction.producer_ids import ProducerIdManager
from onceflow.errors import ErrorCode, KafkaError, fail_future
from onceflow.replication.fetcher import FetcherSettings, FollowerHost
from onceflow.replication.partition import Partition, Role
from onceflow.security.client_config import ClientSecurity
from onceflow.storage.fs import FileSystem
from onceflow.storage.log_manager import LogManager
from onceflow.storage.meta_properties import read_cluster_id, write_meta_properties
from onceflow.storage.partition_log import PartitionLog

log = logging.getLogger(__name__)
_TIMED_OUT = ErrorCode.request_timed_out

#: How long CreateTopics waits for the controller to elect the new partitions' leaders.
CREATE_WAIT_S = 10.0
#: The internal topics, whose replication factor is capped and min ISR set on creation.
CLUSTER_INTERNAL_TOPICS = INTERNAL_TOPICS


class ClusterStartupError(Exception):
    """ZooKeeper cannot be reached, or another broker has this broker.id."""


class ZkTopology:
    link: ClusterLink
    replicas: ReplicaManager
    controller: Controller
    peers: InterBroker

    def __init__(
        self,
        node_id: int,
        config: Callable[[], BrokerConfig],
        clock: Clock,
        fs: FileSystem,
        log_dir: str,
        logs: LogManager,
        *,
        host: FollowerHost,
        producer_ids: ProducerIdManager,
        security: SecurityState,
        dynamic_config: DynamicBrokerConfig,
        client_quotas: ClientQuotas,
        inter_broker_security: ClientSecurity | None,
        validate_configs: Callable[[Mapping[str, str]], object],
    ) -> None:
        self.node_id = node_id
        self._config = config
        self._clock = clock
        self._fs = fs
        self._log_dir = log_dir
        self._logs = logs
        self._host = host
        self._producer_ids = producer_ids
        self._security = security
        self._dynamic_config = dynamic_config
        self._client_quotas = client_quotas
        self._inter_broker_security = inter_broker_security
        self._validate_configs = validate_configs
        self.internal_topics = CLUSTER_INTERNAL_TOPICS
        self._creating: set[str] = set()  # internal topics being created
        self._spawned: set[asyncio.Task[None]] = set()

    def _build(self) -> None:
        """Everything bound to the running loop and the ZooKeeper session."""
        config = self._config()
        store = ZkMetadataStore(config.zookeeper_connect, config.zookeeper_session_timeout_ms)
        inter = config.advertised_listener_for(config.inter_broker_listener().name)
        registration = BrokerRegistration(
            self.node_id,
            inter.host,
            inter.port,
            self._clock.now_ms(),
            tuple(
                (ad.name, config.security_protocol(ad.name), ad.host, ad.port)
                for ad in config.effective_advertised_listeners()
            ),
            config.broker_rack or None,
        )
        self.link = ClusterLink(store, registration, asyncio.get_running_loop())
        self.replicas = ReplicaManager(
            self.link,
            self._logs,
            self._host,
            ReplicationSettings(
                lag_time_max_ms=config.replica_lag_time_max_ms,
                fetcher=FetcherSettings(
                    max_wait_ms=config.replica_fetch_wait_max_ms,
                    max_bytes=config.replica_fetch_response_max_bytes,
                    partition_max_bytes=config.replica_fetch_max_bytes,
                    backoff_ms=config.replica_fetch_backoff_ms,
                    socket_timeout_ms=config.replica_socket_timeout_ms,
                    security=self._inter_broker_security,
                ),
                quota_window_num=config.replication_quota_window_num,
                quota_window_s=config.replication_quota_window_size_seconds,
            ),
            self._clock,
            self.internal_topics,
            self._min_isr,
        )
        self._set_throttle_rates()
        self.controller = Controller(
            self.link,
            self.node_id,
            ControllerSettings(
                unclean_leader_election=config.unclean_leader_election_enable,
                auto_leader_rebalance=config.auto_leader_rebalance_enable,
                imbalance_check_interval_s=config.leader_imbalance_check_interval_seconds,
                imbalance_percent=config.leader_imbalance_per_broker_percentage,
            ),
            self._clock,
        )
        self.peers = InterBroker(self.node_id, self.link.cache, self._inter_broker_security)

    def _min_isr(self, topic: str, configs: Mapping[str, str]) -> int:
        config = self._config()  # with the dynamic broker configs, which may change
        if topic == TXN_TOPIC and "min.insync.replicas" not in configs:
            return config.transaction_state_log_min_isr
        if "min.insync.replicas" not in configs:
            return config.min_insync_replicas
        try:
            return config.topic_config(configs).min_insync_replicas
        except ConfigError:
            return config.min_insync_replicas

    @property
    def cache(self) -> MetadataCache:
        return self.link.cache

    # ---- lifecycle

    def open(self) -> None:
        pass  # a cluster's dynamic configs are in ZooKeeper, read at join

    async def join(self) -> str:
        """Register in ZooKeeper and take the cluster's id (ClusterStartupError if not):
        refusing a data dir of another cluster. ACLs, credentials and dynamic configs then
        come from ZooKeeper, where every broker sees every change."""
        self._build()
        config = self._config()
        local = read_cluster_id(self._fs, self._log_dir)
        timeout_s = config.zookeeper_connection_timeout_ms / 1000
        try:
            await asyncio.to_thread(self.link.start, timeout_s)
            cluster_id = await asyncio.to_thread(
                self.link.store.cluster_id, local or uuid.uuid4().hex[:22]
            )
        except MetadataStoreError as exc:
            self.link.close()
            raise ClusterStartupError(str(exc)) from exc
        if local is not None and local != cluster_id:
            self.link.close()
            raise ClusterStartupError(
                f"the data dir belongs to cluster {local}, but ZooKeeper at "
                f"{config.zookeeper_connect} holds cluster {cluster_id}"
            )
        if local is None:
            write_meta_properties(self._fs, self._log_dir, cluster_id, self.node_id)
        log.info(
            "broker %d joined cluster %s through ZooKeeper at %s",
            self.node_id,
            cluster_id,
            config.zookeeper_connect,
        )
        loop = asyncio.get_running_loop()
        security_store = ZkSecurityStore(self.link.store, loop)
        self._security.store = security_store
        self._security.load()
        security_store.watch(self._security.set_acls, self._security.set_credentials)
        dynamic = ZkDynamicConfigStore(self.link.store, loop, self._dynamic_config.own_entities)
        self._dynamic_config.store = dynamic
        self._dynamic_config.load()
        dynamic.watch(self._dynamic_config.set)
        quotas = ZkQuotaStore(self.link.store, loop)
        self._client_quotas.store = quotas
        self._client_quotas.load()
        quotas.watch(self._client_quotas.set_all)
        return cluster_id

    async def start_serving(self, on_role: RoleListener) -> None:
        """Take up this broker's replicas and stand for controller (after the flusher).
        A leadership's work (a coordinator's load) runs in the background."""
        self.replicas.role_listeners.append(
            lambda topic, partition, role, epoch: self._spawn(
                on_role(topic, partition, role, epoch)
            )
        )
        self.replicas.start()
        self.controller.start()
        self._producer_ids.allocate_block = self._producer_id_block

    def _spawn(self, work: Awaitable[None] | None) -> None:
        if work is None:
            return

        async def run() -> None:
            try:
                await work
            except Exception:
                log.exception("background task failed")

        task = asyncio.get_running_loop().create_task(run())
        self._spawned.add(task)
        task.add_done_callback(self._spawned.discard)

    def _producer_id_block(self, size: int) -> tuple[int, int]:
        """A block of producer ids from ZooKeeper (one compare-and-set per `size` ids; it
        blocks the loop for a round trip, as Kafka's controller did for its requester)."""
        try:
            block = self.link.store.allocate_producer_ids(self.node_id, size)
        except Exception as exc:
            raise KafkaError(
                ErrorCode.coordinator_not_available, f"no producer-id block from ZooKeeper: {exc}"
            ) from exc
        return block.start, block.end

    async def controlled_shutdown(self) -> None:
        """Ask the controller to move leadership away, and wait (bounded) until it has."""
        config = self._config()
        if not config.controlled_shutdown_enable:
            return
        try:
            await asyncio.to_thread(self.link.store.enter_controlled_shutdown, self.node_id)
        except Exception as exc:
            log.warning("controlled shutdown not possible: %s", exc)
            return
        # Kafka's attempts: each waits up to the retry backoff for the leadership to move;
        # an attempt in which nothing moved ends the wait (the controller cannot help).
        attempt_s = max(config.controlled_shutdown_retry_backoff_ms / 1000, 0.5)
        remaining = self._leads_with_others()
        for _ in range(config.controlled_shutdown_max_retries + 1):
            before = remaining
            await self.link.wait_for(lambda: self._leads_with_others() == 0, attempt_s)
            remaining = self._leads_with_others()
            if not remaining:
                log.info("controlled shutdown: leadership moved away")
                return
            if remaining >= before:
                break
        log.warning(
            "controlled shutdown: still leading %d partitions another replica could lead; "
            "exiting anyway",
            remaining,
        )

    def _leads_with_others(self) -> int:
        """How many partitions led here have another in-sync replica to take over."""
        return sum(
            1 for p in self.replicas.partitions.values() if p.role is Role.LEADER and len(p.isr) > 1
        )

    async def stop(self) -> None:
        if not hasattr(self, "link"):
            return  # never joined
        self.peers.close()
        await self.controller.stop()
        await self.replicas.stop()
        await asyncio.to_thread(self.link.close)

    # ---- metadata

    def nodes(self, listener: str) -> list[tuple[int, str, int]]:
        return sorted((b, *r.endpoint(listener)) for b, r in self.cache.brokers.items())

    def racks(self) -> dict[int, str | None]:
        return {b: r.rack for b, r in self.cache.brokers.items()}

    def endpoint(self, node: int, listener: str) -> tuple[str, int] | None:
        registration = self.cache.brokers.get(node)
        return None if registration is None else registration.endpoint(listener)

    def topic_names(self) -> list[str]:
        names = list(self.cache.topics)
        internal = self.internal_topics
        return sorted(n for n in names if n not in internal) + sorted(
            n for n in names if n in internal
        )

    def has_partition(self, topic: str, partition: int) -> bool:
        return bool(self.cache.replicas_of(topic, partition))

    def log_for_produce(self, topic: str, partition: int) -> PartitionLog:
        return self.leader_log(topic, partition)  # no auto-creation, as Kafka

    @property
    def produce_creates_topics(self) -> bool:
        return False

    def replica(self, plog: PartitionLog) -> Partition | None:
        return self.replicas.get(plog.topic, plog.partition)

    def alive_brokers(self) -> frozenset[int]:
        return frozenset(self.replicas.alive_brokers())

    def leads(self, plog: PartitionLog) -> bool:
        replica = self.replicas.get(plog.topic, plog.partition)
        return replica is not None and replica.role is Role.LEADER

    def replication_summary(self) -> ReplicationSummary:
        under = sum(
            1
            for p in self.replicas.partitions.values()
            if p.role is Role.LEADER and len(p.isr) < len(p.state.replicas)
        )
        cache = self.cache
        offline = {(p.topic, p.partition) for p in self._logs if p.offline is not None}
        offline.update(
            (topic, index)
            for topic, index, _ in cache.partitions()
            if cache.leader_of(topic, index) < 0
        )
        reassigning = sum(
            1
            for (topic, index), p in self.replicas.partitions.items()
            if p.role is Role.LEADER and (topic, index) in ongoing(cache, [(topic, index)])
        )
        return ReplicationSummary(
            under,
            frozenset(offline),
            self.replicas.isr_shrinks,
            self.replicas.isr_expands,
            self.controller.active,
            reassigning,
            self.replicas.leader_quota.throttled_bytes,
            self.replicas.follower_quota.throttled_bytes,
        )

    def refresh_configs(self) -> None:
        self.replicas.refresh_configs()
        self._set_throttle_rates()

    def _set_throttle_rates(self) -> None:
        config = self._config()
        self.replicas.set_throttle_rates(
            config.leader_replication_throttled_rate, config.follower_replication_throttled_rate
        )

    def controller_id(self) -> int:
        controller = self.cache.controller_id
        return controller if controller is not None else NO_LEADER

    def topic(self, name: str) -> TopicInfo | None:
        meta = self.cache.topics.get(name)
        if meta is None:
            return None
        internal = name in self.internal_topics
        return TopicInfo(name, meta.topic_id, meta.partitions, dict(meta.configs), internal)

    def partition_view(self, topic: str, partition: int) -> PartitionView:
        cache = self.cache
        replicas = cache.replicas_of(topic, partition)
        current = cache.states.get((topic, partition))
        offline = tuple(r for r in replicas if r not in cache.brokers)
        if current is None:
            return PartitionView(
                ErrorCode.leader_not_available, NO_LEADER, -1, replicas, (), offline
            )
        state = current.state
        leader = cache.leader_of(topic, partition)
        error = ErrorCode.none if leader != NO_LEADER else ErrorCode.leader_not_available
        return PartitionView(error, leader, state.leader_epoch, replicas, state.isr, offline)

    def partition(self, topic: str, index: int) -> Partition:
        """The local replica that leads the partition; Kafka's errors otherwise."""
        partition = self.replicas.get(topic, index)
        if partition is None or partition.role is not Role.LEADER:
            if topic not in self.cache.topics or index not in self.cache.topics[topic].assignment:
                raise KafkaError(ErrorCode.unknown_topic_or_partition, f"no {topic}-{index}")
            raise KafkaError(
                ErrorCode.not_leader_or_follower,
                f"broker {self.node_id} does not lead {topic}-{index}",
            )
        if partition.log.offline is not None:
            raise KafkaError(ErrorCode.kafka_storage_error, partition.log.offline)
        return partition

    def leader_log(self, topic: str, index: int) -> PartitionLog:
        return self.partition(topic, index).log

    async def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        assignment: dict[int, list[int]] | None,
    ) -> CreatedTopic:
        meta = await self._write_topic(name, partitions, replication_factor, configs, assignment)
        factor = len(next(iter(meta.assignment.values())))
        return CreatedTopic(uuid.UUID(meta.topic_id), meta.partitions, factor)

    async def _write_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        assignment: dict[int, list[int]] | None = None,
        wait: bool = True,
    ) -> TopicMetadata:
        """Write the assignment to ZooKeeper (the controller elects the leaders) and wait,
        bounded, until this broker sees every partition led."""
        live = sorted(self.cache.brokers)
        if assignment is None:
            assignment = assign_replicas(partitions, replication_factor, live, racks=self.racks())
        topic_id = str(uuid.uuid4())
        try:
            await asyncio.to_thread(
                self.link.store.create_topic_assignment, name, topic_id, assignment, dict(configs)
            )
        except TopicExists as exc:
            raise KafkaError(ErrorCode.topic_already_exists, str(exc)) from exc
        except MetadataStoreError as exc:
            raise KafkaError(ErrorCode.unknown_server_error, str(exc)) from exc
        if wait:
            await self.wait_for_leaders(name, len(assignment))
        meta = self.cache.topics.get(name)
        if meta is None:
            return TopicMetadata(
                name, topic_id, {p: tuple(r) for p, r in assignment.items()}, dict(configs)
            )
        return meta

    async def wait_for_leaders(self, name: str, partitions: int) -> None:
        await self.link.wait_for(
            lambda: all(self.cache.leader_of(name, p) != NO_LEADER for p in range(partitions)),
            CREATE_WAIT_S,
        )

    async def create_partitions(
        self, name: str, total: int, new: list[list[int]] | None, validate_only: bool
    ) -> None:
        """CreatePartitions: the new partitions' replicas (given, or round robin continuing
        the topic's), written by compare-and-set; the controller elects their leaders."""
        meta = self.cache.topics.get(name)
        if meta is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"no topic '{name}'")
        if meta.adding or meta.removing:  # as Kafka's ZkAdminManager refuses it
            raise KafkaError(
                ErrorCode.reassignment_in_progress,
                f"A partition reassignment is in progress for the topic '{name}'.",
            )
        current = {p: list(r) for p, r in meta.assignment.items()}
        if total <= len(current):
            raise KafkaError(
                ErrorCode.invalid_partitions,
                partition_count_message(len(current), total),
            )
        factor = len(current[0])
        if new is None:
            added = assign_replicas(
                total - len(current),
                factor,
                sorted(self.cache.brokers),
                len(current),
                racks=self.racks(),
            )
        else:
            if len(new) != total - len(current):
                raise KafkaError(
                    ErrorCode.invalid_replica_assignment,
                    f"{len(new)} assignments for {total - len(current)} new partitions",
                )
            added = {len(current) + i: replicas for i, replicas in enumerate(new)}
            for replicas in added.values():
                if len(replicas) != factor or len(set(replicas)) != factor:
                    raise KafkaError(
                        ErrorCode.invalid_replica_assignment,
                        f"{replicas}: the topic has {factor} distinct replicas per partition",
                    )
                unknown = sorted(set(replicas) - set(self.cache.brokers))
                if unknown:
                    raise KafkaError(
                        ErrorCode.invalid_replica_assignment, f"unknown brokers {unknown}"
                    )
        if validate_only:
            return
        try:
            await asyncio.to_thread(
                self.link.store.add_partitions, name, {**current, **added}, current
            )
        except MetadataStoreError as exc:
            raise KafkaError(ErrorCode.invalid_partitions, str(exc)) from exc
        await self.wait_for_leaders(name, total)

    async def alter_topic_configs(
        self, name: str, change: Callable[[dict[str, str]], dict[str, str]], validate_only: bool
    ) -> None:
        """New overrides by compare-and-set on the topic's config znode; every broker (this
        one included) applies them from its watch. Waits, bounded, until this broker has,
        so a DescribeConfigs sent here next shows them."""

        def checked(current: dict[str, str]) -> dict[str, str]:
            configs = change(current)
            self._validate_configs(configs)  # INVALID_CONFIG before anything is written
            return configs

        store = self.link.store
        try:
            version = await asyncio.to_thread(
                store.update_topic_configs, name, checked, not validate_only
            )
        except NoSuchTopic as exc:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, str(exc)) from exc
        except KafkaError:
            raise
        except Exception as exc:  # ZooKeeper failed (MetadataStoreError, or kazoo's own)
            raise KafkaError(
                ErrorCode.unknown_server_error, f"configs not written: {exc!r}"
            ) from exc
        if validate_only:
            return

        def applied() -> bool:
            meta = self.cache.topics.get(name)
            return meta is None or meta.config_version >= version

        await self.link.wait_for(applied, CREATE_WAIT_S)

    async def elect_leaders(
        self, election_type: int, partitions: list[tuple[str, int]] | None, timeout_ms: int
    ) -> dict[tuple[str, int], ElectionResult]:
        """Decide each partition on this broker's cache as the controller will; hand the
        ones to elect to the controller in a request znode (this broker writes no partition
        state unless it is the controller), then wait for their new leaders."""
        kind = ElectionType(election_type)
        if partitions is None:
            partitions = sorted((t, p) for t, p, _ in self.cache.partitions())
        results: dict[tuple[str, int], ElectionResult] = {}
        expected: dict[tuple[str, int], int] = {}
        for topic, partition in partitions:
            planned = plan_requested_election(self.cache, -1, kind, topic, partition)
            if planned.change is None:
                results[(topic, partition)] = (planned.error, planned.message)
            else:
                expected[(topic, partition)] = planned.change.state.leader
        if not expected:
            return results
        request = ElectionRequest(election_type, tuple(expected))
        try:
            await asyncio.to_thread(self.link.store.request_election, request)
        except MetadataStoreError as exc:
            raise KafkaError(ErrorCode.unknown_server_error, str(exc)) from exc

        def elected(tp: tuple[str, int]) -> bool:
            return self.cache.leader_of(*tp) == expected[tp]

        await self.link.wait_for(lambda: all(map(elected, expected)), timeout_ms / 1000)
        for tp in expected:
            results[tp] = (ErrorCode.none, None) if elected(tp) else (_TIMED_OUT, None)
        return results

    async def delete_topic(self, name: str) -> None:
        try:
            await asyncio.to_thread(self.link.store.delete_topic, name)
        except MetadataStoreError as exc:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, str(exc)) from exc
        await self.link.wait_for(lambda: name not in self.cache.topics, CREATE_WAIT_S)

    async def alter_partition_reassignments(
        self,
        requested: dict[tuple[str, int], tuple[int, ...] | None],
        allow_rf_change: bool,
    ) -> dict[tuple[str, int], ElectionResult]:
        return await alter_reassignments(self.link, requested, allow_rf_change)

    def list_partition_reassignments(
        self, partitions: list[tuple[str, int]] | None
    ) -> dict[tuple[str, int], tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
        return ongoing(self.cache, partitions)

    def ensure_internal_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        *,
        cap_at_brokers: bool = False,
        min_isr: int = 1,
    ) -> bool:
        """Whether the internal topic exists; if not, start creating it once enough
        brokers are alive (Kafka answers COORDINATOR_NOT_AVAILABLE meanwhile).

        With cap_at_brokers, a cluster of fewer brokers than the factor uses them all, and
        the topic's min.insync.replicas is capped to match (else no write could succeed)."""
        if name in self.cache.topics:
            return True
        alive = len(self.cache.brokers)
        if name in self._creating or alive == 0:  # one attempt at a time
            return False
        if cap_at_brokers and alive < replication_factor:
            log.warning(
                "%s gets replication factor %d: the default %d is capped at the %d brokers "
                "registered (set it explicitly to wait for more brokers, as Kafka does)",
                name,
                alive,
                replication_factor,
                alive,
            )
            replication_factor = alive
            configs = {**configs, "min.insync.replicas": str(min(min_isr, alive))}
        if alive < replication_factor:
            return False
        self._creating.add(name)
        task = asyncio.get_running_loop().create_task(
            self._write_topic(name, partitions, replication_factor, configs, wait=False)
        )
        task.add_done_callback(_log_creation(name))
        task.add_done_callback(lambda _: self._creating.discard(name))
        return False

    async def wait_for_leader(self, topic: str, partition: int, timeout_s: float) -> bool:
        if topic not in self.cache.topics and topic not in self._creating:
            return False  # nothing under way to wait for (too few brokers yet)
        return await self.link.wait_for(
            lambda: self.cache.leader_of(topic, partition) != NO_LEADER, timeout_s
        )

    # ---- appends

    def appended(self, plog: PartitionLog) -> bool:
        partition = self.replicas.get(plog.topic, plog.partition)
        return partition is not None and partition.maybe_advance_high_watermark()

    def flushed(self, plog: PartitionLog) -> bool:
        return self.appended(plog)

    def follower_fetched(
        self, plog: PartitionLog, replica: int, fetch_offset: int, log_start_offset: int | None
    ) -> bool:
        partition = self.replicas.get(plog.topic, plog.partition)
        return partition is not None and self.replicas.follower_fetched(
            partition, replica, fetch_offset, log_start_offset
        )

    def check_replicas(self, plog: PartitionLog, acks: int) -> None:
        if acks == -1:
            partition = self.replicas.get(plog.topic, plog.partition)
            if partition is not None:
                partition.check_enough_replicas(partition.min_insync_replicas)

    def acknowledgement(
        self,
        plog: PartitionLog,
        last_offset: int,
        acks: int,
        timeout_ms: int,
        durable: Callable[[PartitionLog, int], asyncio.Future[None]],
    ) -> asyncio.Future[None] | None:
        if acks != -1:
            return None
        partition = self.replicas.get(plog.topic, plog.partition)
        if partition is None:
            return durable(plog, last_offset) if plog.config.durable else None
        return replication_answer(partition, last_offset, timeout_ms)


def _log_creation(name: str) -> Callable[[asyncio.Task[TopicMetadata]], None]:
    def done(task: asyncio.Task[TopicMetadata]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None and not (
            isinstance(exc, KafkaError) and exc.code is ErrorCode.topic_already_exists
        ):
            log.warning("creating %s failed: %r", name, exc)
        elif exc is None:
            log.info("created internal topic %s", name)

    return done


def replication_answer(
    partition: Partition, last_offset: int, timeout_ms: int
) -> asyncio.Future[None]:
    """Done when the high watermark passes last_offset with enough replicas in sync;
    NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below min.insync.replicas meanwhile,
    REQUEST_TIMED_OUT after the request's timeout (the records may still be committed)."""
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[None] = loop.create_future()
    inner = partition.wait_replicated(last_offset)

    def replicated(done: asyncio.Future[None]) -> None:
        if done.cancelled():
            return  # timed out: the answer went already
        exc = done.exception()  # read even when answered, so asyncio never logs it
        if answer.done():
            return
        if exc is not None:
            fail_future(answer, exc)
        elif len(partition.isr) < partition.min_insync_replicas:
            fail_future(
                answer,
                KafkaError(
                    ErrorCode.not_enough_replicas_after_append,
                    f"{partition.log.name}: the ISR shrank below min.insync.replicas",
                ),
            )
        else:
            answer.set_result(None)

    def timed_out() -> None:
        if not answer.done():
            error = KafkaError(ErrorCode.request_timed_out, f"{partition.log.name}: not replicated")
            fail_future(answer, error)
        inner.cancel()  # the partition drops cancelled waiters

    inner.add_done_callback(replicated)
    if timeout_ms > 0:
        handle = loop.call_later(timeout_ms / 1000, timed_out)
        answer.add_done_callback(lambda _: handle.cancel())
    return answer
