"""The topology seam: what the broker asks of its surroundings (Kafka's MetadataCache role).

A single broker is a cluster of one. Handlers and the broker's own wiring ask one
`Topology` who the brokers are, who leads a partition, which log to read or write, how to
create a topic and what an acknowledgement waits for. `StandaloneTopology` answers from
this broker's own logs; `ZkTopology` from ZooKeeper, its replicas and its peers. Nothing
else asks whether the broker is clustered: the wiring chooses the implementation once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from onceflow.broker.topics import CreatedTopic
from onceflow.coordinator.transaction.marker import TxnMarker
from onceflow.coordinator.transaction.metadata import TopicPartition
from onceflow.errors import ErrorCode
from onceflow.replication.partition import Partition, Role
from onceflow.storage.partition_log import PartitionLog

#: No broker leads the partition (Kafka's -1).
NO_LEADER = -1

#: Told (topic, partition, role, leader epoch) when this broker's role for a partition
#: changes. What it returns (a coordinator's load, say) runs in the background on a
#: cluster; a cluster of one, which takes every partition at start, waits for it.
RoleListener = Callable[[str, int, Role, int], Awaitable[None] | None]

#: One partition's answer to ElectLeaders: NONE (elected) or Kafka's error, and a message.
ElectionResult = tuple[ErrorCode, str | None]
UNKNOWN_PARTITION: ElectionResult = (
    ErrorCode.unknown_topic_or_partition,
    "The partition does not exist.",
)


@dataclass(frozen=True, slots=True)
class PartitionView:
    """A partition as Metadata shows it."""

    error: ErrorCode
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """What the topology knows of a topic: its id (KIP-516, "" if it has none), its
    partition count and its config overrides."""

    name: str
    topic_id: str
    partitions: int
    configs: Mapping[str, str]
    internal: bool


@dataclass(frozen=True, slots=True)
class ReplicationSummary:
    """The replication figures the metrics show (all zero, and controller 1, alone)."""

    under_replicated: int
    offline: frozenset[tuple[str, int]]
    isr_shrinks: int
    isr_expands: int
    active_controller: bool
    reassigning: int = 0  # partitions led here that are being reassigned
    throttled_leader_bytes: int = 0  # bytes sent or copied under the replication throttles
    throttled_follower_bytes: int = 0


class Peers(Protocol):
    """Requests to the other brokers: transaction markers (WriteTxnMarkers) and KIP-890
    questions to a transaction coordinator (AddPartitionsToTxn v4/v5). A KafkaError when
    the broker cannot be reached or refuses."""

    async def write(
        self, broker: int, coordinator_epoch: int, markers: Sequence[TxnMarker]
    ) -> None: ...

    async def verify(
        self,
        broker: int,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[TopicPartition],
        *,
        add: bool,
    ) -> dict[TopicPartition, ErrorCode]: ...

    async def share_state(self, broker: int, api_key: int, version: int, request: Any) -> Any:
        """A share persister request (Read/WriteShareGroupState) to the broker leading the
        state's `__share_group_state` partition: its answer."""
        ...

    def close(self) -> None: ...


