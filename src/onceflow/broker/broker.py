"""Broker: the state every handler reaches through its RequestContext.

It owns the log manager (the ReplicaManager role on a single broker), the group-commit
flusher, the fetch purgatory and the coordinators, and runs their periodic work.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from onceflow.broker.purgatory import FetchPurgatory
from onceflow.broker.topics import INTERNAL_TOPICS, validate_topic_name
from onceflow.clock import Clock, SystemClock
from onceflow.config import BrokerConfig, ConfigError
from onceflow.coordinator.group.coordinator import GroupCoordinator
from onceflow.coordinator.group.log import LogEntry, decode_entries
from onceflow.coordinator.transaction.coordinator import (
    TransactionCoordinator,
    TxnCoordinatorConfig,
)
from onceflow.coordinator.transaction.metadata import TopicPartition
from onceflow.coordinator.transaction.producer_ids import ProducerIdManager
from onceflow.errors import ErrorCode, KafkaError
from onceflow.invariants import invariant
from onceflow.records.batch import BatchHeader, scan_batches
from onceflow.storage.cleaner import LogCleaner
from onceflow.storage.disk_space import DiskSpaceGuard, DiskState
from onceflow.storage.failures import LogOffline, OutOfSpace
from onceflow.storage.flusher import GroupCommitFlusher
from onceflow.storage.fs import FileSystem, RealFileSystem
from onceflow.storage.log_manager import LogManager, TopicInfo
from onceflow.storage.partition_log import FileRegion, LogConfig, PartitionLog

if TYPE_CHECKING:
    from onceflow.broker.server import KafkaConnection

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
TXN_TOPIC = "__transaction_state"
META_PROPERTIES = "meta.properties"
COORDINATOR_EPOCH_FILE = "transaction-coordinator-epoch"


class Broker:
    def __init__(
        self, config: BrokerConfig, fs: FileSystem | None = None, clock: Clock | None = None
    ) -> None:
        self.config = config
        self.clock = clock or SystemClock()
        self.fs = fs or RealFileSystem()
        self.node_id = config.node_id
        advertised = config.effective_advertised_listeners()[0]
        self.advertised_host, self.advertised_port = advertised.host, advertised.port
        self.log_dir = config.log_dirs[0]
        self.max_request_bytes = config.socket_request_max_bytes
        self.cluster_id = ""
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
        self.flusher = GroupCommitFlusher(on_flushed=self._flushed)
        self.purgatory = FetchPurgatory()
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
            offsets_partitions=config.offsets_topic_num_partitions,
            min_session_timeout_ms=config.group_min_session_timeout_ms,
            max_session_timeout_ms=config.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            offsets_retention_ms=config.offsets_retention_minutes * 60_000,
        )
        self._timers: list[asyncio.Task[None]] = []

    # ---- configuration ---------------------------------------------------------------

    def log_config(self, overrides: Mapping[str, str]) -> LogConfig:
        """A topic's storage settings: broker defaults, then the topic's own overrides."""
        try:
            topic = self.config.topic_config(overrides)
        except ConfigError as exc:
            raise KafkaError(ErrorCode.invalid_config, str(exc)) from exc
        policy = topic.cleanup_policy
        return LogConfig(
            segment_bytes=topic.segment_bytes,
            segment_ms=topic.segment_ms,
            index_interval_bytes=topic.index_interval_bytes,
            segment_index_bytes=topic.segment_index_bytes,
            retention_ms=topic.retention_ms,
            retention_bytes=topic.retention_bytes,
            cleanup_delete="delete" in policy,
            cleanup_compact="compact" in policy,
            max_message_bytes=topic.max_message_bytes,
            delete_retention_ms=topic.delete_retention_ms,
            min_compaction_lag_ms=topic.min_compaction_lag_ms,
            min_cleanable_dirty_ratio=topic.min_cleanable_dirty_ratio,
            durable=self.config.onceflow_fsync_on_ack,
            log_append_time=topic.message_timestamp_type == "LogAppendTime",
            timestamp_after_max_ms=topic.message_timestamp_after_max_ms,
            timestamp_before_max_ms=topic.message_timestamp_before_max_ms,
        )

    # ---- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        self.logs.load()
        self.disk.refresh(force=True)
        self.cluster_id = self._load_meta_properties()
        self.producer_ids.load()
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
        self.txn_coordinator.coordinator_epoch = self._next_coordinator_epoch()
        self.flusher.start()
        await self.group_coordinator.load()
        await self.txn_coordinator.load()
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

    async def stop(self) -> None:
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
        path = os.path.join(self.log_dir, META_PROPERTIES)
        if self.fs.exists(path):
            for line in self.fs.read_file(path).decode().splitlines():
                key, _, value = line.partition("=")
                if key.strip() == "cluster.id":
                    return value.strip()
        cluster_id = uuid.uuid4().hex[:22]
        body = f"version=1\ncluster.id={cluster_id}\nnode.id={self.node_id}\n"
        self.fs.write_file_atomic(path, body.encode())
        return cluster_id

    def _log_offline(self, plog: PartitionLog) -> None:
        """A coordinator whose log partition went offline stops serving its keys."""
        if plog.topic == TXN_TOPIC:
            self.txn_coordinator.unload(plog.partition)
        elif plog.topic == OFFSETS_TOPIC:
            self.group_coordinator.unload(plog.partition)

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
        return self.logs.get(topic, partition) is not None

    def create_topic(
        self, name: str, partitions: int, configs: Mapping[str, str] | None = None
    ) -> TopicInfo:
        validate_topic_name(name)
        if partitions <= 0:
            raise KafkaError(ErrorCode.invalid_partitions, "the partition count must be positive")
        return self.logs.create_topic(name, partitions, configs)

    def auto_create_topic(self, name: str) -> TopicInfo:
        if not self.config.auto_create_topics_enable or name in INTERNAL_TOPICS:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"no topic '{name}'")
        log.info("auto-creating topic %s with %d partitions", name, self.config.num_partitions)
        return self.create_topic(name, self.config.num_partitions)

    async def delete_topic(self, name: str) -> None:
        if name in INTERNAL_TOPICS:
            raise KafkaError(ErrorCode.invalid_topic_exception, f"'{name}' is internal")
        await self.flusher.barrier()  # no fsync may run on files about to be closed
        self.logs.delete_topic(name)

    def log_for_produce(self, topic: str, partition: int) -> PartitionLog:
        plog = self.logs.get(topic, partition)
        if plog is not None:
            return plog
        if topic not in self.logs.topics:
            validate_topic_name(topic)
            self.auto_create_topic(topic)
            plog = self.logs.get(topic, partition)
        if plog is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"no {topic}-{partition}")
        return plog

    # ---- appends and visibility ------------------------------------------------------

    def appended(self, plog: PartitionLog) -> None:
        """After any append: schedule the group commit; wake fetches if already visible."""
        self.flusher.mark(plog)
        if not plog.config.durable:
            self.purgatory.notify((plog.topic, plog.partition))

    def _flushed(self, plog: PartitionLog) -> None:
        self.purgatory.notify((plog.topic, plog.partition))

    def last_stable_offset(self, plog: PartitionLog) -> int:
        return plog.last_stable_offset

    def aborted_transactions(
        self, plog: PartitionLog, fetch_offset: int, region: FileRegion | None
    ) -> tuple[tuple[int, int], ...]:
        if region is None:
            return ()
        return tuple(plog.aborted_between(fetch_offset, plog.last_stable_offset))

    async def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: frozenset[TopicPartition],
    ) -> None:
        """The MarkerWriter of the transaction coordinator: one broker, so no
        WriteTxnMarkers round trip; every marker is durable before this returns."""
        written: list[tuple[PartitionLog, int]] = []
        for topic, partition in sorted(partitions):
            plog = self.logs.get(topic, partition)
            if plog is None:
                continue  # the topic was deleted: nothing left to mark
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
        for plog, offset in written:
            if plog.config.durable:
                await self.flusher.durable(plog, offset)
            if plog.topic == OFFSETS_TOPIC:
                self.group_coordinator.complete_txn(producer_id, commit, plog.partition)

    def verify_transactional(
        self, transactional_id: str | None, header: BatchHeader, topic: str, partition: int
    ) -> None:
        if not self.config.transaction_partition_verification_enable:
            return  # Kafka's switch; off only to reproduce Kafka's old hanging transactions
        self.txn_coordinator.verify(
            transactional_id, header.producer_id, header.producer_epoch, (topic, partition)
        )

    async def append_internal(
        self, topic: str, partition: int, batch: bytes, transactional_id: str | None = None
    ) -> int:
        """Append a batch the broker built itself; return once it is durable.

        A transactional batch (a TxnOffsetCommit) passes the same KIP-890 check as a
        produced one: its partition must be in the producer's ongoing transaction.
        """
        plog = self.logs.get(topic, partition)
        if plog is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"no {topic}-{partition}")
        # Built by the broker itself: only whole and intact are checked, not the client
        # rules (a TxnOffsetCommit batch has a producer id but no sequence, as in Kafka).
        scanned, end = scan_batches(batch)
        invariant(end == len(batch) and bool(scanned), "an internal batch is malformed")
        headers = [b.header for b in scanned]
        if headers[0].is_transactional:
            self.verify_transactional(transactional_id, headers[0], topic, partition)
        result = plog.append_batches(batch, headers, from_client=False)
        self.appended(plog)
        if plog.config.durable:
            await self.flusher.durable(plog, result.last_offset)
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


class _OffsetsTopicLog:
    """The OffsetsLog the group coordinator persists through."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    def append(
        self, partition: int, batch: bytes, transactional_id: str | None = None
    ) -> Awaitable[int]:
        return self._broker.append_internal(OFFSETS_TOPIC, partition, batch, transactional_id)

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
