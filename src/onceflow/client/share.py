"""A share-group consumer (KIP-932) on Onceflow's client core, whose acknowledgements can be
part of a transaction: Onceflow's TxnShareAcknowledge (see protocol/txn_share_acknowledge.py).

No released client can put a share acknowledgement in a transaction, so Onceflow has its
own consumer for it, with its TwoPhaseProducer as the transactional producer::

    consumer = TransactionalShareConsumer("localhost:9092", "work", ["jobs"])
    producer = TwoPhaseProducer("localhost:9092", "worker-1")
    producer.init()
    while True:
        records = consumer.poll(1.0)
        if not records:
            continue
        producer.begin()
        for r in records:
            producer.produce("results", transform(r.value))
        producer.flush()
        consumer.acknowledge_in_transaction(producer, records)
        producer.commit()      # the results and the acknowledgements, or neither

A commit makes the acknowledgements take effect; an abort (or a crash: the transaction is
aborted when the producer's successor calls init, or when it times out) releases the
records, which are delivered again. So every record of the queue is processed into the
output exactly once. Records are held while the transaction is open, whatever their lock.

One blocking connection per broker; the member heartbeats from `poll` (often enough when
polled at least every `group.share.heartbeat.interval.ms`).
"""

from __future__ import annotations

import datetime
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from onceflow.client.cluster import Cluster
from onceflow.client.errors import KafkaApiError, error_name
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import build, request_type
from onceflow.records.batch import iter_batches
from onceflow.records.record import decode_records

__all__ = ["ShareRecord", "TransactionalShareConsumer"]

ACCEPT, RELEASE, REJECT = 1, 2, 3
_FETCH_VERSION = 1


@dataclass(frozen=True, slots=True)
class ShareRecord:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    delivery_count: int


class TransactionalProducer(Protocol):
    """What a transaction needs of its producer (TwoPhaseProducer has it)."""

    transactional_id: str

    @property
    def producer_id(self) -> int: ...
    @property
    def producer_epoch(self) -> int: ...


