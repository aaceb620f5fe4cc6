"""Requests one broker sends another, each on a connection kept per peer:

- WriteTxnMarkers, from a transaction coordinator to each partition's current leader. A
  marker that could not be written (the leader moved, is unreachable, or could not
  replicate it) raises, and the coordinator retries the whole set: writing a marker again
  is harmless, the partition refuses one its producer has moved past. A marker the leader
  refuses for good (an older producer or coordinator epoch) is dropped, as a local one is.
- AddPartitionsToTxn v4 with verify_only (KIP-890, as Kafka 3.6+ brokers send it), from a
  partition leader to the transaction coordinator of a transactional write's id: the write
  is appended only if the partition is in that producer's ongoing transaction. For a
  transaction version 2 write (Produce v12, TxnOffsetCommit v5), v5 without verify_only:
  the coordinator adds the partition to the transaction (KIP-890 part 2).

Each kind has its own connection to a peer, one request at a time on each (Kafka's
TransactionMarkerChannelManager and AddPartitionsToTxnManager have their own channels too):
a WriteTxnMarkers waits for its markers to be replicated, and a producer's first write to
a partition must not wait behind it for its verification (issue 26).
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.index import load_payload_module
from kio.static.constants import EntityType

from onceflow.client.aio import AsyncConnection
from onceflow.client.errors import Unreachable
from onceflow.cluster.metadata import MetadataCache
from onceflow.coordinator.transaction.marker import TxnMarker
from onceflow.errors import ErrorCode, KafkaError
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import build, request_type
from onceflow.security.client_config import ClientSecurity

log = logging.getLogger(__name__)

MARKERS_VERSION = 1
VERIFY_VERSION = 4
ADD_VERSION = 5
TIMEOUT_S = 30.0
#: The connections kept to each peer, one per kind of request.
MARKERS, VERIFY, SHARE = "markers", "verify", "share-state"
#: Answers that mean "not written yet, try again" rather than "never needed".
RETRIABLE = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.kafka_storage_error,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.request_timed_out,
        ErrorCode.coordinator_load_in_progress,
    }
)


@dataclass(slots=True)
class VerifyQuestion:
    """One write's question to a transaction coordinator, answered per partition."""

    key: tuple[str, int, int]  # transactional id, producer id, producer epoch
    partitions: list[tuple[str, int]]
    answer: asyncio.Future[dict[tuple[str, int], ErrorCode]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


def _request(version: int, batch: list[VerifyQuestion]) -> Any:
    """AddPartitionsToTxn with one transaction entry per transactional id of `batch`."""
    module = load_payload_module(ApiKey.ADD_PARTITIONS_TO_TXN, version, EntityType.request)
    merged: dict[tuple[str, int, int], dict[str, set[int]]] = {}
    for question in batch:
        topics = merged.setdefault(question.key, defaultdict(set))
        for topic, partition in question.partitions:
            topics[topic].add(partition)
    transactions = tuple(
        build(
            module.AddPartitionsToTxnTransaction,
            transactional_id=txn_id,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            verify_only=version == VERIFY_VERSION,
            topics=tuple(
                build(module.AddPartitionsToTxnTopic, name=topic, partitions=tuple(sorted(ps)))
                for topic, ps in topics.items()
            ),
        )
        for (txn_id, producer_id, producer_epoch), topics in merged.items()
    )
    return build(request_type(ApiKey.ADD_PARTITIONS_TO_TXN, version), transactions=transactions)


def _answers(response: Any) -> dict[str, dict[tuple[str, int], ErrorCode]]:
    """Each transactional id's answer per partition."""
    return {
        result.transactional_id: {
            (topic_result.name, part.partition_index): ErrorCode(part.partition_error_code)
            for topic_result in result.topic_results
            for part in topic_result.results_by_partition
        }
        for result in response.results_by_transaction
    }


def _retrieve(answer: asyncio.Future[Any]) -> None:
    if not answer.cancelled():
        answer.exception()


class InterBroker:
    def __init__(
        self, local_id: int, cache: MetadataCache, security: ClientSecurity | None = None
    ) -> None:
        self.local_id = local_id
        self.cache = cache
        self.security = security
        self._connections: dict[tuple[int, str], tuple[tuple[str, int], AsyncConnection]] = {}
        self._locks: dict[tuple[int, str], asyncio.Lock] = defaultdict(asyncio.Lock)
        #: Verifications waiting for their coordinator's channel, per coordinator broker.
        self._questions: dict[int, list[VerifyQuestion]] = defaultdict(list)

    def _connection(self, broker: int, channel: str) -> AsyncConnection:
        registration = self.cache.brokers.get(broker)
        if registration is None:
            raise KafkaError(ErrorCode.not_leader_or_follower, f"broker {broker} is not alive")
        address = (registration.host, registration.port)
        known = self._connections.get((broker, channel))
        if known is None or known[0] != address:
            if known is not None:
                known[1].close()
            known = (
                address,
                AsyncConnection(
                    address[0],
                    address[1],
                    f"txn-markers-{self.local_id}",
                    TIMEOUT_S,
                    self.security,
                ),
            )
            self._connections[(broker, channel)] = known
        return known[1]

    async def _request(
        self, broker: int, channel: str, api_key: int, version: int, request: Any
    ) -> Any:
        async with self._locks[(broker, channel)]:
            return await self._send(broker, channel, api_key, version, request)

    async def _send(
        self, broker: int, channel: str, api_key: int, version: int, request: Any
    ) -> Any:
        """One request on the channel, whose lock the caller holds."""
        try:
            return await self._connection(broker, channel).request(api_key, version, request)
        except Unreachable as exc:
            raise KafkaError(ErrorCode.not_leader_or_follower, str(exc)) from exc

    async def verify(
        self,
        coordinator: int,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[tuple[str, int]],
        *,
        add: bool = False,
    ) -> dict[tuple[str, int], ErrorCode]:
        """The coordinator's answer, per partition, on whether it is in the producer's
        ongoing transaction: NONE, or the error the write must be refused with. With
        `add` (transaction version 2 writes) the coordinator adds them instead: v5 without
        verify_only, as Kafka 4 brokers send it. One request for all the partitions.

        Verifications waiting for the channel meanwhile (a Produce and a TxnOffsetCommit of
        the same transaction, say) go in the next request together, as Kafka's
        AddPartitionsToTxnManager sends them: one transaction entry per transactional id."""
        question = VerifyQuestion((transactional_id, producer_id, producer_epoch), partitions)
        question.answer.add_done_callback(_retrieve)  # one cut short may go unread
        if add:
            async with self._locks[(coordinator, VERIFY)]:
                await self._ask(coordinator, ADD_VERSION, [question])
            return question.answer.result()
        self._questions[coordinator].append(question)
        async with self._locks[(coordinator, VERIFY)]:
            if not question.answer.done():
                await self._ask(coordinator, VERIFY_VERSION, self._take(coordinator))
        return question.answer.result()

    def _take(self, coordinator: int) -> list[VerifyQuestion]:
        """The queued questions to `coordinator` that can share a request: the first
        producer asking for each transactional id (another epoch waits its turn)."""
        queue = self._questions[coordinator]
        taken: dict[str, tuple[int, int]] = {}
        batch = []
        for question in queue:
            txn_id, producer_id, producer_epoch = question.key
            if taken.setdefault(txn_id, (producer_id, producer_epoch)) == (
                producer_id,
                producer_epoch,
            ):
                batch.append(question)
        self._questions[coordinator] = [q for q in queue if q not in batch]
        return batch

    async def _ask(self, coordinator: int, version: int, batch: list[VerifyQuestion]) -> None:
        """One AddPartitionsToTxn for `batch`; each question answered (or failed)."""
        try:
            response = await self._send(
                coordinator, VERIFY, ApiKey.ADD_PARTITIONS_TO_TXN, version, _request(version, batch)
            )
            failed = ErrorCode(response.error_code)
            answers = _answers(response)
            for question in batch:
                if failed is not ErrorCode.none:  # the whole request was refused
                    question.answer.set_result(dict.fromkeys(question.partitions, failed))
                    continue
                txn_answers = answers.get(question.key[0], {})
                # A partition the answer left out was not checked: refused.
                question.answer.set_result(
                    {
                        tp: txn_answers.get(tp, ErrorCode.unknown_server_error)
                        for tp in question.partitions
                    }
                )
        finally:  # a failed or interrupted request fails what it carried
            for question in batch:
                if not question.answer.done():
                    question.answer.set_exception(
                        KafkaError(
                            ErrorCode.not_leader_or_follower,
                            f"broker {coordinator} did not answer the verification",
                        )
                    )

    async def write(
        self, leader: int, coordinator_epoch: int, markers: Sequence[TxnMarker]
    ) -> None:
        """One WriteTxnMarkers request for every marker to write on `leader`: its handler
        appends them all in one step."""
        module = load_payload_module(ApiKey.WRITE_TXN_MARKERS, MARKERS_VERSION, EntityType.request)
        entities = []
        for marker in markers:
            by_topic: dict[str, list[int]] = defaultdict(list)
            for topic, index in sorted(marker.partitions):
                by_topic[topic].append(index)
            entities.append(
                build(
                    module.WritableTxnMarker,
                    producer_id=marker.producer_id,
                    producer_epoch=marker.producer_epoch,
                    transaction_result=marker.commit,
                    topics=tuple(
                        build(module.WritableTxnMarkerTopic, name=t, partition_indexes=tuple(ps))
                        for t, ps in sorted(by_topic.items())
                    ),
                    coordinator_epoch=coordinator_epoch,
                )
            )
        request = build(
            request_type(ApiKey.WRITE_TXN_MARKERS, MARKERS_VERSION), markers=tuple(entities)
        )
        response = await self._request(
            leader, MARKERS, ApiKey.WRITE_TXN_MARKERS, MARKERS_VERSION, request
        )
        for result in response.markers:
            for topic in result.topics:
                for partition in topic.partitions:
                    error = ErrorCode(partition.error_code)
                    if error is ErrorCode.none:
                        continue
                    name = f"{topic.name}-{partition.partition_index}"
                    if error in RETRIABLE:
                        raise KafkaError(error, f"marker for {name} not written on {leader}")
                    log.warning("marker for %s refused by broker %d: %s", name, leader, error.name)

    async def share_state(self, broker: int, api_key: int, version: int, request: Any) -> Any:
        """A share persister request to the share coordinator of the state's partition."""
        return await self._request(broker, SHARE, api_key, version, request)

    def close(self) -> None:
        for _, connection in self._connections.values():
            connection.close()
        self._connections.clear()
