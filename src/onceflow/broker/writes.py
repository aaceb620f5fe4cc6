"""Every write to a partition led here, and what it waits for (the append half of Kafka's
ReplicaManager): client batches and the coordinators' own records, transaction markers
(appended here or sent to their leaders), KIP-890 verification of transactional writes,
and waking the fetches an append or an fsync round makes answerable.

The transaction coordinator writes its markers through it, both coordinators their
internal records, the replica fetchers their followers' appends; the topology says who
leads and what an acknowledgement waits for.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Iterator, Sequence

from onceflow.broker.purgatory import FetchPurgatory
from onceflow.broker.topics import OFFSETS_TOPIC, SHARE_STATE_TOPIC, TXN_TOPIC
from onceflow.broker.topology.base import NO_LEADER, Topology
from onceflow.broker.verification import RemoteVerification
from onceflow.config import BrokerConfig
from onceflow.coordinator.group.coordinator import GroupCoordinator
from onceflow.coordinator.group.log import LogEntry, decode_entries
from onceflow.coordinator.transaction.coordinator import TransactionCoordinator
from onceflow.coordinator.transaction.marker import TxnMarker
from onceflow.coordinator.transaction.metadata import TopicPartition
from onceflow.errors import ErrorCode, KafkaError
from onceflow.failpoints import failpoint
from onceflow.invariants import invariant
from onceflow.protocol.txn_support import TxnSupport, write_refusal
from onceflow.records.batch import BatchHeader, scan_batches
from onceflow.storage.failures import LogOffline, OutOfSpace
from onceflow.storage.flusher import GroupCommitFlusher
from onceflow.storage.log_manager import LogManager
from onceflow.storage.partition_log import PartitionLog
from onceflow.storage.producer_state import NO_TXN

log = logging.getLogger(__name__)

#: How long the coordinators' own writes wait to be replicated (offsets.commit.timeout.ms).
INTERNAL_WRITE_TIMEOUT_MS = 5000


class Writes:
    """Made before the coordinators and the topology, which it serves and asks:
    `attach` gives it them once they exist."""

    flusher: GroupCommitFlusher
    topology: Topology
    txn_coordinator: TransactionCoordinator
    group_coordinator: GroupCoordinator

    def __init__(
        self,
        node_id: int,
        config: Callable[[], BrokerConfig],
        logs: LogManager,
        purgatory: FetchPurgatory,
        replica_purgatory: FetchPurgatory,
    ) -> None:
        self.node_id = node_id
        self._config = config
        self._logs = logs
        self.purgatory = purgatory
        self.replica_purgatory = replica_purgatory
        #: A transaction marker reached __share_group_state: (producer id, commit, partition).
        self.on_share_marker: Callable[[int, bool, int], None] | None = None

    def attach(
        self,
        flusher: GroupCommitFlusher,
        topology: Topology,
        txn_coordinator: TransactionCoordinator,
        group_coordinator: GroupCoordinator,
    ) -> None:
        self.flusher = flusher
        self.topology = topology
        self.txn_coordinator = txn_coordinator
        self.group_coordinator = group_coordinator

    def appended(self, plog: PartitionLog) -> None:
        """After any append: schedule the group commit, wake the followers' fetches, and
        consumers' too when the high watermark moved."""
        self.flusher.mark(plog)
        key = (plog.topic, plog.partition)
        self.replica_purgatory.notify(key)
        if self.topology.appended(plog):
            self.purgatory.notify(key)

    def log_start_moved(self, plog: PartitionLog) -> None:
        """DeleteRecords moved the leader's log start: the followers' parked fetches come
        back at once to be told (its answer waits for them to move theirs)."""
        self.replica_purgatory.notify((plog.topic, plog.partition))

    def durable(
        self, plog: PartitionLog, offset: int, follower: bool = False
    ) -> asyncio.Future[None]:
        return self.flusher.durable(plog, offset, follower)

    def flushed(self, plog: PartitionLog) -> None:
        if self.topology.flushed(plog):
            self.purgatory.notify((plog.topic, plog.partition))

    def follower_fetched(
        self, plog: PartitionLog, replica: int, fetch_offset: int, log_start_offset: int = -1
    ) -> None:
        """A follower's fetch: it holds what is below fetch_offset (durably, in durable
        mode) and its log starts at log_start_offset; the high watermark may move and wake
        consumers and acks=all producers, the low watermark complete DeleteRecords."""
        start = log_start_offset if log_start_offset >= 0 else None
        if self.topology.follower_fetched(plog, replica, fetch_offset, start):
            self.purgatory.notify((plog.topic, plog.partition))

    def check_replicas(self, plog: PartitionLog, acks: int) -> None:
        """acks=all: refused before the append when the ISR is too small."""
        self.topology.check_replicas(plog, acks)

    def acknowledgement(
        self, plog: PartitionLog, last_offset: int, acks: int, timeout_ms: int
    ) -> asyncio.Future[None] | None:
        """What a produce response waits for: nothing (acks=0/1), the fsync of this
        replica (acks=all, alone) or the high watermark, which in durable mode means the
        disk of every in-sync replica (acks=all, on a cluster)."""
        return self.topology.acknowledgement(plog, last_offset, acks, timeout_ms, self.durable)

    async def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: frozenset[TopicPartition],
    ) -> None:
        """The MarkerWriter of the transaction coordinator, for one transaction."""
        marker = TxnMarker(producer_id, producer_epoch, commit, partitions)
        await self.write_marker_group((marker,), coordinator_epoch)

    async def write_marker_group(
        self, markers: Sequence[TxnMarker], coordinator_epoch: int
    ) -> None:
        """Markers of one or more transactions decided together: those of partitions led
        here are all appended in one step (no await between them, so no fetch sees some
        and not the others), the others go to each leader in one WriteTxnMarkers request
        (which its handler appends in one step too). Every marker is durable (replicated,
        on a cluster) before this returns, else it raises and the coordinator retries."""
        written: list[tuple[PartitionLog, int, int, bool]] = []
        remote: dict[int, list[TxnMarker]] = {}
        for marker in markers:
            away: dict[int, list[TopicPartition]] = {}
            for topic, partition in sorted(marker.partitions):
                if not self.topology.has_partition(topic, partition):
                    continue  # the topic was deleted: nothing left to mark
                leader = self.topology.partition_view(topic, partition).leader
                if leader != self.node_id:
                    away.setdefault(leader, []).append((topic, partition))
                    continue
                plog = self.topology.leader_log(topic, partition)  # else raise: retried
                try:
                    result = plog.append_marker(
                        marker.producer_id, marker.producer_epoch, coordinator_epoch, marker.commit
                    )
                except (OutOfSpace, LogOffline):
                    raise  # not written: the coordinator retries until it is
                except KafkaError as exc:
                    # The partition already moved past this transaction (newer epoch or
                    # coordinator): there is nothing left for this marker to end.
                    log.warning("marker for %s-%d skipped: %s", topic, partition, exc)
                    continue
                self.appended(plog)
                written.append((plog, result.last_offset, marker.producer_id, marker.commit))
            for leader, targets in away.items():
                remote.setdefault(leader, []).append(
                    dataclasses.replace(marker, partitions=frozenset(targets))
                )
        if remote:
            if written:
                failpoint("txn.between_markers")
            peers = self.topology.peers
            await asyncio.gather(
                *(
                    peers.write(leader, coordinator_epoch, leader_markers)
                    for leader, leader_markers in remote.items()
                )
            )
        for plog, offset, producer_id, commit in written:
            wait = self.acknowledgement(plog, offset, -1, INTERNAL_WRITE_TIMEOUT_MS)
            if wait is not None:
                await wait
            if plog.topic == OFFSETS_TOPIC:
                self.group_coordinator.complete_txn(producer_id, commit, plog.partition)
            elif plog.topic == SHARE_STATE_TOPIC and self.on_share_marker is not None:
                self.on_share_marker(producer_id, commit, plog.partition)

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
        if not add and not self._config().transaction_partition_verification_enable:
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
        """Whether the id's coordinator is another (live) broker, to be asked over the wire."""
        if transactional_id is None:
            return False
        error = self.txn_coordinator.coordinator_error(transactional_id)
        if error is not ErrorCode.not_coordinator:
            return False
        return self._txn_coordinator_node(transactional_id) not in (self.node_id, NO_LEADER)

    def _txn_coordinator_node(self, transactional_id: str) -> int:
        txn_partition = self.txn_coordinator.partition_for(transactional_id)
        return self.topology.partition_view(TXN_TOPIC, txn_partition).leader

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
        plog = self.topology.leader_log(topic, partition)
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
        coordinator = self._txn_coordinator_node(transactional_id)
        try:
            return await self.topology.peers.verify(
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
        plog = self.topology.leader_log(topic, partition)
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
        return await self._append_now(plog, batch, headers)

    def start_internal_append(
        self, topic: str, partition: int, batch: bytes
    ) -> asyncio.Future[int]:
        """Append a non-transactional batch the broker built itself (a transaction log
        record) to the leader's log now, raising if it cannot; the awaitable completes
        with its first offset once it is durable. What is appended after it in the same
        partition is durable only with it."""
        plog = self.topology.leader_log(topic, partition)
        scanned, end = scan_batches(batch)
        invariant(end == len(batch) and bool(scanned), "an internal batch is malformed")
        headers = [b.header for b in scanned]
        invariant(not headers[0].is_transactional, "a transactional batch needs verifying")
        return self._append_now(plog, batch, headers)

    def _append_now(
        self, plog: PartitionLog, batch: bytes, headers: list[BatchHeader]
    ) -> asyncio.Future[int]:
        self.check_replicas(plog, -1)
        result = plog.append_batches(batch, headers, from_client=False)
        self.appended(plog)
        wait = self.acknowledgement(plog, result.last_offset, -1, INTERNAL_WRITE_TIMEOUT_MS)
        return _when_done(wait, result.first_offset)

    def read_internal(self, topic: str, partition: int) -> Iterator[LogEntry]:
        """Every record of an internal partition, markers included, oldest first."""
        plog = self._logs.get(topic, partition)
        if plog is None:
            return
        for segment in plog.segments:
            for location in segment.read_headers():
                yield from decode_entries(
                    segment.read_bytes(location.position, location.header.size)
                )


def _when_done(wait: asyncio.Future[None] | None, offset: int) -> asyncio.Future[int]:
    """A future of `offset`, done when `wait` is (a future, not a coroutine: the append
    it stands for is already made)."""
    done: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def settle(waited: asyncio.Future[None]) -> None:
        if done.done():
            return
        if waited.cancelled():
            done.cancel()
        elif (error := waited.exception()) is not None:
            done.set_exception(error)
        else:
            done.set_result(offset)

    if wait is None:
        done.set_result(offset)
    else:
        wait.add_done_callback(settle)
    return done
