"""Throughput workloads: topics, producers (idempotent and transactional) and a consumer.

Every producer uses acks=all, `linger.ms=5` and `batch.size=1000000`, idempotence on unless
the caller says otherwise. Each function returns the seconds its timed part took; the
caller turns them into MB/s or records/s.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

__all__ = [
    "COMMIT_INTERVAL_S",
    "KIB",
    "BenchError",
    "Endpoint",
    "Failures",
    "client_base",
    "consume",
    "create_topic",
    "kafka_reason",
    "produce",
    "produce_transactional",
    "producer_config",
    "send",
    "transactional_producer",
]

KIB = 1024
COMMIT_INTERVAL_S = 0.1  # "transactions committing every 100 ms"


#: The broker to measure: its bootstrap servers, or a client config that names them
#: (`bootstrap.servers` and security settings such as `security.protocol`, `sasl.*`).
Endpoint = str | Mapping[str, object]


def client_base(endpoint: Endpoint) -> dict[str, Any]:
    """The librdkafka settings every client of a run starts from."""
    return {"bootstrap.servers": endpoint} if isinstance(endpoint, str) else dict(endpoint)


class BenchError(RuntimeError):
    """A workload could not finish: a failed delivery, a missing topic, too few records."""


def kafka_reason(exc: BaseException) -> str:
    """The readable part of a confluent-kafka exception (its KafkaError's text)."""
    args = getattr(exc, "args", ())
    if args and hasattr(args[0], "str"):
        return str(args[0].str())
    return str(exc) or type(exc).__name__


def create_topic(bootstrap: Endpoint, topic: str, partitions: int = 1) -> None:
    """Create `topic` (the broker's default replication) and wait until Metadata shows all
    its partitions: clients that start right after must not race the creation."""
    admin = AdminClient({**client_base(bootstrap), "log_level": 0})
    try:
        admin.create_topics([NewTopic(topic, num_partitions=partitions)])[topic].result(60)
    except (KafkaException, TimeoutError) as exc:
        raise BenchError(f"cannot create topic {topic}: {kafka_reason(exc)}") from exc
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = admin.list_topics(topic, timeout=10).topics.get(topic)
        if found is not None and found.error is None and len(found.partitions) == partitions:
            return
        time.sleep(0.05)
    raise BenchError(f"topic {topic} did not appear")


def producer_config(
    bootstrap: Endpoint, extra: dict[str, object] | None = None
) -> dict[str, object]:
    # A deep queue and ~1 MB batches, so the producer is never the bottleneck being measured.
    conf: dict[str, object] = {
        **client_base(bootstrap),
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "batch.size": 1_000_000,
        "queue.buffering.max.messages": 1_000_000,
        "log_level": 0,
    }
    conf.update(extra or {})
    return conf


class Failures:
    """A delivery callback that keeps the errors, so a run fails instead of looking fast."""

    def __init__(self) -> None:
        self.errors: list[object] = []

    def __call__(self, err: object, _msg: object) -> None:
        if err is not None:
            self.errors.append(err)

    def check(self) -> None:
        if self.errors:
            first = self.errors[0]
            reason = first.str() if hasattr(first, "str") else str(first)  # a KafkaError
            raise BenchError(f"{len(self.errors)} deliveries failed, the first with: {reason}")


def send(producer: Producer, topic: str, value: bytes, report: Failures, partition: int) -> None:
    """Produce one record; a full local queue is waited out (serving callbacks), not an error.
    `partition` -1 leaves the choice to the partitioner."""
    while True:
        try:
            if partition < 0:
                producer.produce(topic, value, on_delivery=report)
            else:
                producer.produce(topic, value, partition=partition, on_delivery=report)
            return
        except BufferError:
            producer.poll(0.01)


def produce(
    bootstrap: Endpoint,
    topic: str,
    messages: int,
    value_bytes: int,
    extra: dict[str, object] | None = None,
    partitions: int = 0,
) -> float:
    """Seconds to produce and acknowledge `messages` values (acks=all, idempotent by default).
    With `partitions`, records go round-robin to partitions 0..partitions-1. One warm-up
    record (not timed, so the topic holds `messages` + 1) first connects the producer, fetches
    the topic's metadata and, if idempotent, its producer id: the figure is steady state."""
    producer = Producer(producer_config(bootstrap, extra))
    value = b"v" * value_bytes
    report = Failures()
    send(producer, topic, value, report, 0 if partitions else -1)
    producer.flush(60)
    start = time.perf_counter()
    for i in range(messages):
        send(producer, topic, value, report, i % partitions if partitions else -1)
        if i % 10_000 == 0:
            producer.poll(0)
    producer.flush(300)
    elapsed = time.perf_counter() - start
    report.check()
    return elapsed


def transactional_producer(bootstrap: Endpoint, transactional_id: str) -> Producer:
    """A producer with `transactional_id`, initialised (producer id fetched, older fenced)."""
    producer = Producer(producer_config(bootstrap, {"transactional.id": transactional_id}))
    producer.init_transactions(60)
    return producer


def produce_transactional(
    producer: Producer,
    topic: str,
    messages: int,
    value_bytes: int,
    *,
    per_transaction: int = 0,
    partition: int = -1,
) -> float:
    """Seconds to produce `messages` values in transactions and commit the last one. A
    transaction commits after `per_transaction` records, or when 0, every 100 ms."""
    value = b"v" * value_bytes
    report = Failures()
    producer.list_topics(topic, timeout=30)  # as `produce` warms up: metadata before timing
    start = time.perf_counter()
    producer.begin_transaction()
    opened = start
    in_transaction = 0
    for i in range(messages):
        send(producer, topic, value, report, partition)
        in_transaction += 1
        if per_transaction:
            due = in_transaction >= per_transaction
        else:
            # Reading the clock every 64 records keeps it out of the per-record cost.
            due = i % 64 == 0 and time.perf_counter() - opened >= COMMIT_INTERVAL_S
        if due and i < messages - 1:
            producer.commit_transaction(60)
            producer.begin_transaction()
            opened = time.perf_counter()
            in_transaction = 0
        elif i % 10_000 == 0:
            producer.poll(0)
    producer.commit_transaction(60)
    elapsed = time.perf_counter() - start
    report.check()
    return elapsed


def consume(
    bootstrap: Endpoint, topic: str, count: int, isolation: str, *, warm_up: bool = False
) -> float:
    """Seconds to consume `count` records of partition 0 from offset 0, by assignment (no
    group join, nothing committed). `isolation` is read_uncommitted or read_committed.
    With `warm_up`, the record at offset 0 is read first, untimed (connections and, on a
    secured listener, the TLS handshake and the login), and the `count` timed records are
    the ones after it: `produce`'s topics hold its warm-up record and `count` more."""
    consumer = Consumer(
        {
            **client_base(bootstrap),
            "group.id": "bench",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "fetch.max.bytes": 52_428_800,
            "log_level": 0,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    deadline = time.monotonic() + 120
    while warm_up and time.monotonic() < deadline:
        if any(message.error() is None for message in consumer.consume(1, 1.0)):
            break
    got = 0
    start = time.perf_counter()
    while got < count and time.monotonic() < deadline:
        # consume(n, t) waits for n records or t: never ask for more than are left, or the
        # last call would wait out its timeout (a count that is not a multiple of 10,000).
        for message in consumer.consume(min(10_000, count - got), 1.0):
            if message.error() is None:
                got += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    if got < count:
        raise BenchError(f"consumed {got} of {count}")
    return elapsed
