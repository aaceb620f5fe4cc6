"""What request handlers (and the connection serving them) use of the broker.

A Protocol, so that handlers depend on this list and not on the `Broker` that wires the
parts: the broker package then has no import circle, and a handler test can hand in
exactly what it needs.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Mapping, MutableSet
from typing import TYPE_CHECKING, Any, Protocol

from onceflow.broker.dynamic_config import DynamicBrokerConfig
from onceflow.broker.purgatory import FetchPurgatory
from onceflow.broker.security import SecurityState
from onceflow.broker.topics import CreatedTopic
from onceflow.broker.topology.base import PartitionView, Topology
from onceflow.broker.verification import RemoteVerification
from onceflow.clock import Clock
from onceflow.config import BrokerConfig
from onceflow.coordinator.group.coordinator import GroupCoordinator
from onceflow.coordinator.transaction.coordinator import TransactionCoordinator
from onceflow.coordinator.transaction.producer_ids import ProducerIdManager
from onceflow.protocol.txn_support import TxnSupport
from onceflow.records.batch import BatchHeader
from onceflow.replication.partition import Partition
from onceflow.storage.disk_space import DiskSpaceGuard
from onceflow.storage.log_manager import LogManager
from onceflow.storage.partition_log import LogConfig, PartitionLog

if TYPE_CHECKING:
    from onceflow.broker.metrics import BrokerMetrics
    from onceflow.security.authorizer import Authorizer


class BrokerServices(Protocol):
    """The broker as its handlers see it (attributes read-only)."""

    @property
    def config(self) -> BrokerConfig: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def node_id(self) -> int: ...
    @property
    def cluster_id(self) -> str: ...
    @property
    def log_dir(self) -> str: ...
    @property
    def max_request_bytes(self) -> int: ...
    @property
    def topology(self) -> Topology: ...
    @property
    def logs(self) -> LogManager: ...
    @property
    def disk(self) -> DiskSpaceGuard: ...
    @property
    def purgatory(self) -> FetchPurgatory: ...
    @property
    def replica_purgatory(self) -> FetchPurgatory: ...
    @property
    def security(self) -> SecurityState: ...
    @property
    def authorizer(self) -> Authorizer | None: ...
    @property
    def dynamic_config(self) -> DynamicBrokerConfig: ...
    @property
    def producer_ids(self) -> ProducerIdManager: ...
    @property
    def txn_coordinator(self) -> TransactionCoordinator: ...
    @property
    def group_coordinator(self) -> GroupCoordinator: ...
    @property
    def metrics(self) -> BrokerMetrics | None: ...
    @property
    def connections(self) -> MutableSet[Any]: ...

    def acknowledgement(
        self, plog: PartitionLog, last_offset: int, acks: int, timeout_ms: int
    ) -> asyncio.Future[None] | None: ...

    async def alter_topic_configs(
        self,
        name: str,
        change: Callable[[dict[str, str]], dict[str, str]],
        validate_only: bool,
    ) -> None: ...

    def appended(self, plog: PartitionLog) -> None: ...

    async def ask_coordinator_all(
        self, needs: list[RemoteVerification]
    ) -> list[RemoteVerification]: ...

    async def auto_create_topic(self, name: str) -> None: ...

    def check_replicas(self, plog: PartitionLog, acks: int) -> None: ...

    def controller_id(self) -> int: ...

    def coordinator_node(
        self, key_type: int, key: str, listener: str | None = None
    ) -> tuple[int, str, int] | None: ...

    def coordinator_available(self, key_type: int, key: str) -> bool: ...

    async def create_partitions(
        self, name: str, total: int, assignments: list[list[int]] | None, validate_only: bool
    ) -> None: ...

    async def create_topic(
        self,
        name: str,
        partitions: int,
        configs: Mapping[str, str] | None = None,
        replication_factor: int = -1,
        assignment: dict[int, list[int]] | None = None,
        validate_only: bool = False,
    ) -> CreatedTopic: ...

    async def delete_topic(self, name: str) -> None: ...

    def follower_fetched(
        self, plog: PartitionLog, replica: int, fetch_offset: int, log_start_offset: int = -1
    ) -> None: ...

    def has_partition(self, topic: str, partition: int) -> bool: ...

    def last_stable_offset(self, plog: PartitionLog) -> int: ...

    def leader_log(self, topic: str, partition: int) -> PartitionLog: ...

    def log_config(self, overrides: Mapping[str, str]) -> LogConfig: ...

    def log_for_produce(self, topic: str, partition: int) -> PartitionLog: ...

    def nodes(self, listener: str | None = None) -> list[tuple[int, str, int]]: ...

    def partition_view(self, topic: str, partition: int) -> PartitionView: ...

    def replicated(self, plog: PartitionLog) -> Partition | None: ...

    def topic_configs(self, name: str) -> dict[str, str] | None: ...

    def topic_id(self, name: str) -> uuid.UUID | None: ...

    def topic_name_by_id(self, topic_id: uuid.UUID) -> str | None: ...

    def topic_names(self) -> list[str]: ...

    def topic_partition_count(self, name: str) -> int | None: ...

    def topics_by_id(self) -> dict[uuid.UUID, str]: ...

    def verify_transactional(
        self,
        transactional_id: str | None,
        header: BatchHeader,
        topic: str,
        partition: int,
        verified: RemoteVerification | None = None,
        support: TxnSupport = TxnSupport.DEFAULT_ERROR,
    ) -> None: ...
