"""KafkaJS transactions against a broker: its transactional producer's committed and aborted
transactions read by its read_committed consumer (and by confluent-kafka's), and transactions
of two confluent-kafka producers interleaved on one partition read by KafkaJS.

KafkaJS's read_committed filter activates at most one aborted transaction per record, so a
fetch that starts inside two or more aborted transactions (frequent with a small `maxBytes`)
lets records of all but the first through; Kafka's brokers answer such fetches the same way.
These tests read with KafkaJS's default fetch sizes from the start of the log, where the
filter is right; the README's known issues name the bug.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import consume_until, consumer, create_topic, producer, topic_name
from tests.node.kafkajs import ok, require_kafkajs, run_steps, step

TIMEOUT_S = 20.0


@pytest.fixture(scope="module")
def node() -> Iterator[str]:
    yield require_kafkajs()


def messages(prefix: str, n: int, partitions: int) -> list[dict[str, Any]]:
    return [{"value": f"{prefix}{i}", "partition": i % partitions} for i in range(n)]


def read_committed_values(broker: BrokerProcess, topic: str, partitions: int, n: int) -> list[str]:
    c = consumer(broker.bootstrap, **{"isolation.level": "read_committed"})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got = consume_until(c, lambda ms: len(ms) >= n, what="committed records")
    finally:
        c.close()
    return sorted(m.value().decode() for m in got)


def test_kafkajs_transactions_read_committed(node: str, shared_broker: BrokerProcess) -> None:
    topic = create_topic(shared_broker.bootstrap, partitions=2)
    txn_id = topic_name("kjs-txn")

    def transaction(prefix: str, outcome: str) -> dict[str, Any]:
        batch = messages(prefix, 4, 2)
        args = {"transactionalId": txn_id, "topic": topic, "messages": batch, "outcome": outcome}
        return step("transaction", args)

    def consume(count: int, **extra: Any) -> dict[str, Any]:
        return step(
            "consume", {"groupId": topic_name("kjs-rc"), "topic": topic, "count": count, **extra}
        )

    results = run_steps(
        node,
        shared_broker.bootstrap,
        [
            transaction("committed-a", "commit"),
            transaction("aborted-b", "abort"),
            transaction("committed-c", "commit"),
            consume(8),
            consume(12, readUncommitted=True),
        ],
    )
    assert [ok(r) for r in results[:3]] == ["commit", "abort", "commit"]
    committed = sorted(
        [f"committed-a{i}" for i in range(4)] + [f"committed-c{i}" for i in range(4)]
    )
    assert sorted(m["value"] for m in ok(results[3])) == committed
    uncommitted = ok(results[4])
    assert sorted(m["value"] for m in uncommitted) == sorted(
        committed + [f"aborted-b{i}" for i in range(4)]
    )
    # Offsets leave room for the markers: per partition, 2 records and 1 marker a transaction.
    assert sorted(int(m["offset"]) for m in uncommitted if m["partition"] == 0) == [
        0, 1, 3, 4, 6, 7,
    ]  # fmt: skip
    assert read_committed_values(shared_broker, topic, 2, 8) == committed


def test_kafkajs_skips_interleaved_aborted_transactions(
    node: str, shared_broker: BrokerProcess
) -> None:
    """Two transactions open at once on one partition, both aborted, between committed ones:
    the aborted-transaction list of the fetch names both, and KafkaJS drops their records."""
    topic = create_topic(shared_broker.bootstrap)
    first, second = (
        producer(
            shared_broker.bootstrap,
            **{"transactional.id": topic_name("kjs-il"), "enable.idempotence": True},
        )
        for _ in range(2)
    )
    plain = producer(shared_broker.bootstrap)
    plain.produce(topic, b"before", partition=0)
    plain.flush(TIMEOUT_S)
    for p in (first, second):
        p.init_transactions(TIMEOUT_S)
        p.begin_transaction()
    for i in range(3):
        for name, p in (("first", first), ("second", second)):
            p.produce(topic, f"aborted-{name}-{i}".encode(), partition=0)
            assert p.flush(TIMEOUT_S) == 0
    first.abort_transaction(TIMEOUT_S)
    second.abort_transaction(TIMEOUT_S)
    plain.produce(topic, b"after", partition=0)
    plain.flush(TIMEOUT_S)

    [consumed] = run_steps(
        node,
        shared_broker.bootstrap,
        [step("consume", {"groupId": topic_name("kjs-il"), "topic": topic, "count": 2})],
    )
    assert [(m["offset"], m["value"]) for m in ok(consumed)] == [("0", "before"), ("9", "after")]
    assert read_committed_values(shared_broker, topic, 1, 2) == ["after", "before"]
