"""Figure 10: the participant client (onceflow.client.participant) against confluent-kafka's
transactional producer, same broker, same run; the participant both record by record
(`produce`) and with columns (`produce_columns`, the per-batch Spark sink's path).

Both write `messages` values to partition 0 of a new topic in one transaction, acks=all,
~1 MB batches, the producer initialised and the topic's metadata fetched before the clock
starts. The participant's run is its two-phase path: begin, produce, prepare, then
`complete(commit=True)` from a new connection, as a deciding process would. confluent-kafka's
is begin, produce, commit. They run in turn, per value size, `repeat` times.
"""

from __future__ import annotations

import statistics
import time
import uuid

from benchmarks.common import OnceflowBroker
from onceflow.bench import (
    KIB,
    create_topic,
    produce_transactional,
    transactional_producer,
)
from onceflow.client.participant import BinaryColumn, TwoPhaseProducer, complete

__all__ = ["TWO_PC", "participant_figures", "participant_run"]

TWO_PC = {"transaction.two.phase.commit.enable": "true"}
SETTINGS = {"batch.size": 1_000_000, "linger.ms": 5}


def participant_run(bootstrap: str, topic: str, messages: int, value_bytes: int) -> float:
    """Seconds to produce `messages` values in one two-phase transaction and commit it."""
    value = b"v" * value_bytes
    with TwoPhaseProducer(bootstrap, f"bench-2pc-{uuid.uuid4().hex[:8]}", **SETTINGS) as producer:
        producer.init()
        producer.begin()  # an untimed warm-up transaction: metadata, the partition's add
        producer.produce(topic, value, partition=0)
        producer.commit()
        start = time.perf_counter()
        producer.begin()
        for _ in range(messages):
            producer.produce(topic, value, partition=0)
        prepared = producer.prepare()
    complete(prepared, True, bootstrap_servers=bootstrap, **SETTINGS)
    return time.perf_counter() - start


def columns_run(bootstrap: str, topic: str, messages: int, value_bytes: int) -> float:
    """`participant_run` with the values handed over as columns of 10,000 (as a Spark task's
    Arrow batches) through `produce_columns`; building the columns is not timed."""
    chunk = 10_000
    columns = [
        BinaryColumn.of([b"v" * value_bytes] * min(chunk, messages - start))
        for start in range(0, messages, chunk)
    ]
    with TwoPhaseProducer(bootstrap, f"bench-2pc-{uuid.uuid4().hex[:8]}", **SETTINGS) as producer:
        producer.init()
        producer.begin()
        producer.produce(topic, b"v" * value_bytes, partition=0)
        producer.commit()
        start = time.perf_counter()
        producer.begin()
        for values in columns:
            producer.produce_columns(topic, values, partition=0)
        prepared = producer.prepare()
    complete(prepared, True, bootstrap_servers=bootstrap, **SETTINGS)
    return time.perf_counter() - start


def confluent_run(bootstrap: str, topic: str, messages: int, value_bytes: int) -> float:
    producer = transactional_producer(bootstrap, f"bench-txn-{uuid.uuid4().hex[:8]}")
    return produce_transactional(
        producer, topic, messages, value_bytes, per_transaction=messages, partition=0
    )


def participant_figures(messages: int, repeat: int) -> dict[str, float]:
    """Figure 10 on a broker of its own with two-phase commit switched on."""
    out: dict[str, float] = {}
    broker = OnceflowBroker(TWO_PC)
    try:
        for value_bytes in (KIB, 100):
            runs: dict[str, list[float]] = {"participant": [], "columns": [], "confluent": []}
            for i in range(repeat):
                for client, run in (
                    ("participant", participant_run),
                    ("columns", columns_run),
                    ("confluent", confluent_run),
                ):
                    topic = f"participant-{client}-{value_bytes}-{i}"
                    create_topic(broker.bootstrap, topic)
                    runs[client].append(run(broker.bootstrap, topic, messages, value_bytes))
            for client, seconds in runs.items():
                median = statistics.median(seconds)
                out[f"participant_produce_{value_bytes}B_{client}_MBps"] = (
                    messages * value_bytes / 1e6 / median
                )
                out[f"participant_produce_{value_bytes}B_{client}_msgps"] = messages / median
            for client, suffix in (("participant", ""), ("columns", "_columns")):
                out[f"participant_produce_{value_bytes}B{suffix}_ratio_to_confluent"] = (
                    statistics.median(
                        ref / measured
                        for ref, measured in zip(runs["confluent"], runs[client], strict=True)
                    )
                )
    finally:
        broker.close()
    return out
