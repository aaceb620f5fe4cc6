"""A read_committed Fetch lists only the aborted transactions overlapping what it returns,
with over 200 aborted transactions after the fetch position (issue 13), and real clients'
read_committed consumers, fetching a few hundred bytes at a time, still read exactly the
committed records across the whole log.

Two librdkafka transactional producers interleave their transactions, so transactions
overlap. What each Fetch should list is worked out from the log's own bytes (a
read_uncommitted Fetch of everything: where each batch starts, which transaction each
ABORT marker ended), never from the broker's index.
"""

from __future__ import annotations

import datetime
import time
import uuid
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from kio.schema.fetch.v11 import request as fetch_v11
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i64

from onceflow.records.batch import scan_batches
from onceflow.records.control import ControlType, parse_control_record
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import QUIET_LOGGER, create_topic
from tests.helpers.txn import OP_TIMEOUT_S, confluent_txn_producer, wait_stable
from tests.helpers.wire import RawConnection

ROUNDS = 125  # two producers: 207 aborted and 43 committed transactions
SMALL_FETCH = 600  # bytes per partition: a few batches per fetch


def _write(bootstrap: str, topic: str) -> list[bytes]:
    """Interleaved transactions of two producers; returns the committed values."""
    producers = [
        confluent_txn_producer(bootstrap, f"range-{uuid.uuid4().hex[:8]}-{i}") for i in (0, 1)
    ]
    for p in producers:
        p.init_transactions(OP_TIMEOUT_S)
    committed: list[bytes] = []

    def send(p: Any, value: bytes) -> None:
        p.produce(topic, value=value, partition=0)
        assert p.flush(OP_TIMEOUT_S) == 0

    a, b = producers
    for i in range(ROUNDS):
        a.begin_transaction()
        send(a, b"a%d-0" % i)
        b.begin_transaction()
        send(b, b"b%d-0" % i)
        send(a, b"a%d-1" % i)
        if i % 5 == 0:
            a.commit_transaction(OP_TIMEOUT_S)
            committed += [b"a%d-0" % i, b"a%d-1" % i]
        else:
            a.abort_transaction(OP_TIMEOUT_S)
        send(b, b"b%d-1" % i)
        if i % 7 == 0:
            b.commit_transaction(OP_TIMEOUT_S)
            committed += [b"b%d-0" % i, b"b%d-1" % i]
        else:
            b.abort_transaction(OP_TIMEOUT_S)
    return committed


