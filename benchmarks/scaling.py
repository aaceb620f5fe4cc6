"""Scaling: partitions, concurrent transactional producers, transaction size, memory."""

from __future__ import annotations

import threading
import time
import uuid

from benchmarks.common import OnceflowBroker
from onceflow.bench import (
    KIB,
    create_topic,
    produce,
    produce_transactional,
    transactional_producer,
)

PARTITION_COUNTS = (1, 10, 100)
PRODUCER_COUNTS = (1, 4, 16)
TRANSACTION_SIZES = (1, 100, 10_000)


def partitions_run(bootstrap: str, partitions: int, messages: int) -> float:
    """Produce MB/s of 1 KiB values spread round-robin over `partitions` partitions."""
    topic = f"scale-p{partitions}-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions)
    seconds = produce(bootstrap, topic, messages, KIB, partitions=partitions)
    return messages * KIB / 1e6 / seconds


def producers_run(bootstrap: str, producers: int, messages: int) -> float:
    """Records/s (1 KiB) of `producers` concurrent transactional producers, one thread each,
    each to its own partition of one topic, each committing every 100 ms."""
    topic = f"scale-txn{producers}-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, producers)
    each = max(1, messages // producers)
    clients = [
        transactional_producer(bootstrap, f"scale-{uuid.uuid4().hex[:8]}-{k}")
        for k in range(producers)
    ]
    errors: list[BaseException] = []
    barrier = threading.Barrier(producers + 1)

    def run(k: int) -> None:
        barrier.wait()
        try:
            produce_transactional(clients[k], topic, each, KIB, partition=k)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(producers)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return each * producers / elapsed


def transaction_size_run(bootstrap: str, per_transaction: int, transactions: int) -> float:
    """Records/s (1 KiB) of one transactional producer committing every `per_transaction`."""
    topic = f"scale-size{per_transaction}-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic)
    producer = transactional_producer(bootstrap, f"size-{uuid.uuid4().hex[:8]}")
    records = per_transaction * transactions
    seconds = produce_transactional(
        producer, topic, records, KIB, per_transaction=per_transaction, partition=0
    )
    return records / seconds


def memory_run(broker: OnceflowBroker, partitions: int) -> float:
    """KiB of broker RSS per partition: VmRSS before and after creating a topic of
    `partitions` partitions (after it appears in Metadata and a 1 s settle)."""
    time.sleep(0.5)
    before = broker.rss_bytes()
    create_topic(broker.bootstrap, f"memory-{uuid.uuid4().hex[:8]}", partitions)
    time.sleep(1.0)
    after = broker.rss_bytes()
    return (after - before) / partitions / KIB
