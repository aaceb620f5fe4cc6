"""End-to-end latency at a fixed offered rate, with a read_committed consumer.

One producer sends at `rate` msg/s for `seconds`; each value starts with the time the record
was due to be sent (open loop: a producer that falls behind its schedule shows as latency,
not as a lower rate). A consumer in a thread of the same process, assigned to the partition
from offset 0 with isolation.level=read_committed, records now - due time for each record.
"""

from __future__ import annotations

import struct
import threading
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition

from onceflow.bench.workloads import (
    COMMIT_INTERVAL_S,
    BenchError,
    Endpoint,
    Failures,
    client_base,
    create_topic,
    producer_config,
    send,
)

__all__ = ["MODES", "VALUE_BYTES", "latency_run", "percentile"]

MODES = ("plain", "idempotent", "transactional")
VALUE_BYTES = 100


def percentile(sorted_values: list[float], q: float) -> float:
    """The nearest-rank `q` quantile of a non-empty sorted list."""
    index = min(len(sorted_values) - 1, max(0, round(q * len(sorted_values)) - 1))
    return sorted_values[index]


def latency_run(
    bootstrap: Endpoint, mode: str, rate: int, seconds: float, prefix: str = ""
) -> dict[str, float]:
    """Latency percentiles in milliseconds for one run of `mode`, on a new topic whose name
    (and transactional id) starts with `prefix`."""
    topic = f"{prefix}latency-{mode}-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic)
    count = int(rate * seconds)
    extra: dict[str, object] = {"linger.ms": 1, "enable.idempotence": mode != "plain"}
    if mode == "plain":
        extra["acks"] = "all"
    if mode == "transactional":
        extra["transactional.id"] = f"{prefix}latency-{uuid.uuid4().hex[:8]}"
    producer = Producer(producer_config(bootstrap, extra))
    if mode == "transactional":
        producer.init_transactions(60)

    consumer = Consumer(
        {
            **client_base(bootstrap),
            "group.id": "bench-latency",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "log_level": 0,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    latencies: list[float] = []
    ready = threading.Event()
    done = threading.Event()

    def consume() -> None:
        deadline = time.monotonic() + seconds + 60
        while len(latencies) < count and time.monotonic() < deadline:
            # poll() returns as soon as one record is there (consume(n, t) would wait for n
            # records or t); then take whatever else is already fetched without waiting.
            first = consumer.poll(0.05)
            ready.set()
            if first is None:
                continue
            now = time.perf_counter()
            for message in [first, *consumer.consume(1000, 0)]:
                value = message.value()
                if message.error() is None and value is not None:
                    latencies.append(now - struct.unpack_from(">d", value)[0])
        done.set()

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    ready.wait(30)  # the consumer is polling before the first record is due
    padding = b"p" * (VALUE_BYTES - 8)
    report = Failures()
    interval = 1.0 / rate
    start = time.perf_counter()
    if mode == "transactional":
        producer.begin_transaction()
    opened = start
    for i in range(count):
        due = start + i * interval
        wait = due - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        send(producer, topic, struct.pack(">d", due) + padding, report, 0)
        producer.poll(0)
        if mode == "transactional" and time.perf_counter() - opened >= COMMIT_INTERVAL_S:
            producer.commit_transaction(60)
            producer.begin_transaction()
            opened = time.perf_counter()
    if mode == "transactional":
        producer.commit_transaction(60)
    producer.flush(60)
    done.wait(seconds + 90)
    thread.join(5)
    consumer.close()
    report.check()
    if len(latencies) < count:
        raise BenchError(f"latency ({mode}): consumed {len(latencies)} of {count}")
    ordered = sorted(latencies)
    return {
        f"latency_{mode}_p50_ms": percentile(ordered, 0.50) * 1000,
        f"latency_{mode}_p99_ms": percentile(ordered, 0.99) * 1000,
        f"latency_{mode}_p99.9_ms": percentile(ordered, 0.999) * 1000,
    }