def _fetch(bootstrap: str, topic: str, offset: int, max_bytes: int, committed: bool) -> Any:
    request = fetch_v11.FetchRequest(
        replica_id=BrokerId(-1),
        max_wait=datetime.timedelta(0),
        min_bytes=i32(0),
        max_bytes=i32(max_bytes),
        isolation_level=i8(1 if committed else 0),
        session_id=i32(0),
        session_epoch=i32(-1),
        topics=(
            fetch_v11.FetchTopic(
                topic=TopicName(topic),
                partitions=(
                    fetch_v11.FetchPartition(
                        partition=i32(0),
                        current_leader_epoch=i32(-1),
                        fetch_offset=i64(offset),
                        log_start_offset=i64(-1),
                        partition_max_bytes=i32(max_bytes),
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )
    with RawConnection(bootstrap) as conn:
        (partition,) = conn.call(request).responses[0].partitions
    assert partition.error_code.value == 0
    return partition


class Log:
    """The partition as its bytes say: batch starts and the aborted transactions."""

    def __init__(self, raw: bytes) -> None:
        self.batches, end = scan_batches(raw)
        assert end == len(raw)
        self.aborted: list[tuple[int, int, int]] = []  # producer id, first offset, marker
        opened: dict[int, int] = {}
        for b in self.batches:
            h = b.header
            if h.is_control:
                kind, _ = parse_control_record(raw[b.position : b.position + h.size])
                first = opened.pop(h.producer_id, None)
                if first is not None and kind == ControlType.ABORT:
                    self.aborted.append((h.producer_id, first, h.base_offset))
            elif h.is_transactional:
                opened.setdefault(h.producer_id, h.base_offset)

    def start_of(self, offset: int) -> int:
        """Where the batch holding `offset` starts."""
        return next(b.position for b in self.batches if b.header.last_offset >= offset)

    def overlapping(self, offset: int, returned: int) -> list[tuple[int, int]]:
        """What a fetch at `offset` that returned `returned` bytes should list: the aborted
        transactions overlapping [offset, end of the batches returned, one cut counts)."""
        cut = self.start_of(offset) + returned
        end = max(b.header.next_offset for b in self.batches if b.position < cut)
        return [(pid, first) for pid, first, last in self.aborted if last >= offset and first < end]


def _listed(partition: Any) -> list[tuple[int, int]]:
    return [(int(t.producer_id), int(t.first_offset)) for t in partition.aborted_transactions]


def _read_confluent(bootstrap: str, topic: str, end: int) -> list[bytes]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "range-reader",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "max.partition.fetch.bytes": SMALL_FETCH,
            "fetch.max.bytes": 1000,  # librdkafka's least (its message.max.bytes)
            "message.max.bytes": 1000,
            "logger": QUIET_LOGGER,
            "log_level": 0,
        }
    )
    got: list[bytes] = []
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + OP_TIMEOUT_S
        while (c.position([TopicPartition(topic, 0)])[0].offset or 0) < end:
            assert time.monotonic() < deadline, f"librdkafka read {len(got)} records"
            for msg in c.consume(1000, 0.1):
                assert msg.error() is None, msg.error()
                got.append(msg.value())
    finally:
        c.close()
    return got


def _read_kafka_python(bootstrap: str, topic: str, end: int) -> list[bytes]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    c = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        isolation_level="read_committed",
        max_partition_fetch_bytes=SMALL_FETCH,
        fetch_max_bytes=SMALL_FETCH,
    )
    got: list[bytes] = []
    try:
        tp = KTP(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        deadline = time.monotonic() + OP_TIMEOUT_S
        while c.position(tp, timeout_ms=10_000) < end:
            assert time.monotonic() < deadline, f"kafka-python read {len(got)} records"
            for msgs in c.poll(timeout_ms=100, max_records=5000).values():
                got.extend(m.value for m in msgs)
    finally:
        c.close()
    return got


def test_fetch_lists_only_overlapping_aborts_and_consumers_read_exactly_the_committed(
    broker: BrokerProcess,
) -> None:
    bootstrap = broker.bootstrap
    topic = create_topic(bootstrap)
    committed = _write(bootstrap, topic)
    end = wait_stable(bootstrap, topic, [0])[0]
    everything = _fetch(bootstrap, topic, 0, 16 << 20, committed=False)
    log = Log(bytes(everything.records))
    assert len(log.aborted) == 207

    # The start of the log, a few batches: the few transactions those overlap.
    start = _fetch(bootstrap, topic, 0, SMALL_FETCH, committed=True)
    assert 0 < len(_listed(start)) < 10
    assert _listed(start) == log.overlapping(0, len(start.records))
    # Anywhere in the log, and cut anywhere (inside a batch or not).
    for offset in range(0, end, 37):
        for max_bytes in (1, 250, SMALL_FETCH, 4000):
            got = _fetch(bootstrap, topic, offset, max_bytes, committed=True)
            assert _listed(got) == log.overlapping(offset, len(got.records)), (offset, max_bytes)
    # A fetch of everything lists every aborted transaction.
    whole = _fetch(bootstrap, topic, 0, 16 << 20, committed=True)
    assert _listed(whole) == [(pid, first) for pid, first, _ in log.aborted]

    # Every committed record once, no aborted one (the two producers' records interleave).
    assert sorted(_read_confluent(bootstrap, topic, end)) == sorted(committed)
    assert sorted(_read_kafka_python(bootstrap, topic, end)) == sorted(committed)
