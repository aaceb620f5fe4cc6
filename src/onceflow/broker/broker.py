"""Broker: the wiring of one broker's parts, and the state handlers reach through it.

Like Kafka's KafkaServer.startup, it builds every part once and hands each the narrow
collaborators it uses: the logs, the group-commit flusher, the fetch purgatories, the
coordinators and the topology, which answers every question about the cluster (a cluster
of one when `zookeeper.connect` is unset). The broker itself never asks whether it is
clustered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from onceflow.broker.dynamic_config import DynamicBrokerConfig, LocalDynamicConfigStore
from onceflow.broker.fetch_sessions import FetchSessions
from onceflow.broker.metrics import BrokerMetrics
from onceflow.broker.metrics_share import ShareStateCollector
from onceflow.broker.purgatory import FetchPurgatory
from onceflow.broker.quota_metrics import QuotaCollector
from onceflow.broker.quota_store import LocalQuotaStore
from onceflow.broker.quotas import ClientQuotas
from onceflow.broker.security import LocalSecurityStore, SecurityState, inter_broker_security
from onceflow.broker.share_persister import SharePersister
from onceflow.broker.topics import (
    INTERNAL_TOPICS,
    OFFSETS_TOPIC,
    SHARE_STATE_TOPIC,
    TXN_TOPIC,
    CreatedTopic,
    validate_topic_name,
)
from onceflow.broker.topology.base import NO_LEADER, PartitionView, Topology
from onceflow.broker.topology.standalone import StandaloneTopology
from onceflow.broker.topology.zookeeper import ZkTopology
from onceflow.broker.writes import Writes
from onceflow.clock import Clock, SystemClock
from onceflow.cluster.assignment import assign_replicas
from onceflow.config import BrokerConfig, ConfigError
from onceflow.coordinator.group.config import GroupCoordinatorConfig
from onceflow.coordinator.group.coordinator import GroupCoordinator
from onceflow.coordinator.group.log import LogEntry
from onceflow.coordinator.share.coordinator import ShareCoordinator, ShareCoordinatorConfig
from onceflow.coordinator.share.durable_membership import DurableMembership
from onceflow.coordinator.share.store import ShareStateStore
from onceflow.coordinator.transaction.coordinator import (
    TransactionCoordinator,
    TxnCoordinatorConfig,
)
from onceflow.coordinator.transaction.producer_ids import ProducerIdManager
from onceflow.errors import ErrorCode, KafkaError
from onceflow.protocol.topic_ids import parse_topic_id
from onceflow.protocol.txn_support import TxnSupport
from onceflow.replication.partition import Partition, Role
from onceflow.storage.cleaner import LogCleaner
from onceflow.storage.disk_space import DiskSpaceGuard, DiskState
from onceflow.storage.failures import LogOffline
from onceflow.storage.flusher import GroupCommitFlusher
from onceflow.storage.fs import FileSystem, RealFileSystem
from onceflow.storage.log_manager import LogManager
from onceflow.storage.partition_log import LogConfig, PartitionLog

if TYPE_CHECKING:
    from onceflow.broker.server import KafkaConnection
    from onceflow.security.authorizer import Authorizer

log = logging.getLogger(__name__)
# How long FindCoordinator waits for a leader of a key's new internal partition: above
# the seconds a busy cluster takes to create and elect one, well below any client's request
# timeout (30 s and more).
COORDINATOR_WAIT_S = 5.0


class Broker:
    def __init__(
        self, config: BrokerConfig, fs: FileSystem | None = None, clock: Clock | None = None
    ) -> None:
        self.config = config
        self.clock = clock or SystemClock()
        self.fs = fs or RealFileSystem()
        self.node_id = config.node_id
        self.log_dir = config.log_dirs[0]
        self.max_request_bytes = config.socket_request_max_bytes
        self.cluster_id = ""
        # Topic names by id, as last built: a hint only, each hit checked (topic_name_by_id).
        self._names_by_id: dict[uuid.UUID, str] = {}
        self.disk = DiskSpaceGuard(
            self.fs,
            self.log_dir,
            self.clock,
            config.onceflow_log_dir_min_free_bytes,
            config.onceflow_log_dir_min_free_percent,
            config.onceflow_log_dir_ballast_bytes,
        )
        self.logs = LogManager(self.fs, self.log_dir, self.clock, self.log_config, self.disk)
        self.logs.offline_listeners.append(self._log_offline)
        # Dynamic broker configs (AlterConfigs on BROKER): self.config is rebuilt when changed.
        self.dynamic_config = DynamicBrokerConfig(
            config,
            LocalDynamicConfigStore(self.fs, self.log_dir),
            on_change=self._config_changed,
        )
        # Client quotas (AlterClientQuotas), in a file here; in ZooKeeper on a cluster.
        self.client_quotas = ClientQuotas(
            LocalQuotaStore(self.fs, self.log_dir),
            self.clock,
            config.quota_window_num,
            config.quota_window_size_seconds,
        )
        # ACLs and SCRAM credentials; its authorizer is None unless authorizer.class.name
        # is set (then every request is authorized).
        self.security = SecurityState(config, LocalSecurityStore(self.fs, self.log_dir))
        # How this broker reaches the others (raises SecuritySetupError on bad settings).
        self.inter_broker_security = (
            inter_broker_security(config) if config.zookeeper_connect else None
        )
        # Prometheus metrics (onceflow.metrics.listener); None: off, and nothing counted.
        self.metrics = BrokerMetrics(self) if config.onceflow_metrics_listener else None
        if self.metrics is not None:
            self.metrics.registry.register(QuotaCollector(self.client_quotas))
        self.purgatory = FetchPurgatory()
        # Followers' fetches wait for appends, not for the high watermark.
        self.replica_purgatory = FetchPurgatory()
        # Followers' incremental fetch sessions (KIP-227), told what each wake is about.
        self.fetch_sessions = FetchSessions()
        self.purgatory.on_notify = self.fetch_sessions.note_change
        self.replica_purgatory.on_notify = self.fetch_sessions.note_change
        self.writes = Writes(
            self.node_id, lambda: self.config, self.logs, self.purgatory, self.replica_purgatory
        )
        self.flusher = GroupCommitFlusher(
            on_flushed=self.writes.flushed,
            on_round=self.metrics.flush_round if self.metrics is not None else None,
        )
        self.cleaner = LogCleaner()
        self.producer_ids = ProducerIdManager(self.fs, self.log_dir)
        self.txn_coordinator = TransactionCoordinator(
            _TxnTopicLog(self.writes),
            self.writes,
            self.producer_ids,
            self.clock,
            TxnCoordinatorConfig(
                num_partitions=config.transaction_state_log_num_partitions,
                max_timeout_ms=config.transaction_max_timeout_ms,
                id_expiration_ms=config.transactional_id_expiration_ms,
                two_phase_commit=config.transaction_two_phase_commit_enable,
            ),
            coordinator_epoch=0,  # each partition's leader epoch, given at its load
        )
        self.connections: set[KafkaConnection] = set()
        self.group_coordinator = GroupCoordinator(
            clock=self.clock,
            log=_OffsetsTopicLog(self.writes),
            config=GroupCoordinatorConfig.from_broker_config(config),
            topics=self._topic_size,
            topic_names=lambda: (n for n in self.topic_names() if n not in INTERNAL_TOPICS),
        )
        # Share groups (KIP-932): their members, sessions and share-partitions, with the
        # share-partitions' state in __share_group_state.
        self.share_coordinator = ShareCoordinator(
            self.clock,
            ShareCoordinatorConfig.from_broker_config(config),
            ShareStateStore(
                _ShareStateTopicLog(self.writes),
                config.share_coordinator_state_topic_num_partitions,
            ),
            self.topic_partition_count,
            config,
        )
        self.share_coordinator.on_available = lambda t, p: self.purgatory.notify((t, p))
        # Share-group membership is kept in __consumer_offsets, as Kafka 4.2 keeps it.
        self.share_coordinator.membership = DurableMembership(
            _OffsetsTopicLog(self.writes), self.group_coordinator.partition_for
        )
        self.writes.on_share_marker = self.share_coordinator.complete_txn
        if self.metrics is not None:
            self.metrics.registry.register(ShareStateCollector(self.share_coordinator))
        # A coordinator serves the keys of the internal partitions this broker leads.
        self.group_coordinator.serve_loaded_only()
        self.txn_coordinator.serve_loaded_only()
        self.topology = self._topology()
        # A share-partition's state may be led by another broker: the persister asks it.
        self.share_coordinator.persister = SharePersister(
            self.share_coordinator.store,
            lambda: self.topology,
            self.node_id,
            self.ensure_share_state_topic,
        )
        self.writes.attach(
            self.flusher, self.topology, self.txn_coordinator, self.group_coordinator
        )
        self._timers: list[asyncio.Task[None]] = []

    def _topology(self) -> Topology:
        """The one place that knows which kind of cluster this broker is part of."""
        if self.config.zookeeper_connect:
            return ZkTopology(
                self.node_id,
                lambda: self.config,
                self.clock,
                self.fs,
                self.log_dir,
                self.logs,
                host=self.writes,
                producer_ids=self.producer_ids,
                security=self.security,
                dynamic_config=self.dynamic_config,
                client_quotas=self.client_quotas,
                inter_broker_security=self.inter_broker_security,
                validate_configs=self.log_config,
            )
        return StandaloneTopology(
            self.node_id,
            lambda: self.config,
            self.fs,
            self.log_dir,
            self.logs,
            load_local_configs=self.dynamic_config.load,
            load_local_security=self.security.load,
            validate_configs=self.log_config,
            barrier=self.flusher.barrier,
        )

    # ---- configuration ---------------------------------------------------------------

    def log_config(self, overrides: Mapping[str, str]) -> LogConfig:
        """A topic's storage settings: broker defaults, then the topic's own overrides."""
        try:
            topic = self.config.topic_config(overrides)
        except ConfigError as exc:
            raise KafkaError(ErrorCode.invalid_config, str(exc)) from exc
        return LogConfig.from_topic(topic, durable=self.config.onceflow_fsync_on_ack)

    # ---- lifecycle -------------------------------------------------------------------

    def _config_changed(self, config: BrokerConfig) -> None:
        """Dynamic broker configs changed: every log and replica re-derives its own."""
        self.config = config
        self.logs.refresh_configs()
        self.topology.refresh_configs()

    # ---- lifecycle -------------------------------------------------------------------

    @property
    def authorizer(self) -> Authorizer | None:
        """The ACL authorizer, or None when authorizer.class.name is unset (allow all)."""
        return self.security.authorizer

    async def start(self) -> None:
        self.topology.open()
        self.client_quotas.load()  # a cluster's come from ZooKeeper when it joins
        self.logs.load()
        self.disk.refresh(force=True)
        self.cluster_id = await self.topology.join()
        self.producer_ids.load()
        self.flusher.start()
        await self.topology.start_serving(self._role_changed)
        self._every(
            self.config.transaction_abort_timed_out_transaction_cleanup_interval_ms / 1000,
            self.txn_coordinator.poll,
        )
        self._every(0.1, self.group_coordinator.poll)
        self._every(0.1, self.share_coordinator.poll)
        self._every(self.config.log_retention_check_interval_ms / 1000, self.logs.enforce_retention)
        self._every(60.0, self.logs.checkpoint_recovery_points)
        self._every(1.0, self.disk.refresh)  # logs the disk's state changes without traffic
        self._every(10.0, self.close_retired_files)
        self._every(
            self.config.producer_id_expiration_check_interval_ms / 1000, self.expire_producers
        )
        if self.config.log_cleaner_enable:
            self._every(self.config.log_cleaner_backoff_ms / 1000, self.clean_logs)

    def _role_changed(
        self, topic: str, partition: int, role: Role, leader_epoch: int
    ) -> Awaitable[None] | None:
        """Coordinators follow the leadership of their internal partitions: the load of a
        partition led from now on is returned, for the topology to run. A new leadership
        also ends the followers' fetches parked here, so that they come back at once asking
        for the new partition too (its acks=all writes wait for them)."""
        if role is Role.LEADER:
            self.replica_purgatory.notify_all()
        plog = self.logs.get(topic, partition)
        if plog is not None and plog.has_unflushed:
            # A tail recovered after a crash is flushed before it counts (as leader) or is
            # reported to the leader (as follower) as held.
            self.flusher.mark(plog)
        if topic == OFFSETS_TOPIC:
            if role is Role.LEADER:
                self.share_coordinator.load_groups(partition)
                return self.group_coordinator.load_partition(partition, leader_epoch)
            self.share_coordinator.unload_groups(partition)
            self.group_coordinator.unload(partition, leader_epoch)
        elif topic == TXN_TOPIC:
            if role is Role.LEADER:
                return self.txn_coordinator.load_partition(partition, leader_epoch)
            self.txn_coordinator.unload(partition, leader_epoch)
        elif topic == SHARE_STATE_TOPIC:
            if role is Role.LEADER:
                self.share_coordinator.store.load_partition(partition, leader_epoch)
            else:
                self.share_coordinator.store.unload(partition, leader_epoch)
        return None

    def _every(self, seconds: float, action: Callable[[], object]) -> None:
        async def loop() -> None:
            while True:
                await asyncio.sleep(seconds)
                try:
                    result = action()
                    if asyncio.iscoroutine(result):
                        await result
                except Exception:
                    log.exception("periodic task %s failed", getattr(action, "__name__", action))

        self._timers.append(asyncio.get_running_loop().create_task(loop()))

    async def controlled_shutdown(self) -> None:
        """Before stopping: hand leadership to other brokers, so clients see no errors."""
        await self.topology.controlled_shutdown()

    async def stop(self) -> None:
        await self.topology.stop()
        self.group_coordinator.close()  # parked joins and syncs answer NOT_COORDINATOR
        await self.txn_coordinator.close()
        for task in self._timers:
            task.cancel()
        await asyncio.gather(*self._timers, return_exceptions=True)
        await self.flusher.close()
        self.logs.shutdown()

    def _log_offline(self, plog: PartitionLog) -> None:
        """A coordinator whose log partition went offline stops serving its keys."""
        if plog.topic == TXN_TOPIC:
            self.txn_coordinator.unload(plog.partition)
        elif plog.topic == OFFSETS_TOPIC:
            self.group_coordinator.unload(plog.partition)
            self.share_coordinator.unload_groups(plog.partition)
        elif plog.topic == SHARE_STATE_TOPIC:
            self.share_coordinator.store.unload(plog.partition)

    def coordinator_node(
        self, key_type: int, key: str, listener: str | None = None
    ) -> tuple[int, str, int] | None:
        """The broker coordinating a group (0) or transactional id (1): the leader of the
        key's internal partition, or None when there is none right now
        (COORDINATOR_NOT_AVAILABLE: the client retries). The internal topic is created on
        first use, once enough brokers are alive for its replication factor."""
        config = self.config
        if key_type == 1:
            topic, partitions = TXN_TOPIC, config.transaction_state_log_num_partitions
            factor_key = "transaction.state.log.replication.factor"
            replicas = config.transaction_state_log_replication_factor
            min_isr = config.transaction_state_log_min_isr
            segment_bytes = config.transaction_state_log_segment_bytes
        else:
            topic, partitions = OFFSETS_TOPIC, config.offsets_topic_num_partitions
            factor_key = "offsets.topic.replication.factor"
            replicas = config.offsets_topic_replication_factor
            min_isr = config.min_insync_replicas
            segment_bytes = config.offsets_topic_segment_bytes
        configs = {"cleanup.policy": "compact", "segment.bytes": str(segment_bytes)}
        # The default factor (3) is capped at the brokers there are; one the operator set
        # is waited for, as Kafka does.
        capped = factor_key not in dict(config.settings)
        if not self.topology.ensure_internal_topic(
            topic, partitions, replicas, configs, cap_at_brokers=capped, min_isr=min_isr
        ):
            return None
        leader = self.topology.partition_view(*self._coordinator_partition(key_type, key)).leader
        if leader == NO_LEADER:
            return None
        address = self.topology.endpoint(leader, listener or config.inter_broker_listener().name)
        return None if address is None else (leader, *address)

    async def find_coordinator(
        self, key_type: int, key: str, listener: str | None = None
    ) -> tuple[int, str, int] | None:
        """FindCoordinator's answer: as coordinator_node, but while the key's internal
        partition is being created or elected, wait (bounded) for its leader instead of
        answering COORDINATOR_NOT_AVAILABLE at once. Kafka answers at once; librdkafka's
        admin client asks three times in about 300 ms and then waits out its whole request
        timeout, which a first lookup on a busy cluster outlasts."""
        node = self.coordinator_node(key_type, key, listener)
        if node is not None:
            return node
        topic, partition = self._coordinator_partition(key_type, key)
        if await self.topology.wait_for_leader(topic, partition, COORDINATOR_WAIT_S):
            return self.coordinator_node(key_type, key, listener)
        return None

    def _coordinator_partition(self, key_type: int, key: str) -> tuple[str, int]:
        """The internal partition behind a group (0) or transactional id (1)."""
        if key_type == 1:
            return TXN_TOPIC, self.txn_coordinator.partition_for(key)
        return OFFSETS_TOPIC, self.group_coordinator.partition_for(key)

    def ensure_share_state_topic(self) -> bool:
        """Whether __share_group_state exists, creating it on first use as the other
        internal topics are (its default replication factor capped at the brokers)."""
        config = self.config
        capped = "share.coordinator.state.topic.replication.factor" not in dict(config.settings)
        segment = str(config.share_coordinator_state_topic_segment_bytes)
        return self.topology.ensure_internal_topic(
            SHARE_STATE_TOPIC,
            config.share_coordinator_state_topic_num_partitions,
            config.share_coordinator_state_topic_replication_factor,
            {"cleanup.policy": "compact", "segment.bytes": segment},
            cap_at_brokers=capped,
            min_isr=config.share_coordinator_state_topic_min_isr,
        )

    def coordinator_available(self, key_type: int, key: str) -> bool:
        """Whether the log partition behind a group (0) or transactional id (1) is online."""
        if key_type == 1:
            return self.txn_coordinator.owns(key)
        return self.group_coordinator.owns(key)

    def expire_producers(self) -> None:
        """Forget producers idle for producer.id.expiration.ms (never an open transaction)."""
        now = self.clock.now_ms()
        for plog in self.logs:
            plog.producer_state.remove_expired(now, self.config.producer_id_expiration_ms)

    def close_retired_files(self) -> None:
        self.logs.close_retired()

    def clean_logs(self) -> None:
        """One pass of the log cleaner over every compacted partition that needs it. Not
        while the disk is low: cleaning writes a copy of each segment before it frees any."""
        if self.disk.refresh() is not DiskState.OK:
            return
        now = self.clock.now_ms()
        for plog in self.logs:
            if plog.offline is None and self.cleaner.needs_cleaning(plog):
                with contextlib.suppress(LogOffline):  # logged once as the log went offline
                    self.cleaner.clean(plog, now)

    # ---- topics and partitions -------------------------------------------------------

    def has_partition(self, topic: str, partition: int) -> bool:
        return self.topology.has_partition(topic, partition)

    def topic_names(self) -> list[str]:
        """Every topic, the clients' first and the internal ones last (as Metadata lists)."""
        return self.topology.topic_names()

    def topic_partition_count(self, name: str) -> int | None:
        info = self.topology.topic(name)
        return None if info is None else info.partitions

    def _topic_size(self, name: str) -> tuple[uuid.UUID | None, int] | None:
        """A topic's id and partition count (the consumer protocol's assignments)."""
        info = self.topology.topic(name)
        return None if info is None else (parse_topic_id(info.topic_id), info.partitions)

    def topic_id(self, name: str) -> uuid.UUID | None:
        """The topic's id (KIP-516), None if there is no such topic. Made at creation and
        kept with the topic (its ZooKeeper assignment on a cluster, the topics file alone),
        so it survives restarts and changes when a topic of the same name is recreated."""
        info = self.topology.topic(name)
        return None if info is None else parse_topic_id(info.topic_id)

    def topics_by_id(self) -> dict[uuid.UUID, str]:
        """Every topic's name by its id."""
        ids = ((self.topic_id(name), name) for name in self.topic_names())
        return {topic_id: name for topic_id, name in ids if topic_id is not None}

    def topic_name_by_id(self, topic_id: uuid.UUID) -> str | None:
        """The name of the topic with this id, None if no topic has it. For requests that
        name topics by id (Produce v13, Fetch v13+ and so every follower, Metadata,
        ConsumerGroupHeartbeat): a remembered name is used once the topic it names
        still has this id, so a request costs a lookup per topic, not a walk of them all
        (which happens only when the id is new or its topic was deleted or recreated)."""
        name = self._names_by_id.get(topic_id)
        if name is not None and self.topic_id(name) == topic_id:
            return name
        self._names_by_id = self.topics_by_id()
        return self._names_by_id.get(topic_id)

    def topic_configs(self, name: str) -> dict[str, str] | None:
        info = self.topology.topic(name)
        return None if info is None else dict(info.configs)

    def nodes(self, listener: str | None = None) -> list[tuple[int, str, int]]:
        """(id, host, port) of every live broker, the addresses being those of `listener`
        (the one a client came in on; default: the inter-broker listener)."""
        return self.topology.nodes(listener or self.config.inter_broker_listener().name)

    def racks(self) -> dict[int, str | None]:
        return self.topology.racks()

    def controller_id(self) -> int:
        return self.topology.controller_id()

    def partition_view(self, topic: str, partition: int) -> PartitionView:
        return self.topology.partition_view(topic, partition)

    def leader_log(self, topic: str, partition: int) -> PartitionLog:
        """The log a client reads or writes: the local leader's (NOT_LEADER_OR_FOLLOWER if
        another broker leads, UNKNOWN_TOPIC_OR_PARTITION if there is no such partition)."""
        return self.topology.leader_log(topic, partition)

    def replicated(self, plog: PartitionLog) -> Partition | None:
        """The partition's replication state; None when no replica follows it (alone)."""
        return self.topology.replica(plog)

    async def create_topic(
        self,
        name: str,
        partitions: int,
        configs: Mapping[str, str] | None = None,
        replication_factor: int = -1,
        assignment: dict[int, list[int]] | None = None,
        validate_only: bool = False,
    ) -> CreatedTopic:
        """Create a topic; with `validate_only`, only check that it could be created and
        answer what it would be, with a fresh id that is never stored (as Kafka does)."""
        validate_topic_name(name)
        if partitions <= 0 and assignment is None:
            raise KafkaError(ErrorCode.invalid_partitions, "the partition count must be positive")
        rf = (
            self.config.default_replication_factor
            if replication_factor == -1
            else replication_factor
        )
        if validate_only:
            if assignment is not None:  # checked against the live brokers by the caller
                return CreatedTopic(uuid.uuid4(), len(assignment), len(assignment[0]))
            assign_replicas(partitions, rf, [node for node, _, _ in self.nodes()], start=0)
            return CreatedTopic(uuid.uuid4(), partitions, rf)
        return await self.topology.create_topic(name, partitions, rf, configs or {}, assignment)

    async def create_partitions(
        self, name: str, total: int, assignments: list[list[int]] | None, validate_only: bool
    ) -> None:
        if name in INTERNAL_TOPICS:
            raise KafkaError(
                ErrorCode.invalid_request, f"the partitions of internal topic '{name}' are fixed"
            )
        await self.topology.create_partitions(name, total, assignments, validate_only)

    async def alter_topic_configs(
        self,
        name: str,
        change: Callable[[dict[str, str]], dict[str, str]],
        validate_only: bool,
    ) -> None:
        """Replace a topic's overrides with `change(current)`, checked as Kafka checks them:
        INVALID_CONFIG before UNKNOWN_TOPIC_OR_PARTITION. On a cluster the new overrides go
        to ZooKeeper and every broker applies them from its watch."""
        await self.topology.alter_topic_configs(name, change, validate_only)

    async def auto_create_topic(self, name: str) -> None:
        """Kafka's auto.create.topics.enable, never for internal topics; logs the creation."""
        if not self.config.auto_create_topics_enable or name in INTERNAL_TOPICS:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"no topic '{name}'")
        log.info("auto-creating topic %s with %d partitions", name, self.config.num_partitions)
        await self.create_topic(name, self.config.num_partitions)

    async def delete_topic(self, name: str) -> None:
        if name in INTERNAL_TOPICS:
            raise KafkaError(ErrorCode.invalid_topic_exception, f"'{name}' is internal")
        await self.topology.delete_topic(name)

    def log_for_produce(self, topic: str, partition: int) -> PartitionLog:
        return self.topology.log_for_produce(topic, partition)