class Topology(Protocol):
    """One interface for what the broker asks of the cluster it is part of."""

    node_id: int

    @property
    def peers(self) -> Peers: ...

    # ---- lifecycle

    def open(self) -> None:
        """Before the logs load: what the topology keeps in the data dir and the logs
        derive their configs from (a single broker's dynamic configs)."""
        ...

    async def join(self) -> str:
        """Take part (register, or read this data dir's identity); return the cluster id.
        Called once the logs are loaded."""
        ...

    async def start_serving(self, on_role: RoleListener) -> None:
        """Take up this broker's replicas: `on_role` hears of every leadership taken
        (and, on a cluster, given up) from now on. After the flusher started."""
        ...

    async def controlled_shutdown(self) -> None: ...

    async def stop(self) -> None: ...

    # ---- metadata

    def nodes(self, listener: str) -> list[tuple[int, str, int]]:
        """(id, host, port) of every live broker on `listener`, by id."""
        ...

    def racks(self) -> dict[int, str | None]:
        """Each live broker's `broker.rack` (None: none), for Metadata and replica placement."""
        ...

    def endpoint(self, node: int, listener: str) -> tuple[str, int] | None:
        """A live broker's address on `listener`; None when it is not alive."""
        ...

    def controller_id(self) -> int: ...

    def topic_names(self) -> list[str]:
        """Every topic, the clients' first and the internal ones last (as Metadata lists)."""
        ...

    def topic(self, name: str) -> TopicInfo | None: ...

    def has_partition(self, topic: str, partition: int) -> bool: ...

    def partition_view(self, topic: str, partition: int) -> PartitionView: ...

    def leader_log(self, topic: str, partition: int) -> PartitionLog:
        """The log a client reads or writes: the local leader's (NOT_LEADER_OR_FOLLOWER if
        another broker leads, UNKNOWN_TOPIC_OR_PARTITION if there is no such partition)."""
        ...

    def log_for_produce(self, topic: str, partition: int) -> PartitionLog:
        """The leader log a Produce writes (a single broker auto-creates a missing topic
        there, as it always has; a cluster never does, as Kafka)."""
        ...

    @property
    def produce_creates_topics(self) -> bool:
        """Whether `log_for_produce` may create a missing topic (CREATE is then checked)."""
        ...

    def replica(self, plog: PartitionLog) -> Partition | None:
        """The partition's replication state (followers, ISR, leader epoch), None when
        the log has no replicas to follow it."""
        ...

    def alive_brokers(self) -> frozenset[int]: ...

    def leads(self, plog: PartitionLog) -> bool:
        """Whether this broker leads the log's partition (the metrics' is_leader)."""
        ...

    def replication_summary(self) -> ReplicationSummary: ...

    # ---- topics

    async def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        assignment: dict[int, list[int]] | None,
    ) -> CreatedTopic: ...

    async def create_partitions(
        self, name: str, total: int, assignments: list[list[int]] | None, validate_only: bool
    ) -> None: ...

    async def alter_topic_configs(
        self, name: str, change: Callable[[dict[str, str]], dict[str, str]], validate_only: bool
    ) -> None: ...

    async def delete_topic(self, name: str) -> None: ...

    async def elect_leaders(
        self, election_type: int, partitions: list[tuple[str, int]] | None, timeout_ms: int
    ) -> dict[tuple[str, int], ElectionResult]:
        """ElectLeaders (Kafka's type: 0 preferred, 1 unclean) for `partitions` (None:
        every partition), each answered once its new leader is known or `timeout_ms` passed
        (REQUEST_TIMED_OUT). Only the controller writes leaders; alone, none is needed."""
        ...

    async def alter_partition_reassignments(
        self,
        requested: dict[tuple[str, int], tuple[int, ...] | None],
        allow_rf_change: bool,
    ) -> dict[tuple[str, int], ElectionResult]:
        """AlterPartitionReassignments: start (a target), or cancel (None), each partition's
        reassignment; each answered once the change is written (Kafka's answer does not
        wait for the reassignment to complete)."""
        ...

    def list_partition_reassignments(
        self, partitions: list[tuple[str, int]] | None
    ) -> dict[tuple[str, int], tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
        """ListPartitionReassignments: replicas, adding and removing of each partition being
        reassigned (of `partitions`, or all)."""
        ...

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
        """Whether the internal topic exists; if not, start creating it once enough
        brokers are alive (COORDINATOR_NOT_AVAILABLE meanwhile)."""
        ...

    async def wait_for_leader(self, topic: str, partition: int, timeout_s: float) -> bool:
        """Whether a partition of an internal topic has a leader, waiting up to `timeout_s`
        for one while the topic exists or is being created here."""
        ...

    def refresh_configs(self) -> None:
        """The broker's config changed (dynamic configs): re-derive what depends on it."""
        ...

    # ---- appends and what they wait for

    def appended(self, plog: PartitionLog) -> bool:
        """After an append to a partition led here: whether readers may now see more (the
        high watermark moved)."""
        ...

    def flushed(self, plog: PartitionLog) -> bool:
        """After an fsync round covered the log: whether readers may now see more."""
        ...

    def follower_fetched(
        self, plog: PartitionLog, replica: int, fetch_offset: int, log_start_offset: int | None
    ) -> bool:
        """A follower's fetch: whether the high watermark moved."""
        ...

    def check_replicas(self, plog: PartitionLog, acks: int) -> None:
        """Refuse an acks=all write before its append when too few replicas are in sync."""
        ...

    def acknowledgement(
        self,
        plog: PartitionLog,
        last_offset: int,
        acks: int,
        timeout_ms: int,
        durable: Callable[[PartitionLog, int], asyncio.Future[None]],
    ) -> asyncio.Future[None] | None:
        """What an answer to a write waits for: nothing (acks=0/1), this replica's fsync
        (`durable`) or the high watermark, which covers every in-sync replica's disk."""
        ...
