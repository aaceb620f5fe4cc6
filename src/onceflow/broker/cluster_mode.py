"""A broker as a member of a cluster: its ZooKeeper link, controller and replica manager,
and the cluster's answers to what handlers ask (who leads, which brokers exist).

Without `zookeeper.connect` none of this runs: the broker is alone and answers from its
own logs, as it always did.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from onceflow.broker.inter_broker import InterBroker
from onceflow.broker.topics import partition_count_message
from onceflow.cluster.assignment import assign_replicas
from onceflow.cluster.controller import Controller, ControllerSettings
from onceflow.cluster.link import ClusterLink
from onceflow.cluster.metadata import MetadataCache, TopicMetadata
from onceflow.cluster.replica_manager import ReplicaManager, ReplicationSettings
from onceflow.cluster.zk_store import (
    MetadataStoreError,
    NoSuchTopic,
    TopicExists,
    ZkMetadataStore,
)
from onceflow.cluster.znodes import NO_LEADER, BrokerRegistration
from onceflow.config import ConfigError
from onceflow.errors import ErrorCode, KafkaError
from onceflow.replication.fetcher import FetcherSettings
from onceflow.replication.partition import Partition, Role
from onceflow.storage.partition_log import PartitionLog

if TYPE_CHECKING:
    from onceflow.broker.broker import Broker

log = logging.getLogger(__name__)

#: How long CreateTopics waits for the controller to elect the new partitions' leaders.
CREATE_WAIT_S = 10.0


class ClusterStartupError(Exception):
    """ZooKeeper cannot be reached, or another broker has this broker.id."""


@dataclass(frozen=True, slots=True)
class PartitionView:
    """A partition as Metadata shows it."""

    error: ErrorCode
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...]


class ClusterMode:
    def __init__(self, broker: Broker, internal_topics: frozenset[str]) -> None:
        config = broker.config
        self.broker = broker
        self.config = config
        store = ZkMetadataStore(config.zookeeper_connect, config.zookeeper_session_timeout_ms)
        inter = config.advertised_listener_for(config.inter_broker_listener().name)
        registration = BrokerRegistration(
            broker.node_id,
            inter.host,
            inter.port,
            broker.clock.now_ms(),
            tuple(
                (ad.name, config.security_protocol(ad.name), ad.host, ad.port)
                for ad in config.effective_advertised_listeners()
            ),
        )
        self.link = ClusterLink(store, registration, asyncio.get_running_loop())
        self.replicas = ReplicaManager(
            self.link,
            broker.logs,
            broker,
            ReplicationSettings(
                lag_time_max_ms=config.replica_lag_time_max_ms,
                fetcher=FetcherSettings(
                    max_wait_ms=config.replica_fetch_wait_max_ms,
                    max_bytes=config.replica_fetch_response_max_bytes,
                    partition_max_bytes=config.replica_fetch_max_bytes,
                    backoff_ms=config.replica_fetch_backoff_ms,
                    socket_timeout_ms=config.replica_socket_timeout_ms,
                    security=broker.inter_broker_security,
                ),
            ),
            broker.clock,
            internal_topics,
            self._min_isr,
        )
        self.controller = Controller(
            self.link,
            broker.node_id,
            ControllerSettings(
                unclean_leader_election=config.unclean_leader_election_enable,
                auto_leader_rebalance=config.auto_leader_rebalance_enable,
                imbalance_check_interval_s=config.leader_imbalance_check_interval_seconds,
                imbalance_percent=config.leader_imbalance_per_broker_percentage,
            ),
            broker.clock,
        )
        self.internal_topics = internal_topics
        self.peers = InterBroker(broker.node_id, self.link.cache, broker.inter_broker_security)
        self._creating: set[str] = set()  # internal topics being created

    def _min_isr(self, topic: str, configs: Mapping[str, str]) -> int:
        config = self.broker.config  # with the dynamic broker configs, which may change
        if topic == "__transaction_state" and "min.insync.replicas" not in configs:
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

    async def start(self, local_cluster_id: str | None) -> str:
        """Join the cluster; return its id (refusing a data dir of another cluster)."""
        timeout_s = self.config.zookeeper_connection_timeout_ms / 1000
        try:
            await asyncio.to_thread(self.link.start, timeout_s)
            cluster_id = await asyncio.to_thread(
                self.link.store.cluster_id, local_cluster_id or uuid.uuid4().hex[:22]
            )
        except MetadataStoreError as exc:
            self.link.close()
            raise ClusterStartupError(str(exc)) from exc
        if local_cluster_id is not None and local_cluster_id != cluster_id:
            self.link.close()
            raise ClusterStartupError(
                f"the data dir belongs to cluster {local_cluster_id}, but ZooKeeper at "
                f"{self.config.zookeeper_connect} holds cluster {cluster_id}"
            )
        log.info(
            "broker %d joined cluster %s through ZooKeeper at %s",
            self.broker.node_id,
            cluster_id,
            self.config.zookeeper_connect,
        )
        return cluster_id

    def start_replication(self) -> None:
        """Take up this broker's replicas and stand for controller (after the flusher and
        the role listeners are in place)."""
        self.replicas.start()
        self.controller.start()
        self.broker.producer_ids.allocate_block = self._producer_id_block

    def _producer_id_block(self, size: int) -> tuple[int, int]:
        """A block of producer ids from ZooKeeper (one compare-and-set per `size` ids; it
        blocks the loop for a round trip, as Kafka's controller did for its requester)."""
        try:
            block = self.link.store.allocate_producer_ids(self.broker.node_id, size)
        except Exception as exc:
            raise KafkaError(
                ErrorCode.coordinator_not_available, f"no producer-id block from ZooKeeper: {exc}"
            ) from exc
        return block.start, block.end

    async def controlled_shutdown(self) -> None:
        """Ask the controller to move leadership away, and wait (bounded) until it has."""
        if not self.config.controlled_shutdown_enable:
            return
        try:
            await asyncio.to_thread(self.link.store.enter_controlled_shutdown, self.broker.node_id)
        except Exception as exc:
            log.warning("controlled shutdown not possible: %s", exc)
            return
        # Kafka's attempts: each waits up to the retry backoff for the leadership to move;
        # an attempt in which nothing moved ends the wait (the controller cannot help).
        loop = asyncio.get_running_loop()
        attempt_s = max(self.config.controlled_shutdown_retry_backoff_ms / 1000, 0.5)
        remaining = self._leads_with_others()
        for _ in range(self.config.controlled_shutdown_max_retries + 1):
            before = remaining
            deadline = loop.time() + attempt_s
            while remaining and loop.time() < deadline:
                await asyncio.sleep(0.05)
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
        self.peers.close()
        await self.controller.stop()
        await self.replicas.stop()
        await asyncio.to_thread(self.link.close)

    # ---- what handlers ask -----------------------------------------------------------

    def nodes(self, listener: str) -> list[tuple[int, str, int]]:
        return sorted((b, *r.endpoint(listener)) for b, r in self.cache.brokers.items())

    def controller_id(self) -> int:
        controller = self.cache.controller_id
        return controller if controller is not None else NO_LEADER

    def topic(self, name: str) -> TopicMetadata | None:
        return self.cache.topics.get(name)

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
                f"broker {self.broker.node_id} does not lead {topic}-{index}",
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
        assignment: dict[int, list[int]] | None = None,
        wait: bool = True,
    ) -> TopicMetadata:
        """Write the assignment to ZooKeeper (the controller elects the leaders) and wait,
        bounded, until this broker sees every partition led."""
        live = sorted(self.cache.brokers)
        if assignment is None:
            assignment = assign_replicas(partitions, replication_factor, live)
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
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CREATE_WAIT_S
        while loop.time() < deadline:
            if all(self.cache.leader_of(name, p) != NO_LEADER for p in range(partitions)):
                return
            await asyncio.sleep(0.02)

    async def create_partitions(
        self, name: str, total: int, new: list[list[int]] | None, validate_only: bool
    ) -> None:
        """CreatePartitions: the new partitions' replicas (given, or round robin continuing
        the topic's), written by compare-and-set; the controller elects their leaders."""
        meta = self.cache.topics.get(name)
        if meta is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"no topic '{name}'")
        current = {p: list(r) for p, r in meta.assignment.items()}
        if total <= len(current):
            raise KafkaError(
                ErrorCode.invalid_partitions,
                partition_count_message(len(current), total),
            )
        factor = len(current[0])
        if new is None:
            added = assign_replicas(
                total - len(current), factor, sorted(self.cache.brokers), len(current)
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
            self.broker.log_config(configs)  # INVALID_CONFIG before anything is written
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
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CREATE_WAIT_S
        while loop.time() < deadline:
            meta = self.cache.topics.get(name)
            if meta is None or meta.config_version >= version:
                return
            await asyncio.sleep(0.02)

    async def delete_topic(self, name: str) -> None:
        try:
            await asyncio.to_thread(self.link.store.delete_topic, name)
        except MetadataStoreError as exc:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, str(exc)) from exc
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CREATE_WAIT_S
        while name in self.cache.topics and loop.time() < deadline:
            await asyncio.sleep(0.02)

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
            self.create_topic(name, partitions, replication_factor, configs, wait=False)
        )
        task.add_done_callback(_log_creation(name))
        task.add_done_callback(lambda _: self._creating.discard(name))
        return False


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