class TransactionalShareConsumer:
    def __init__(self, bootstrap_servers: str, group_id: str, topics: Sequence[str]) -> None:
        self._cluster = Cluster(bootstrap_servers)
        self.group_id = group_id
        self.topics = tuple(topics)
        self.member_id = uuid.uuid4().hex
        self.member_epoch = 0
        self._interval_s = 0.0
        self._next_heartbeat = 0.0
        self._assignment: dict[str, list[int]] = {}
        self._session_epochs: dict[int, int] = {}  # broker -> next share session epoch
        self._names: dict[uuid.UUID, str] = {}
        self._ids: dict[str, uuid.UUID] = {}

    # -- membership

    def _heartbeat(self, *, leave: bool = False) -> None:
        _, conn = self._cluster.group_coordinator(self.group_id)
        answer = conn.call(
            ApiKey.SHARE_GROUP_HEARTBEAT,
            group_id=self.group_id,
            member_id=self.member_id,
            member_epoch=-1 if leave else self.member_epoch,
            rack_id=None,
            subscribed_topic_names=self.topics if self.member_epoch == 0 else None,
        )
        if leave:
            return
        if answer.error_code in (ErrorCode.unknown_member_id, ErrorCode.fenced_member_epoch):
            self.member_epoch = 0  # rejoin at once
            self._next_heartbeat = 0.0
            return
        if answer.error_code != ErrorCode.none:
            raise KafkaApiError(answer.error_code, f"ShareGroupHeartbeat: {answer.error_message}")
        self.member_epoch = answer.member_epoch
        self._interval_s = answer.heartbeat_interval.total_seconds()
        self._next_heartbeat = time.monotonic() + self._interval_s
        if answer.assignment is not None:
            self._learn_topic_ids()
            self._assignment = {
                self._names[t.topic_id]: list(t.partitions)
                for t in answer.assignment.topic_partitions
                if t.topic_id in self._names
            }

    def _learn_topic_ids(self) -> None:
        answer = self._cluster.bootstrap.call(
            ApiKey.METADATA,
            topics=None,
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
        for t in answer.topics:
            if t.name in self.topics:
                self._names[t.topic_id] = t.name
                self._ids[t.name] = t.topic_id

    # -- fetching

    def poll(self, timeout: float = 1.0, max_records: int = 500) -> list[ShareRecord]:
        """Acquire records (each held by this member until acknowledged or its lock ends)."""
        deadline = time.monotonic() + timeout
        while True:
            if time.monotonic() >= self._next_heartbeat:
                self._heartbeat()
            records = self._fetch_all(max_records, min(0.5, max(0.0, deadline - time.monotonic())))
            if records or time.monotonic() >= deadline:
                return records

    def _by_leader(self) -> dict[int, list[tuple[str, int]]]:
        out: dict[int, list[tuple[str, int]]] = defaultdict(list)
        for topic, partitions in self._assignment.items():
            for p in partitions:
                leader, _ = self._cluster.leader(topic, p)
                out[leader].append((topic, p))
        return out

    def _fetch_all(self, max_records: int, wait_s: float) -> list[ShareRecord]:
        out: list[ShareRecord] = []
        for node, partitions in self._by_leader().items():
            out.extend(self._fetch(node, partitions, max_records, wait_s))
        return out

    def _fetch(
        self, node: int, partitions: list[tuple[str, int]], max_records: int, wait_s: float
    ) -> list[ShareRecord]:
        conn = self._cluster.node(node)
        epoch = self._session_epochs.get(node, 0)
        version = min(conn.version_for(ApiKey.SHARE_FETCH), 2)
        entity = request_type(ApiKey.SHARE_FETCH, version)
        module = __import__(entity.__module__, fromlist=["FetchTopic"])
        by_topic: dict[str, list[int]] = defaultdict(list)
        for topic, p in partitions:
            by_topic[topic].append(p)
        topics = tuple(
            build(
                module.FetchTopic,
                topic_id=self._ids[t],
                partitions=tuple(
                    build(module.FetchPartition, partition_index=p, acknowledgement_batches=())
                    for p in ps
                ),
            )
            for t, ps in by_topic.items()
        )
        request = build(
            entity,
            group_id=self.group_id,
            member_id=self.member_id,
            share_session_epoch=epoch,
            max_wait=datetime.timedelta(seconds=wait_s),
            min_bytes=1,
            max_bytes=50 << 20,
            max_records=max_records,
            batch_size=max_records,
            share_acquire_mode=1,  # v2: never more than max_records
            topics=topics,
            forgotten_topics_data=(),
        )
        answer = conn.call_at(ApiKey.SHARE_FETCH, version, request)
        if answer.error_code in (
            ErrorCode.share_session_not_found,
            ErrorCode.invalid_share_session_epoch,
        ):
            self._session_epochs[node] = 0
            return []
        if answer.error_code != ErrorCode.none:
            raise KafkaApiError(answer.error_code, f"ShareFetch: {error_name(answer.error_code)}")
        self._session_epochs[node] = epoch + 1
        out: list[ShareRecord] = []
        for t in answer.responses:
            name = self._names.get(t.topic_id)
            for p in t.partitions:
                if name is None or not p.acquired_records or not p.records:
                    continue
                out.extend(_acquired(name, p.partition_index, p.records, p.acquired_records))
        return out

    # -- acknowledging

    def acknowledge_in_transaction(
        self, producer: TransactionalProducer, records: Iterable[ShareRecord], kind: int = ACCEPT
    ) -> None:
        """Make the records' acknowledgement part of the producer's open transaction."""
        grouped: dict[tuple[str, int], list[int]] = defaultdict(list)
        for r in records:
            grouped[(r.topic, r.partition)].append(r.offset)
        by_leader: dict[int, dict[str, dict[int, list[int]]]] = defaultdict(
            lambda: defaultdict(dict)
        )
        for (topic, p), offsets in grouped.items():
            leader, _ = self._cluster.leader(topic, p)
            by_leader[leader][topic][p] = sorted(offsets)
        module = __import__(
            request_type(ApiKey.TXN_SHARE_ACKNOWLEDGE, 0).__module__, fromlist=["AcknowledgeTopic"]
        )
        for node, topics in by_leader.items():
            answer = self._cluster.node(node).call(
                ApiKey.TXN_SHARE_ACKNOWLEDGE,
                transactional_id=producer.transactional_id,
                producer_id=producer.producer_id,
                producer_epoch=producer.producer_epoch,
                group_id=self.group_id,
                member_id=self.member_id,
                topics=tuple(
                    module.AcknowledgeTopic(
                        topic_id=self._ids[topic],
                        partitions=tuple(
                            module.AcknowledgePartition(
                                partition_index=p,
                                acknowledgement_batches=tuple(
                                    module.AcknowledgementBatch(
                                        first_offset=first,
                                        last_offset=last,
                                        acknowledge_types=(kind,),
                                    )
                                    for first, last in _ranges(offsets)
                                ),
                            )
                            for p, offsets in parts.items()
                        ),
                    )
                    for topic, parts in topics.items()
                ),
            )
            for t in answer.responses:
                for p in t.partitions:
                    if p.error_code != ErrorCode.none:
                        raise KafkaApiError(
                            p.error_code,
                            f"TxnShareAcknowledge of partition {p.partition_index}: "
                            f"{error_name(p.error_code)}",
                        )

    def close(self) -> None:
        """Leave the group (what this member still holds is released at once)."""
        try:
            if self.member_epoch > 0:
                self._heartbeat(leave=True)
        finally:
            self._cluster.close()

    def __enter__(self) -> TransactionalShareConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _ranges(offsets: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for o in offsets:
        if out and out[-1][1] + 1 == o:
            out[-1] = (out[-1][0], o)
        else:
            out.append((o, o))
    return out


def _acquired(topic: str, partition: int, data: bytes, acquired: Any) -> list[ShareRecord]:
    """The records of the fetched batches inside the acquired ranges."""
    spans = [(a.first_offset, a.last_offset, a.delivery_count) for a in acquired]
    out = []
    for scanned in iter_batches(data):
        header = scanned.header
        if header.is_control:
            continue
        batch = data[scanned.position : scanned.position + header.size]
        for record in decode_records(batch):
            for first, last, count in spans:
                if first <= record.offset <= last:
                    out.append(
                        ShareRecord(
                            topic, partition, record.offset, record.key, record.value, count
                        )
                    )
                    break
    return out
