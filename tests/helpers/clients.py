"""confluent-kafka helpers with quiet logging and a deadline on every operation.

Every helper takes a timeout and fails with an AssertionError that says what was missing,
so a broker bug fails a test instead of hanging it.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

__all__ = [
    "QUIET_LOGGER",
    "Delivered",
    "admin_client",
    "assign_from",
    "committed_offsets",
    "consume_until",
    "consumer",
    "create_topic",
    "drain",
    "produce_and_confirm",
    "producer",
    "summarise",
    "topic_name",
    "wait_assignment",
]

# librdkafka logs every reconnect; a logger above CRITICAL keeps test output readable.
QUIET_LOGGER = logging.getLogger("tests.librdkafka")
QUIET_LOGGER.setLevel(logging.CRITICAL + 1)
QUIET_LOGGER.propagate = False

OP_TIMEOUT_S = 20.0


def topic_name(prefix: str = "t") -> str:
    """A topic name no other test uses (tests share module-scoped brokers)."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _quiet(conf: Mapping[str, Any]) -> dict[str, Any]:
    return {"logger": QUIET_LOGGER, "log_level": 0, **conf}


def kafka_python_subscribe(consumer: Any, topics: Sequence[str]) -> None:
    """Subscribe a kafka-python consumer once it knows the topics' partitions.

    kafka-python 3.0.12 strands a member whose first join runs before it has the topics'
    metadata: the metadata's arrival starts a second join, and if a poll() times out while
    that join is in flight, its result is never applied and heartbeats stay off (the member
    is dropped and never rejoins). Polling every 5 ms, 9 consumers in 10 stalled so; none
    of 10 once the partitions were known first."""
    for topic in topics:
        assert consumer.partitions_for_topic(topic), f"kafka-python sees no partitions of {topic}"
    consumer.subscribe(list(topics))


def admin_client(bootstrap: str, **extra: Any) -> AdminClient:
    return AdminClient(_quiet({"bootstrap.servers": bootstrap, **extra}))


def producer(bootstrap: str, **extra: Any) -> Producer:
    conf = {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": False,  # idempotence is a later work item
        "message.timeout.ms": 20_000,
        "linger.ms": 5,
        **extra,
    }
    return Producer(_quiet(conf))


def consumer(bootstrap: str, group_id: str | None = None, **extra: Any) -> Consumer:
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group_id or f"g-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
        **extra,
    }
    return Consumer(_quiet(conf))


def create_topic(
    bootstrap: str,
    name: str | None = None,
    partitions: int = 1,
    config: Mapping[str, str] | None = None,
    timeout: float = OP_TIMEOUT_S,
    replication_factor: int = 1,
) -> str:
    name = name or topic_name()
    admin = admin_client(bootstrap)
    futures = admin.create_topics(
        [NewTopic(name, partitions, replication_factor, config=dict(config or {}))],
        request_timeout=timeout,
    )
    futures[name].result(timeout=timeout)
    # Wait until Metadata shows it with every partition (CreateTopics returned, so at once).
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        md = admin.list_topics(name, timeout=timeout)
        t = md.topics.get(name)
        if t is not None and t.error is None and len(t.partitions) == partitions:
            return name
        time.sleep(0.05)
    raise AssertionError(f"topic {name} not visible with {partitions} partitions after creation")


