"""Broker: the state every handler reaches through its RequestContext.

It owns the log manager (the ReplicaManager role on a single broker), the group-commit
flusher, the fetch purgatory and the coordinators, and runs their periodic work.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from onceflow.broker.cluster_mode import ClusterMode, PartitionView
from onceflow.broker.dynamic_config import (
    DynamicBrokerConfig,
    LocalDynamicConfigStore,
    ZkDynamicConfigStore,
)
from onceflow.broker.metrics import BrokerMetrics
from onceflow.broker.purgatory import FetchPurgatory
from onceflow.broker.security import LocalSecurityStore, SecurityState, inter_broker_security
from onceflow.broker.topics import (
    INTERNAL_TOPICS,
    CreatedTopic,
    partition_count_message,
    validate_topic_name,
)
from onceflow.clock import Clock, SystemClock
from onceflow.cluster.assignment import assign_replicas
from onceflow.cluster.security_store import ZkSecurityStore
from onceflow.config import BrokerConfig, ConfigError
from onceflow.coordinator.group.config import GroupCoordinatorConfig
from onceflow.coordinator.group.coordinator import GroupCoordinator
from onceflow.coordinator.group.log import LogEntry, decode_entries
from onceflow.coordinator.transaction.coordinator import (
    TransactionCoordinator,
    TxnCoordinatorConfig,
)
from onceflow.coordinator.transaction.metadata import TopicPartition
from onceflow.coordinator.transaction.producer_ids import ProducerIdManager
from onceflow.errors import ErrorCode, KafkaError, fail_future
from onceflow.failpoints import failpoint
from onceflow.invariants import invariant
from onceflow.protocol.topic_ids import parse_topic_id
from onceflow.protocol.txn_support import TxnSupport, write_refusal
from onceflow.records.batch import BatchHeader, scan_batches
from onceflow.replication.partition import Partition, Role
from onceflow.storage.cleaner import LogCleaner
from onceflow.storage.disk_space import DiskSpaceGuard, DiskState
from onceflow.storage.failures import LogOffline, OutOfSpace
from onceflow.storage.flusher import GroupCommitFlusher
from onceflow.storage.fs import FileSystem, RealFileSystem
from onceflow.storage.log_manager import LogManager
from onceflow.storage.partition_log import LogConfig, PartitionLog
from onceflow.storage.producer_state import NO_TXN

if TYPE_CHECKING:
    from onceflow.broker.server import KafkaConnection
    from onceflow.security.authorizer import Authorizer

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
TXN_TOPIC = "__transaction_state"
META_PROPERTIES = "meta.properties"
COORDINATOR_EPOCH_FILE = "transaction-coordinator-epoch"
CLUSTER_INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TXN_TOPIC})
#: How long the coordinators' own writes wait to be replicated (offsets.commit.timeout.ms).
INTERNAL_WRITE_TIMEOUT_MS = 5000


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
        # Dynamic broker configs (AlterConfigs on BROKER): rebuild self.config when changed.
        self.dynamic_config = DynamicBrokerConfig(
            self, LocalDynamicConfigStore(self.fs, self.log_dir)
        )
        # Prometheus metrics (onceflow.metrics.listener); None: off, and nothing counted.
        self.metrics = BrokerMetrics(self) if config.onceflow_metrics_listener else None
        # ACLs and SCRAM credentials; its authorizer is None unless authorizer.class.name
        # is set (then every request is authorized).
        self.security = SecurityState(config, LocalSecurityStore(self.fs, self.log_dir))
        # How this broker reaches the others (raises SecuritySetupError on bad settings).
        self.inter_broker_security = (
            inter_broker_security(config) if config.zookeeper_connect else None
        )
        self.flusher = GroupCommitFlusher(
            on_flushed=self._flushed,
            on_round=self.metrics.flush_round if self.metrics is not None else None,
        )
        self.purgatory = FetchPurgatory()
        # Followers' fetches wait for appends, not for the high watermark.
        self.replica_purgatory = FetchPurgatory()
        self.cleaner = LogCleaner()
        self.producer_ids = ProducerIdManager(self.fs, self.log_dir)
        self.txn_coordinator = TransactionCoordinator(
            _TxnTopicLog(self),
            self,
            self.producer_ids,
            self.clock,
            TxnCoordinatorConfig(
                num_partitions=config.transaction_state_log_num_partitions,
                max_timeout_ms=config.transaction_max_timeout_ms,
                id_expiration_ms=config.transactional_id_expiration_ms,
            ),
            coordinator_epoch=0,  # set at start from the durable counter
        )
        self.connections: set[KafkaConnection] = set()
        self.group_coordinator = GroupCoordinator(
            clock=self.clock,
            log=_OffsetsTopicLog(self),
            config=GroupCoordinatorConfig.from_broker_config(config),
            topics=self._topic_size,
            topic_names=lambda: (n for n in self.topic_names() if n not in INTERNAL_TOPICS),
        )
        self._timers: list[asyncio.Task[None]] = []
        self._background_tasks: set[asyncio.Task[None]] = set()
        # Set at start when zookeeper.connect is: the broker is then one of a cluster.
        self.cluster: ClusterMode | None = None

    # ---- configuration ---------------------------------------------------------------

    def log_config(self, overrides: Mapping[str, str]) -> LogConfig:
        """A topic's storage settings: broker defaults, then the topic's own overrides."""
        try:
            topic = self.config.topic_config(overrides)
        except ConfigError as exc:
            raise KafkaError(ErrorCode.invalid_config, str(exc)) from exc
        return LogConfig.from_topic(topic, durable=self.config.onceflow_fsync_on_ack)

    # ---- lifecycle -------------------------------------------------------------------

    @property
    def authorizer(self) -> Authorizer | None:
        """The ACL authorizer, or None when authorizer.class.name is unset (allow all)."""
        return self.security.authorizer

    async def start(self) -> None:
        if not self.config.zookeeper_connect:  # a cluster's are in ZooKeeper
            self.dynamic_config.load()
        self.logs.load()
        self.disk.refresh(force=True)
        if self.config.zookeeper_connect:
            await self._join_cluster()
        else:
            self.cluster_id = self._load_meta_properties()
            self.security.load()
        self.producer_ids.load()
        if self.cluster is None:
            self._create_internal_topics()
        self.txn_coordinator.coordinator_epoch = self._next_coordinator_epoch()
        self.flusher.start()
        if self.cluster is None:
            await self.group_coordinator.load()
            await self.txn_coordinator.load()
        else:
            self.cluster.start_replication()
        self._every(
            self.config.transaction_abort_timed_out_transaction_cleanup_interval_ms / 1000,
            self.txn_coordinator.poll,
        )
        self._every(0.1, self.group_coordinator.poll)
        self._every(self.config.log_retention_check_interval_ms / 1000, self.logs.enforce_retention)
        self._every(60.0, self.logs.checkpoint_recovery_points)
        self._every(1.0, self.disk.refresh)  # logs the disk's state changes without traffic
        self._every(10.0, self.close_retired_files)
        self._every(
            self.config.producer_id_expiration_check_interval_ms / 1000, self.expire_producers
        )
        if self.config.log_cleaner_enable:
            self._every(self.config.log_cleaner_backoff_ms / 1000, self.clean_logs)

    def _create_internal_topics(self) -> None:
        for topic, partitions, segment_bytes in (
            (
                OFFSETS_TOPIC,
                self.config.offsets_topic_num_partitions,
                self.config.offsets_topic_segment_bytes,
            ),
            (
                TXN_TOPIC,
                self.config.transaction_state_log_num_partitions,
                self.config.transaction_state_log_segment_bytes,
            ),
        ):
            if topic not in self.logs.topics:
                configs = {"cleanup.policy": "compact", "segment.bytes": str(segment_bytes)}
                self.logs.create_topic(topic, partitions, configs, internal=True)

    async def _join_cluster(self) -> None:
        """Register in ZooKeeper and take the cluster's id (ClusterStartupError if not)."""
        self.cluster = ClusterMode(self, CLUSTER_INTERNAL_TOPICS)
        # A coordinator serves only the keys of internal partitions this broker leads.
        self.group_coordinator.serve_loaded_only()
        self.txn_coordinator.serve_loaded_only()
        local = self._read_meta_cluster_id()
        self.cluster_id = await self.cluster.start(local)
        if local is None:
            self._write_meta_properties(self.cluster_id)
        self.cluster.replicas.role_listeners.append(self._role_changed)
        # ACLs and credentials live in ZooKeeper, where every broker sees every change.
        store = ZkSecurityStore(self.cluster.link.store, asyncio.get_running_loop())
        self.security.store = store
        self.security.load()
        store.watch(self.security.set_acls, self.security.set_credentials)
        dynamic = ZkDynamicConfigStore(
            self.cluster.link.store, asyncio.get_running_loop(), self.dynamic_config.own_entities
        )
        self.dynamic_config.store = dynamic
        self.dynamic_config.load()
        dynamic.watch(self.dynamic_config.set)

    def _role_changed(self, topic: str, partition: int, role: Role, leader_epoch: int) -> None:
        """Coordinators follow the leadership of their internal partitions. A new
        leadership also ends the followers' fetches parked here, so that they come back at
        once asking for the new partition too (its acks=all writes wait for them)."""
        if role is Role.LEADER:
            self.replica_purgatory.notify_all()
        partition_state = self.cluster.replicas.get(topic, partition) if self.cluster else None
        if partition_state is not None and partition_state.log.has_unflushed:
            # A tail recovered after a crash is flushed before it counts (as leader) or is
            # reported to the leader (as follower) as held.
            self.flusher.mark(partition_state.log)
        if topic == OFFSETS_TOPIC:
            if role is Role.LEADER:
                self._background(self.group_coordinator.load_partition(partition, leader_epoch))
            else:
                self.group_coordinator.unload(partition, leader_epoch)
        elif topic == TXN_TOPIC:
            if role is Role.LEADER:
                self._background(self.txn_coordinator.load_partition(partition, leader_epoch))
            else:
                self.txn_coordinator.unload(partition, leader_epoch)

    def _background(self, work: Awaitable[None]) -> None:
        async def run() -> None:
            try:
                await work
            except Exception:
                log.exception("background task failed")

        task = asyncio.get_running_loop().create_task(run())
        self._background_tasks.add(task)
        task.add_done_callback(self._background_tasks.discard)

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
        if self.cluster is not None:
            await self.cluster.controlled_shutdown()

    async def stop(self) -> None:
        if self.cluster is not None:
            await self.cluster.stop()
        self.group_coordinator.close()  # parked joins and syncs answer NOT_COORDINATOR
        await self.txn_coordinator.close()
        for task in self._timers:
            task.cancel()
        await asyncio.gather(*self._timers, return_exceptions=True)
        await self.flusher.close()
        self.logs.shutdown()

    def _next_coordinator_epoch(self) -> int:
        """The transaction coordinator's epoch grows at every start and is durable, so a
        marker from an earlier incarnation can be told apart (and refused)."""
        path = os.path.join(self.log_dir, COORDINATOR_EPOCH_FILE)
        epoch = 0
        if self.fs.exists(path):
            epoch = int(self.fs.read_file(path).decode().strip() or "0") + 1
        self.fs.write_file_atomic(path, f"{epoch}\n".encode())
        return epoch

    def _load_meta_properties(self) -> str:
        """Kafka's meta.properties: the cluster id is made once and kept."""
        cluster_id = self._read_meta_cluster_id()
        if cluster_id is None:
            cluster_id = uuid.uuid4().hex[:22]
            self._write_meta_properties(cluster_id)
        return cluster_id

    def _read_meta_cluster_id(self) -> str | None:
        path = os.path.join(self.log_dir, META_PROPERTIES)
        if self.fs.exists(path):
            for line in self.fs.read_file(path).decode().splitlines():
                key, _, value = line.partition("=")
                if key.strip() == "cluster.id":
                    return value.strip()
        return None

    def _write_meta_properties(self, cluster_id: str) -> None:
        path = os.path.join(self.log_dir, META_PROPERTIES)
        body = f"version=1\ncluster.id={cluster_id}\nnode.id={self.node_id}\n"
        self.fs.write_file_atomic(path, body.encode())

    def _log_offline(self, plog: PartitionLog) -> None:
        """A coordinator whose log partition went offline stops serving its keys."""
        if plog.topic == TXN_TOPIC:
            self.txn_coordinator.unload(plog.partition)
        elif plog.topic == OFFSETS_TOPIC:
            self.group_coordinator.unload(plog.partition)

    def coordinator_node(
        self, key_type: int, key: str, listener: str | None = None
    ) -> tuple[int, str, int] | None:
        """The broker coordinating a group (0) or transactional id (1), or None when there
        is none right now (COORDINATOR_NOT_AVAILABLE: the client retries).

        On a cluster it is the leader of the key's internal partition; the internal topic is
        created on first use, once enough brokers are alive for its replication factor."""
        if self.cluster is None:
            if not self.coordinator_available(key_type, key):
                return None
            advertised = self.config.advertised_listener_for(
                listener or self.config.inter_broker_listener().name
            )
            return self.node_id, advertised.host, advertised.port
        if key_type == 1:
            topic, partitions = TXN_TOPIC, self.config.transaction_state_log_num_partitions
            factor_key = "transaction.state.log.replication.factor"
            replicas = self.config.transaction_state_log_replication_factor
            min_isr = self.config.transaction_state_log_min_isr
            segment_bytes = self.config.transaction_state_log_segment_bytes
            partition = self.txn_coordinator.partition_for(key)
        else:
            topic, partitions = OFFSETS_TOPIC, self.config.offsets_topic_num_partitions
            factor_key = "offsets.topic.replication.factor"
            replicas = self.config.offsets_topic_replication_factor
            min_isr = self.config.min_insync_replicas
            segment_bytes = self.config.offsets_topic_segment_bytes
            partition = self.group_coordinator.partition_for(key)
        configs = {"cleanup.policy": "compact", "segment.bytes": str(segment_bytes)}
        # The default factor (3) is capped at the brokers there are; one the operator set
        # is waited for, as Kafka does.
        capped = factor_key not in dict(self.config.settings)
        if not self.cluster.ensure_internal_topic(
            topic, partitions, replicas, configs, cap_at_brokers=capped, min_isr=min_isr
        ):
            return None
        leader = self.cluster.cache.leader_of(topic, partition)
        registration = self.cluster.cache.brokers.get(leader)
        if registration is None:
            return None
        return leader, *registration.endpoint(listener or self.config.inter_broker_listener().name)

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
        if self.cluster is not None:
            return bool(self.cluster.cache.replicas_of(topic, partition))
        return self.logs.get(topic, partition) is not None

    def topic_names(self) -> list[str]:
        """Every topic, the clients' first and the internal ones last (as Metadata lists)."""
        if self.cluster is not None:
            names = list(self.cluster.cache.topics)
            internal = CLUSTER_INTERNAL_TOPICS
        else:
            names = list(self.logs.topics)
            internal = frozenset(n for n, t in self.logs.topics.items() if t.internal)
        return sorted(n for n in names if n not in internal) + sorted(
            n for n in names if n in internal
        )

    def topic_partition_count(self, name: str) -> int | None:
        if self.cluster is not None:
            meta = self.cluster.topic(name)
            return None if meta is None else meta.partitions
        info = self.logs.topics.get(name)
        return None if info is None else info.partitions

    def _topic_size(self, name: str) -> tuple[uuid.UUID | None, int] | None:
        """A topic's id and partition count (the consumer protocol's assignments)."""
        count = self.topic_partition_count(name)
        return None if count is None else (self.topic_id(name), count)

    def topic_id(self, name: str) -> uuid.UUID | None:
        """The topic's id (KIP-516), None if there is no such topic. Made at creation and
        kept with the topic (its ZooKeeper assignment on a cluster, the topics file alone),
        so it survives restarts and changes when a topic of the same name is recreated."""
        if self.cluster is not None:
            meta = self.cluster.topic(name)
            text = None if meta is None else meta.topic_id
        else:
            info = self.logs.topics.get(name)
            text = None if info is None else info.topic_id
        return parse_topic_id(text)

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
        if self.cluster is not None:
            meta = self.cluster.topic(name)
            return None if meta is None else dict(meta.configs)
        info = self.logs.topics.get(name)
        return None if info is None else dict(info.configs)

    def nodes(self, listener: str | None = None) -> list[tuple[int, str, int]]:
        """(id, host, port) of every live broker, the addresses being those of `listener`
        (the one a client came in on; default: the inter-broker listener)."""
        name = listener or self.config.inter_broker_listener().name
        if self.cluster is not None:
            return self.cluster.nodes(name)
        advertised = self.config.advertised_listener_for(name)
        return [(self.node_id, advertised.host, advertised.port)]

    def controller_id(self) -> int:
        return self.cluster.controller_id() if self.cluster is not None else self.node_id

    def partition_view(self, topic: str, partition: int) -> PartitionView:
        if self.cluster is not None:
            return self.cluster.partition_view(topic, partition)
        # Alone: Kafka's view of a partition whose only replica is offline (its log
        # failed) is no leader, LEADER_NOT_AVAILABLE, the replica listed as offline.
        node = self.node_id
        plog = self.logs.get(topic, partition)
        if plog is not None and plog.offline is not None:
            return PartitionView(ErrorCode.leader_not_available, -1, 0, (node,), (), (node,))
        return PartitionView(ErrorCode.none, node, 0, (node,), (node,), ())

    def leader_log(self, topic: str, partition: int) -> PartitionLog:
        """The log a client reads or writes: the local leader's (NOT_LEADER_OR_FOLLOWER if
        another broker leads, UNKNOWN_TOPIC_OR_PARTITION if there is no such partition)."""
        if self.cluster is not None:
            return self.cluster.leader_log(topic, partition)
        plog = self.logs.get(topic, partition)
        if plog is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"no {topic}-{partition}")
        return plog

    def replicated(self, plog: PartitionLog) -> Partition | None:
        """The partition's replication state on a cluster; None when the broker is alone."""
        if self.cluster is None:
            return None
        return self.cluster.replicas.get(plog.topic, plog.partition)

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
        if self.cluster is not None:
            meta = await self.cluster.create_topic(name, partitions, rf, configs or {}, assignment)
            factor = len(next(iter(meta.assignment.values())))
            return CreatedTopic(uuid.UUID(meta.topic_id), meta.partitions, factor)
        if rf != 1 or (
            assignment is not None and any(r != [self.node_id] for r in assignment.values())
        ):
            raise KafkaError(
                ErrorCode.invalid_replication_factor,
                f"replication factor {rf} is larger than the 1 available broker",
            )
        count = partitions if assignment is None else len(assignment)
        info = self.logs.create_topic(name, count, configs)
        return CreatedTopic(uuid.UUID(info.topic_id), count, 1)

    async def create_partitions(
        self, name: str, total: int, assignments: list[list[int]] | None, validate_only: bool
    ) -> None:
        if name in INTERNAL_TOPICS:
            raise KafkaError(
                ErrorCode.invalid_request, f"the partitions of internal topic '{name}' are fixed"
            )
        if self.cluster is not None:
            await self.cluster.create_partitions(name, total, assignments, validate_only)
            return
        count = self.topic_partition_count(name)
        if count is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"no topic '{name}'")
        if total <= count:
            raise KafkaError(
                ErrorCode.invalid_partitions,
                partition_count_message(count, total),
            )
        if assignments is not None and any(r != [self.node_id] for r in assignments):
            raise KafkaError(
                ErrorCode.invalid_replica_assignment, f"only broker {self.node_id} exists"
            )
        if not validate_only:
            self.logs.add_partitions(name, total)

    async def alter_topic_configs(
        self,
        name: str,
        change: Callable[[dict[str, str]], dict[str, str]],
        validate_only: bool,
    ) -> None:
        """Replace a topic's overrides with `change(current)`, checked as Kafka checks them:
        INVALID_CONFIG before UNKNOWN_TOPIC_OR_PARTITION. On a cluster the new overrides go
        to ZooKeeper and every broker applies them from its watch."""
        if self.cluster is not None:
            await self.cluster.alter_topic_configs(name, change, validate_only)
            return
        current = self.topic_configs(name)
        configs = change(current or {})
        self.log_config(configs)
        if current is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"no topic '{name}'")
        if not validate_only:
            self.logs.update_topic_configs(name, configs)

    def _check_auto_create(self, name: str) -> None:
        """Kafka's auto.create.topics.enable, never for internal topics; logs the creation."""
        if not self.config.auto_create_topics_enable or name in INTERNAL_TOPICS:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"no topic '{name}'")
        log.info("auto-creating topic %s with %d partitions", name, self.config.num_partitions)

    async def auto_create_topic(self, name: str) -> None:
        self._check_auto_create(name)
        await self.create_topic(name, self.config.num_partitions)

    async def delete_topic(self, name: str) -> None:
        if name in INTERNAL_TOPICS:
            raise KafkaError(ErrorCode.invalid_topic_exception, f"'{name}' is internal")
        if self.cluster is not None:
            await self.cluster.delete_topic(name)
            return
        await self.flusher.barrier()  # no fsync may run on files about to be closed
        self.logs.delete_topic(name)

    def log_for_produce(self, topic: str, partition: int) -> PartitionLog:
        if self.cluster is not None:
            return self.cluster.leader_log(topic, partition)  # no auto-creation, as Kafka
        plog = self.logs.get(topic, partition)
        if plog is not None:
            return plog
        if topic not in self.logs.topics:
            validate_topic_name(topic)
            self._check_auto_create(topic)
            self.logs.create_topic(topic, self.config.num_partitions)
            plog = self.logs.get(topic, partition)
        if plog is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"no {topic}-{partition}")
        return plog

    # ---- appends and visibility ------------------------------------------------------

    def appended(self, plog: PartitionLog) -> None:
        """After any append: schedule the group commit; wake fetches if already visible."""
        self.flusher.mark(plog)
        if self.cluster is not None:
            self.replica_purgatory.notify((plog.topic, plog.partition))
            partition = self.cluster.replicas.get(plog.topic, plog.partition)
            if partition is not None and partition.maybe_advance_high_watermark():
                self.purgatory.notify((plog.topic, plog.partition))
        elif not plog.config.durable:
            self.purgatory.notify((plog.topic, plog.partition))

    def durable(self, plog: PartitionLog, offset: int) -> asyncio.Future[None]:
        return self.flusher.durable(plog, offset)

    def _flushed(self, plog: PartitionLog) -> None:
        if self.cluster is not None:
            partition = self.cluster.replicas.get(plog.topic, plog.partition)
            if partition is None or not partition.maybe_advance_high_watermark():
                return
        self.purgatory.notify((plog.topic, plog.partition))

    def follower_fetched(
        self, plog: PartitionLog, replica: int, fetch_offset: int, log_start_offset: int = -1
    ) -> None:
        """A follower's fetch: it holds what is below fetch_offset (durably, in durable
        mode) and its log starts at log_start_offset; the high watermark may move and wake
        consumers and acks=all producers, the low watermark complete DeleteRecords."""
        if self.cluster is None:
            return
        partition = self.cluster.replicas.get(plog.topic, plog.partition)
        if partition is not None and self.cluster.replicas.follower_fetched(
            partition, replica, fetch_offset, log_start_offset if log_start_offset >= 0 else None
        ):
            self.purgatory.notify((plog.topic, plog.partition))

    def check_replicas(self, plog: PartitionLog, acks: int) -> None:
        """acks=all on a cluster: refused before the append when the ISR is too small."""
        if acks == -1 and self.cluster is not None:
            partition = self.cluster.replicas.get(plog.topic, plog.partition)
            if partition is not None:
                partition.check_enough_replicas(partition.min_insync_replicas)

    def acknowledgement(
        self, plog: PartitionLog, last_offset: int, acks: int, timeout_ms: int
    ) -> asyncio.Future[None] | None:
        """What a produce response waits for: nothing (acks=0/1), the fsync of this
        replica (acks=all, alone) or the high watermark, which in durable mode means the
        disk of every in-sync replica (acks=all, on a cluster)."""
        if acks != -1:
            return None
        partition = self.replicated(plog)
        if partition is None:
            return self.flusher.durable(plog, last_offset) if plog.config.durable else None
        return replication_answer(partition, last_offset, timeout_ms)

    def last_stable_offset(self, plog: PartitionLog) -> int:
        return plog.last_stable_offset

    async def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: frozenset[TopicPartition],
    ) -> None:
        """The MarkerWriter of the transaction coordinator: markers of partitions led here
        are appended directly, the others go to their leaders as WriteTxnMarkers; every
        marker is durable (replicated, on a cluster) before this returns, else it raises
        and the coordinator retries."""
        written: list[tuple[PartitionLog, int]] = []
        remote: dict[int, list[tuple[str, int]]] = {}
        for topic, partition in sorted(partitions):
            if self.cluster is not None:
                if not self.has_partition(topic, partition):
                    continue  # the topic was deleted: nothing left to mark
                leader = self.cluster.cache.leader_of(topic, partition)
                if leader != self.node_id:
                    remote.setdefault(leader, []).append((topic, partition))
                    continue
                plog = self.leader_log(topic, partition)  # else raise: the coordinator retries
            else:
                found = self.logs.get(topic, partition)
                if found is None:
                    continue  # the topic was deleted: nothing left to mark
                plog = found
            try:
                result = plog.append_marker(producer_id, producer_epoch, coordinator_epoch, commit)
            except (OutOfSpace, LogOffline):
                raise  # not written: the coordinator retries until it is
            except KafkaError as exc:
                # The partition already moved past this transaction (newer epoch or
                # coordinator): there is nothing left for this marker to end.
                log.warning("marker for %s-%d skipped: %s", topic, partition, exc)
                continue
            self.appended(plog)
            written.append((plog, result.last_offset))
        if remote:
            assert self.cluster is not None
            if written:
                failpoint("txn.between_markers")
            peers = self.cluster.peers
            await asyncio.gather(
                *(
                    peers.write(
                        leader, producer_id, producer_epoch, coordinator_epoch, commit, targets
                    )
                    for leader, targets in remote.items()
                )
            )
        for plog, offset in written:
            wait = self.acknowledgement(plog, offset, -1, INTERNAL_WRITE_TIMEOUT_MS)
            if wait is not None:
                await wait
            if plog.topic == OFFSETS_TOPIC:
                self.group_coordinator.complete_txn(producer_id, commit, plog.partition)

    def verify_transactional(
        self,
        transactional_id: str | None,
        header: BatchHeader,
        topic: str,
        partition: int,
        verified: RemoteVerification | None = None,
        support: TxnSupport = TxnSupport.DEFAULT_ERROR,
    ) -> None:
        """KIP-890: a transactional write is appended only to a partition of its producer's
        ongoing transaction. Asked of the local coordinator at once; a remote one is asked
        by the caller (RemoteVerification raised here), which then calls again with its
        answer, `verified`. A refusal is raised with the code the client's request version
        (`support`) understands. A transaction version 2 write (`support` ADD_PARTITION)
        adds its partition to the transaction the same way (the caller asks the
        coordinator, here or elsewhere, to add it), whatever the switch says."""
        add = support is TxnSupport.ADD_PARTITION and transactional_id is not None
        if not add and not self.config.transaction_partition_verification_enable:
            return  # Kafka's switch; off only to reproduce Kafka's old hanging transactions
        elsewhere = self._coordinator_elsewhere(transactional_id)
        if add or elsewhere:
            assert transactional_id is not None
            self._check_answer(transactional_id, header, topic, partition, verified, support, add)
            if elsewhere:
                return  # the remote coordinator's answer stands
        try:
            self.txn_coordinator.verify(
                transactional_id, header.producer_id, header.producer_epoch, (topic, partition)
            )
        except KafkaError as exc:
            raise KafkaError(write_refusal(exc.code, support), exc.message) from exc

    def _coordinator_elsewhere(self, transactional_id: str | None) -> bool:
        return (
            self.cluster is not None
            and transactional_id is not None
            and self.txn_coordinator.coordinator_error(transactional_id)
            is ErrorCode.not_coordinator
        )

    def _check_answer(
        self,
        transactional_id: str,
        header: BatchHeader,
        topic: str,
        partition: int,
        verified: RemoteVerification | None,
        support: TxnSupport,
        add: bool,
    ) -> None:
        """Before the coordinator was asked (`verified` None): raise RemoteVerification
        unless the producer's transaction is already open here at this epoch (so still
        ongoing, verified or added before). With its answer: raise its refusal, or
        NOT_ENOUGH_REPLICAS when the answer may be stale (Kafka's VerificationGuard): a
        marker at the write's epoch landed here while the coordinator was asked.

        Only a verification (transaction version 0) or a remote add at an epoch this
        partition has already seen is guarded. A local add is verified again in the same
        step as the append, and a transaction version 2 end bumps the epoch, so its markers
        are above the write's and the producer state refuses the write after them; the
        previous transaction's markers, which the coordinator waits for before it adds,
        must not make the next transaction's first write retry."""
        plog = self.leader_log(topic, partition)
        entry = plog.producer_state.producers.get(header.producer_id)
        epoch_seen = entry is not None and entry.epoch == header.producer_epoch
        markers = plog.markers_written.get(header.producer_id, 0)
        if verified is None:
            if epoch_seen and entry is not None and entry.txn_first_offset != NO_TXN:
                return
            guarded = not add or (epoch_seen and self._coordinator_elsewhere(transactional_id))
            raise RemoteVerification(
                transactional_id,
                header.producer_id,
                header.producer_epoch,
                topic,
                partition,
                markers if guarded else None,
                add=add,
            )
        if verified.markers_before is not None and markers != verified.markers_before:
            raise KafkaError(
                ErrorCode.not_enough_replicas,
                f"{plog.name}: a transaction ended while the coordinator was asked; retry",
            )
        if verified.error is not ErrorCode.none:
            raise KafkaError(
                write_refusal(verified.error, support),
                f"{plog.name}: the transaction coordinator refused the write "
                f"({verified.error.name.lower()})",
            )

    async def ask_coordinator(self, need: RemoteVerification) -> RemoteVerification:
        """The answer for one write; see `ask_coordinator_all`."""
        (answer,) = await self.ask_coordinator_all([need])
        return answer

    async def ask_coordinator_all(
        self, needs: list[RemoteVerification]
    ) -> list[RemoteVerification]:
        """Ask the transactional ids' coordinators, once per producer and kind, whether the
        partitions are in the producer's ongoing transaction (KIP-890), or for transaction
        version 2 writes (`add`) to add them: one transaction-log record (and one
        AddPartitionsToTxn when the coordinator is elsewhere) for all the first writes of a
        Produce request, as Kafka's AddPartitionsToTxnManager batches them. The answers, in
        the order of `needs`, go back to verify_transactional."""
        groups: dict[tuple[str, int, int, bool], list[int]] = {}
        for i, need in enumerate(needs):
            key = (need.transactional_id, need.producer_id, need.producer_epoch, need.add)
            groups.setdefault(key, []).append(i)
        answers = list(needs)
        for key, indices in groups.items():
            errors = await self._ask(*key, [(needs[i].topic, needs[i].partition) for i in indices])
            for i in indices:
                need = needs[i]
                answers[i] = dataclasses.replace(need, error=errors[(need.topic, need.partition)])
        return answers

    async def _ask(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        add: bool,
        partitions: list[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        if add and not self._coordinator_elsewhere(transactional_id):
            error = await self.txn_coordinator.add_partitions(
                transactional_id, producer_id, producer_epoch, partitions, client_version=2
            )
            return dict.fromkeys(partitions, error)
        assert self.cluster is not None
        txn_partition = self.txn_coordinator.partition_for(transactional_id)
        coordinator = self.cluster.cache.leader_of(TXN_TOPIC, txn_partition)
        try:
            return await self.cluster.peers.verify(
                coordinator, transactional_id, producer_id, producer_epoch, partitions, add=add
            )
        except KafkaError as exc:
            return dict.fromkeys(partitions, exc.code)

    async def append_internal(
        self,
        topic: str,
        partition: int,
        batch: bytes,
        transactional_id: str | None = None,
        support: TxnSupport = TxnSupport.DEFAULT_ERROR,
    ) -> int:
        """Append a batch the broker built itself; return once it is durable.

        A transactional batch (a TxnOffsetCommit) passes the same KIP-890 check as a
        produced one: its partition must be in the producer's ongoing transaction.
        """
        plog = self.leader_log(topic, partition)
        # Built by the broker itself: only whole and intact are checked, not the client
        # rules (a TxnOffsetCommit batch has a producer id but no sequence, as in Kafka).
        scanned, end = scan_batches(batch)
        invariant(end == len(batch) and bool(scanned), "an internal batch is malformed")
        headers = [b.header for b in scanned]
        if headers[0].is_transactional:
            try:
                self.verify_transactional(
                    transactional_id, headers[0], topic, partition, support=support
                )
            except RemoteVerification as need:
                answer = await self.ask_coordinator(need)
                self.verify_transactional(
                    transactional_id, headers[0], topic, partition, answer, support
                )
        self.check_replicas(plog, -1)
        result = plog.append_batches(batch, headers, from_client=False)
        self.appended(plog)
        wait = self.acknowledgement(plog, result.last_offset, -1, INTERNAL_WRITE_TIMEOUT_MS)
        if wait is not None:
            await wait
        return result.first_offset

    def read_internal(self, topic: str, partition: int) -> Iterator[LogEntry]:
        """Every record of an internal partition, markers included, oldest first."""
        plog = self.logs.get(topic, partition)
        if plog is None:
            return
        for segment in plog.segments:
            for location in segment.read_headers():
                yield from decode_entries(
                    segment.read_bytes(location.position, location.header.size)
                )


@dataclasses.dataclass(frozen=True)
class RemoteVerification(Exception):
    """A transactional write whose coordinator is another broker: the caller asks it
    (`Broker.ask_coordinator`) and appends again with the answer."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    topic: str
    partition: int
    markers_before: int | None  # the producer's markers here when asked; None: unguarded
    add: bool = False  # transaction version 2: add the partition, not only verify it
    error: ErrorCode = ErrorCode.none


class _OffsetsTopicLog:
    """The OffsetsLog the group coordinator persists through."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    def append(
        self,
        partition: int,
        batch: bytes,
        transactional_id: str | None = None,
        support: TxnSupport = TxnSupport.DEFAULT_ERROR,
    ) -> Awaitable[int]:
        return self._broker.append_internal(
            OFFSETS_TOPIC, partition, batch, transactional_id, support
        )

    def read(self, partition: int) -> Iterable[LogEntry]:
        return self._broker.read_internal(OFFSETS_TOPIC, partition)


class _TxnTopicLog:
    """The TxnLog the transaction coordinator persists through."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    def append(self, partition: int, batch: bytes) -> Awaitable[int]:
        return self._broker.append_internal(TXN_TOPIC, partition, batch)

    def read(self, partition: int) -> Iterable[tuple[bytes | None, bytes | None]]:
        for entry in self._broker.read_internal(TXN_TOPIC, partition):
            if entry.control is None:
                yield entry.key, entry.value


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