class _OffsetsTopicLog:
    """The OffsetsLog the group coordinator persists through."""

    def __init__(self, writes: Writes) -> None:
        self._writes = writes

    def append(
        self,
        partition: int,
        batch: bytes,
        transactional_id: str | None = None,
        support: TxnSupport = TxnSupport.DEFAULT_ERROR,
    ) -> Awaitable[int]:
        return self._writes.append_internal(
            OFFSETS_TOPIC, partition, batch, transactional_id, support
        )

    def read(self, partition: int) -> Iterable[LogEntry]:
        return self._writes.read_internal(OFFSETS_TOPIC, partition)


class _TxnTopicLog:
    """The TxnLog the transaction coordinator persists through."""

    def __init__(self, writes: Writes) -> None:
        self._writes = writes

    def append(self, partition: int, batch: bytes) -> Awaitable[int]:
        # In the leader's log when this returns (the coordinator completes a transaction's
        # Complete record then, and appends the next one behind it); durable when awaited.
        return self._writes.start_internal_append(TXN_TOPIC, partition, batch)

    def read(self, partition: int) -> Iterable[tuple[bytes | None, bytes | None]]:
        for entry in self._writes.read_internal(TXN_TOPIC, partition):
            if entry.control is None:
                yield entry.key, entry.value


class _ShareStateTopicLog:
    """The ShareStateLog the share coordinator's store persists through."""

    def __init__(self, writes: Writes) -> None:
        self._writes = writes

    def append(
        self, partition: int, batch: bytes, transactional_id: str | None = None
    ) -> Awaitable[int]:
        # Started now, so appends land in call order whether or not anyone awaits them.
        return asyncio.ensure_future(
            self._writes.append_internal(SHARE_STATE_TOPIC, partition, batch, transactional_id)
        )

    def read(self, partition: int) -> Iterable[LogEntry]:
        return self._writes.read_internal(SHARE_STATE_TOPIC, partition)
