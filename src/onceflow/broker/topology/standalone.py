"""A cluster of one: this broker leads every partition of its own logs.

Topics live in the data dir's topics file, the cluster id in `meta.properties`, ACLs,
credentials and dynamic configs in files of the data dir. Every internal partition is
led from the start, at a leader epoch that grows at every start (kept in the data dir), so
the coordinators load as a cluster's do and their markers tell this incarnation from the
last one.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from onceflow.broker.topics import (
    INTERNAL_TOPICS,
    OFFSETS_TOPIC,
    SHARE_STATE_TOPIC,
    TXN_TOPIC,
    CreatedTopic,
    partition_count_message,
    validate_topic_name,
)
from onceflow.broker.topology.base import (
    NO_LEADER,
    UNKNOWN_PARTITION,
    ElectionResult,
    PartitionView,
    ReplicationSummary,
    RoleListener,
    TopicInfo,
)
from onceflow.cluster.reassignment import check_target
from onceflow.config import BrokerConfig
from onceflow.coordinator.transaction.marker import TxnMarker
from onceflow.coordinator.transaction.metadata import TopicPartition
from onceflow.errors import ErrorCode, KafkaError
from onceflow.replication.partition import Partition, Role
from onceflow.storage.fs import FileSystem
from onceflow.storage.log_manager import LogManager
from onceflow.storage.meta_properties import read_cluster_id, write_meta_properties
from onceflow.storage.partition_log import PartitionLog

log = logging.getLogger(__name__)

#: The leader epoch of the internal partitions, one more at every start.
LEADER_EPOCH_FILE = "transaction-coordinator-epoch"


class NoPeers:
    """A cluster of one has no other broker: a request to one fails as to a broker gone."""

    async def write(
        self, broker: int, coordinator_epoch: int, markers: Sequence[TxnMarker]
    ) -> None:
        raise KafkaError(ErrorCode.not_leader_or_follower, f"broker {broker} is not alive")

    async def verify(
        self,
        broker: int,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[TopicPartition],
        *,
        add: bool,
    ) -> dict[TopicPartition, ErrorCode]:
        raise KafkaError(ErrorCode.not_coordinator, f"broker {broker} is not alive")

    async def share_state(self, broker: int, api_key: int, version: int, request: Any) -> Any:
        raise KafkaError(ErrorCode.not_coordinator, f"broker {broker} is not alive")

    def close(self) -> None:
        pass


class StandaloneTopology:
    def __init__(
        self,
        node_id: int,
        config: Callable[[], BrokerConfig],
        fs: FileSystem,
        log_dir: str,
        logs: LogManager,
        *,
        load_local_configs: Callable[[], None],
        load_local_security: Callable[[], None],
        validate_configs: Callable[[Mapping[str, str]], object],
        barrier: Callable[[], Awaitable[None]],
    ) -> None:
        self.node_id = node_id
        self.peers = NoPeers()
        self._config = config
        self._fs = fs
        self._log_dir = log_dir
        self._logs = logs
        self._load_local_configs = load_local_configs
        self._load_local_security = load_local_security
        self._validate_configs = validate_configs
        self._barrier = barrier

    # ---- lifecycle

    def open(self) -> None:
        self._load_local_configs()  # before the logs load: they derive their configs

    async def join(self) -> str:
        cluster_id = read_cluster_id(self._fs, self._log_dir)
        if cluster_id is None:
            cluster_id = uuid.uuid4().hex[:22]
            write_meta_properties(self._fs, self._log_dir, cluster_id, self.node_id)
        self._load_local_security()
        return cluster_id

    async def start_serving(self, on_role: RoleListener) -> None:
        config = self._config()
        epoch = self._next_leader_epoch()
        for topic, partitions, segment_bytes in (
            (
                OFFSETS_TOPIC,
                config.offsets_topic_num_partitions,
                config.offsets_topic_segment_bytes,
            ),
            (
                TXN_TOPIC,
                config.transaction_state_log_num_partitions,
                config.transaction_state_log_segment_bytes,
            ),
            (
                SHARE_STATE_TOPIC,
                config.share_coordinator_state_topic_num_partitions,
                config.share_coordinator_state_topic_segment_bytes,
            ),
        ):
            if topic not in self._logs.topics:
                configs = {"cleanup.policy": "compact", "segment.bytes": str(segment_bytes)}
                self._logs.create_topic(topic, partitions, configs, internal=True)
            for partition in range(self._logs.topics[topic].partitions):
                taken = on_role(topic, partition, Role.LEADER, epoch)
                if taken is not None:
                    await taken  # loaded before the listener opens, as a broker alone was

    def _next_leader_epoch(self) -> int:
        path = os.path.join(self._log_dir, LEADER_EPOCH_FILE)
        epoch = 0
        if self._fs.exists(path):
            epoch = int(self._fs.read_file(path).decode().strip() or "0") + 1
        self._fs.write_file_atomic(path, f"{epoch}\n".encode())
        return epoch

    async def controlled_shutdown(self) -> None:
        pass  # nobody to hand leadership to

    async def stop(self) -> None:
        pass

    # ---- metadata

    def nodes(self, listener: str) -> list[tuple[int, str, int]]:
        advertised = self._config().advertised_listener_for(listener)
        return [(self.node_id, advertised.host, advertised.port)]

    def racks(self) -> dict[int, str | None]:
        return {self.node_id: self._config().broker_rack or None}

    def endpoint(self, node: int, listener: str) -> tuple[str, int] | None:
        if node != self.node_id:
            return None
        advertised = self._config().advertised_listener_for(listener)
        return advertised.host, advertised.port

    def controller_id(self) -> int:
        return self.node_id

    def topic_names(self) -> list[str]:
        topics = self._logs.topics
        return sorted(n for n, t in topics.items() if not t.internal) + sorted(
            n for n, t in topics.items() if t.internal
        )

    def topic(self, name: str) -> TopicInfo | None:
        info = self._logs.topics.get(name)
        if info is None:
            return None
        return TopicInfo(name, info.topic_id, info.partitions, dict(info.configs), info.internal)

    def has_partition(self, topic: str, partition: int) -> bool:
        return self._logs.get(topic, partition) is not None

    def partition_view(self, topic: str, partition: int) -> PartitionView:
        # Kafka's view of a partition whose only replica is offline (its log failed): no
        # leader, LEADER_NOT_AVAILABLE, the replica listed as offline.
        node = self.node_id
        plog = self._logs.get(topic, partition)
        if plog is not None and plog.offline is not None:
            return PartitionView(ErrorCode.leader_not_available, NO_LEADER, 0, (node,), (), (node,))
        return PartitionView(ErrorCode.none, node, 0, (node,), (node,), ())

    def leader_log(self, topic: str, partition: int) -> PartitionLog:
        plog = self._logs.get(topic, partition)
        if plog is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"no {topic}-{partition}")
        return plog

    @property
    def produce_creates_topics(self) -> bool:
        return self._config().auto_create_topics_enable

    def log_for_produce(self, topic: str, partition: int) -> PartitionLog:
        plog = self._logs.get(topic, partition)
        if plog is not None:
            return plog
        if topic not in self._logs.topics:
            validate_topic_name(topic)
            config = self._config()
            if not config.auto_create_topics_enable or topic in INTERNAL_TOPICS:
                raise KafkaError(ErrorCode.unknown_topic_or_partition, f"no topic '{topic}'")
            log.info("auto-creating topic %s with %d partitions", topic, config.num_partitions)
            self._logs.create_topic(topic, config.num_partitions)
        return self.leader_log(topic, partition)

    def replica(self, plog: PartitionLog) -> Partition | None:
        return None

    def alive_brokers(self) -> frozenset[int]:
        return frozenset({self.node_id})

    def leads(self, plog: PartitionLog) -> bool:
        return True

    def replication_summary(self) -> ReplicationSummary:
        offline = frozenset((p.topic, p.partition) for p in self._logs if p.offline is not None)
        return ReplicationSummary(0, offline, 0, 0, active_controller=True)

    # ---- topics

    async def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        assignment: dict[int, list[int]] | None,
    ) -> CreatedTopic:
        if replication_factor != 1 or (
            assignment is not None and any(r != [self.node_id] for r in assignment.values())
        ):
            raise KafkaError(
                ErrorCode.invalid_replication_factor,
                f"replication factor {replication_factor} is larger than the 1 available broker",
            )
        count = partitions if assignment is None else len(assignment)
        info = self._logs.create_topic(name, count, configs)
        return CreatedTopic(uuid.UUID(info.topic_id), count, 1)

    async def create_partitions(
        self, name: str, total: int, assignments: list[list[int]] | None, validate_only: bool
    ) -> None:
        info = self._logs.topics.get(name)
        if info is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"no topic '{name}'")
        if total <= info.partitions:
            raise KafkaError(
                ErrorCode.invalid_partitions, partition_count_message(info.partitions, total)
            )
        if assignments is not None and any(r != [self.node_id] for r in assignments):
            raise KafkaError(
                ErrorCode.invalid_replica_assignment, f"only broker {self.node_id} exists"
            )
        if not validate_only:
            self._logs.add_partitions(name, total)

    async def alter_topic_configs(
        self, name: str, change: Callable[[dict[str, str]], dict[str, str]], validate_only: bool
    ) -> None:
        info = self._logs.topics.get(name)
        configs = change(dict(info.configs) if info is not None else {})
        self._validate_configs(configs)  # INVALID_CONFIG before UNKNOWN_TOPIC_OR_PARTITION
        if info is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"no topic '{name}'")
        if not validate_only:
            self._logs.update_topic_configs(name, configs)

    async def elect_leaders(
        self, election_type: int, partitions: list[tuple[str, int]] | None, timeout_ms: int
    ) -> dict[tuple[str, int], ElectionResult]:
        """Alone, this broker is every partition's only and preferred replica."""
        if partitions is None:
            partitions = [(p.topic, p.partition) for p in self._logs]
        return {
            (t, p): (ErrorCode.election_not_needed, None)
            if self.has_partition(t, p)
            else UNKNOWN_PARTITION
            for t, p in partitions
        }

    async def delete_topic(self, name: str) -> None:
        await self._barrier()  # no fsync may run on files about to be closed
        self._logs.delete_topic(name)

    async def alter_partition_reassignments(
        self,
        requested: dict[tuple[str, int], tuple[int, ...] | None],
        allow_rf_change: bool,
    ) -> dict[tuple[str, int], ElectionResult]:
        """Alone, every partition's one replica is this broker: only [this broker] is a
        valid target (and changes nothing), and nothing is ever being reassigned."""
        results: dict[tuple[str, int], ElectionResult] = {}
        for (topic, partition), target in requested.items():
            if not self.has_partition(topic, partition):
                results[(topic, partition)] = UNKNOWN_PARTITION
            elif target is None:
                results[(topic, partition)] = (ErrorCode.no_reassignment_in_progress, None)
            else:
                added = [r for r in target if r != self.node_id]
                refusal = check_target(target, added, [self.node_id])
                results[(topic, partition)] = refusal or (ErrorCode.none, None)
        return results

    def list_partition_reassignments(
        self, partitions: list[tuple[str, int]] | None
    ) -> dict[tuple[str, int], tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
        return {}

    def ensure_internal_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        *,
        cap_at_brokers: bool,
        min_isr: int,
    ) -> bool:
        return name in self._logs.topics  # made at start

    async def wait_for_leader(self, topic: str, partition: int, timeout_s: float) -> bool:
        return self.partition_view(topic, partition).leader != NO_LEADER  # nothing to elect

    def refresh_configs(self) -> None:
        pass  # the logs re-derive theirs; there are no replicas

    # ---- appends

    def appended(self, plog: PartitionLog) -> bool:
        return not plog.config.durable  # durable: visible once flushed

    def flushed(self, plog: PartitionLog) -> bool:
        return True

    def follower_fetched(
        self, plog: PartitionLog, replica: int, fetch_offset: int, log_start_offset: int | None
    ) -> bool:
        return False  # no followers: a fetch with a replica id is refused before

    def check_replicas(self, plog: PartitionLog, acks: int) -> None:
        pass  # the one replica is this one

    def acknowledgement(
        self,
        plog: PartitionLog,
        last_offset: int,
        acks: int,
        timeout_ms: int,
        durable: Callable[[PartitionLog, int], asyncio.Future[None]],
    ) -> asyncio.Future[None] | None:
        if acks != -1 or not plog.config.durable:
            return None
        return durable(plog, last_offset)