@dataclass
class Delivered:
    """Outcome of each produced message, from the delivery callbacks."""

    ok: list[tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes]] | None]] = field(
        default_factory=list
    )  # (partition, offset, key, value, headers)
    errors: list[KafkaError] = field(default_factory=list)

    def callback(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.errors.append(err)
        else:
            self.ok.append((msg.partition(), msg.offset(), msg.key(), msg.value(), msg.headers()))


def produce_and_confirm(
    p: Producer,
    topic: str,
    records: Iterable[
        tuple[int | None, bytes | None, bytes | None, list[tuple[str, bytes]] | None]
    ],
    timeout: float = OP_TIMEOUT_S,
) -> Delivered:
    """Produce (partition, key, value, headers) records and wait for every delivery report."""
    out = Delivered()
    n = 0
    for partition, key, value, headers in records:
        kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": out.callback}
        if partition is not None:
            kwargs["partition"] = partition
        if headers:
            kwargs["headers"] = headers
        while True:
            try:
                p.produce(topic, **kwargs)
                break
            except BufferError:
                p.poll(0.1)
        n += 1
        p.poll(0)
    remaining = p.flush(timeout)
    assert remaining == 0, f"{remaining} of {n} messages still undelivered after {timeout} s"
    assert len(out.ok) + len(out.errors) == n
    return out


def consume_until(
    c: Consumer,
    done: Any,
    timeout: float = OP_TIMEOUT_S,
    what: str = "records",
) -> list[Message]:
    """Poll until `done(messages)` is true; fail after `timeout` showing what arrived.

    Message-level errors other than partition EOF fail at once.
    """
    got: list[Message] = []
    deadline = time.monotonic() + timeout
    while not done(got):
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout} s waiting for {what}; got {len(got)}: {summarise(got)}"
            )
        msg = c.poll(0.2)
        if msg is None:
            continue
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                continue
            raise AssertionError(f"consumer error while waiting for {what}: {err}")
        got.append(msg)
    return got


def drain(c: Consumer, seconds: float) -> list[Message]:
    """Every record that arrives within `seconds` (to check that nothing more comes)."""
    got: list[Message] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        msg = c.poll(0.1)
        if msg is None:
            continue
        err = msg.error()
        if err is not None and err.code() != KafkaError._PARTITION_EOF:
            raise AssertionError(f"consumer error: {err}")
        if err is None:
            got.append(msg)
    return got


def summarise(msgs: Sequence[Message], limit: int = 10) -> str:
    parts = [f"{m.topic()}[{m.partition()}]@{m.offset()}" for m in msgs[:limit]]
    more = f" ... (+{len(msgs) - limit})" if len(msgs) > limit else ""
    return ", ".join(parts) + more


def assign_from(
    c: Consumer, topic: str, partitions: Iterable[int], offset: int = OFFSET_BEGINNING
) -> None:
    c.assign([TopicPartition(topic, p, offset) for p in partitions])


def wait_assignment(
    c: Consumer, predicate: Any, timeout: float = OP_TIMEOUT_S
) -> list[TopicPartition]:
    """Poll (delivering rebalance callbacks) until predicate(assignment) holds."""
    deadline = time.monotonic() + timeout
    while True:
        assignment = c.assignment()
        if predicate(assignment):
            return assignment
        if time.monotonic() > deadline:
            raise AssertionError(f"assignment never satisfied the condition; last: {assignment}")
        msg = c.poll(0.2)
        err = msg.error() if msg is not None else None
        if err is not None and err.code() != KafkaError._PARTITION_EOF:
            raise AssertionError(f"consumer error while waiting for assignment: {err}")


def committed_offsets(
    c: Consumer, topic: str, partitions: Iterable[int], timeout: float = OP_TIMEOUT_S
) -> dict[int, int]:
    tps = c.committed([TopicPartition(topic, p) for p in partitions], timeout=timeout)
    for tp in tps:
        if tp.error is not None:
            raise KafkaException(tp.error)
    return {tp.partition: tp.offset for tp in tps}


def stable_committed(
    bootstrap: str, group: str, topic: str, partition: int = 0, timeout: float = OP_TIMEOUT_S
) -> tuple[int, str | None]:
    """A group's committed offset and metadata of one partition as librdkafka reads it,
    with `require_stable` (a read_committed consumer's OffsetFetch)."""
    c = consumer(bootstrap, group, **{"isolation.level": "read_committed"})
    try:
        (tp,) = c.committed([TopicPartition(topic, partition)], timeout=timeout)
        return tp.offset, tp.metadata
    finally:
        c.close()
