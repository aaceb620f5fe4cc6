"""The figures of `onceflow bench`: the suite's client workloads against any broker.

Names match the suite's where they mean the same thing, without its `_onceflow` / `_mock`
part (there is no reference cluster here); the value size is `Sizes.value_bytes`:

- `produce_<V>B_MBps`, `produce_<V>B_msgps`: idempotent produce, acks=all, one partition;
- `produce_txn_100ms_<V>B_MBps`: transactional produce committing every 100 ms, and
  `produce_txn_100ms_ratio_to_idempotent`;
- `consume_read_{uncommitted,committed}_MBps`: the transactional topic read from offset 0,
  `consume_committed_ratio_to_uncommitted` and `consume_committed_ratio_to_produce`;
- `latency_{plain,idempotent,transactional}_{p50,p99,p99.9}_ms` (100 B values).

Each figure is the median of `repeat` runs. Every topic is new, has one partition and the
broker's default replication, and is named with the run's prefix, so `delete_topics` can
remove exactly what the run created.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from onceflow.bench.latency import MODES, latency_run
from onceflow.bench.stats import median_of, medians
from onceflow.bench.workloads import (
    KIB,
    BenchError,
    Endpoint,
    client_base,
    consume,
    create_topic,
    kafka_reason,
    produce,
    produce_transactional,
    transactional_producer,
)

__all__ = ["SECTIONS", "Sizes", "delete_topics", "measure", "run_prefix"]

SECTIONS = ("produce", "transactional", "consume", "latency")
DELETE_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Sizes:
    messages: int = 200_000  # produce, transactional produce and consume
    value_bytes: int = KIB
    repeat: int = 3
    latency_rate: int = 2000  # msg/s offered
    latency_seconds: float = 3.0


def run_prefix() -> str:
    """`onceflow-bench-<8 hex>-`: names this run's topics and transactional ids."""
    return f"onceflow-bench-{uuid.uuid4().hex[:8]}-"


@contextmanager
def _step(name: str) -> Iterator[None]:
    """Failures become one BenchError that names the step (a traceback helps nobody here)."""
    try:
        yield
    except BenchError as exc:
        raise BenchError(f"{name}: {exc}") from exc
    except (KafkaException, TimeoutError) as exc:
        raise BenchError(f"{name}: {kafka_reason(exc)}") from exc


def _transactional_run(bootstrap: Endpoint, topic: str, sizes: Sizes) -> float:
    create_topic(bootstrap, topic)
    producer = transactional_producer(bootstrap, topic)  # the topic's name is unique: reuse it
    return produce_transactional(producer, topic, sizes.messages, sizes.value_bytes, partition=0)


def measure(
    bootstrap: Endpoint,
    sizes: Sizes,
    sections: Collection[str],
    prefix: str,
    progress: Callable[[str], None] = lambda _line: None,
) -> dict[str, float]:
    """The figures of `sections` (some of SECTIONS), in that order."""
    out: dict[str, float] = {}
    n, v = sizes.messages, sizes.value_bytes
    mb = n * v / 1e6
    runs = f"{sizes.repeat} run{'s' if sizes.repeat > 1 else ''}"

    if "produce" in sections:
        progress(f"idempotent produce, {runs} of {n:,} x {v} B")

        def idempotent(i: int) -> float:
            create_topic(bootstrap, f"{prefix}produce-{i}")
            return produce(bootstrap, f"{prefix}produce-{i}", n, v)

        with _step("idempotent produce"):
            seconds = median_of(sizes.repeat, idempotent)
        out[f"produce_{v}B_MBps"] = mb / seconds
        out[f"produce_{v}B_msgps"] = n / seconds

    # Consume reads the first transactional topic: commit markers sit between its batches,
    # so read_committed works through real transactional data.
    txn_topic = f"{prefix}txn-0"
    if "transactional" in sections:
        progress(f"transactional produce (commit every 100 ms), {runs} of {n:,} x {v} B")
        with _step("transactional produce"):
            seconds = median_of(
                sizes.repeat, lambda i: _transactional_run(bootstrap, f"{prefix}txn-{i}", sizes)
            )
        out[f"produce_txn_100ms_{v}B_MBps"] = mb / seconds
        if "produce" in sections:
            out["produce_txn_100ms_ratio_to_idempotent"] = (
                out[f"produce_txn_100ms_{v}B_MBps"] / out[f"produce_{v}B_MBps"]
            )

    if "consume" in sections:
        if "transactional" not in sections:
            progress(f"writing {n:,} transactional records to consume (not timed)")
            with _step("transactional produce"):
                _transactional_run(bootstrap, txn_topic, sizes)
        for isolation in ("read_uncommitted", "read_committed"):
            progress(f"consume {isolation}, {runs} of {n:,} records")

            def read(_i: int, level: str = isolation) -> float:
                return consume(bootstrap, txn_topic, n, level)

            with _step(f"consume {isolation}"):
                out[f"consume_{isolation}_MBps"] = mb / median_of(sizes.repeat, read)
        out["consume_committed_ratio_to_uncommitted"] = (
            out["consume_read_committed_MBps"] / out["consume_read_uncommitted_MBps"]
        )
        if "produce" in sections:
            out["consume_committed_ratio_to_produce"] = (
                out["consume_read_committed_MBps"] / out[f"produce_{v}B_MBps"]
            )

    if "latency" in sections:
        rate = sizes.latency_rate
        for mode in MODES:
            progress(f"latency {mode}, {runs} of {rate:,} msg/s for {sizes.latency_seconds:g} s")
            with _step(f"latency {mode}"):
                results = [
                    latency_run(bootstrap, mode, rate, sizes.latency_seconds, prefix)
                    for _ in range(sizes.repeat)
                ]
            out.update(medians(results))
    return out


def delete_topics(bootstrap: Endpoint, prefix: str) -> list[str]:
    """Delete every topic whose name starts with `prefix`; returns their names. A broker that
    refuses (Kafka's delete.topic.enable=false, missing ACLs) is a BenchError."""
    admin = AdminClient({**client_base(bootstrap), "log_level": 0})
    try:
        metadata = admin.list_topics(timeout=DELETE_TIMEOUT_S)
    except KafkaException as exc:
        raise BenchError(f"cannot list topics: {kafka_reason(exc)}") from exc
    names = sorted(name for name in metadata.topics if name.startswith(prefix))
    if not names:
        return []
    futures = admin.delete_topics(
        names, operation_timeout=DELETE_TIMEOUT_S, request_timeout=DELETE_TIMEOUT_S
    )
    failed: list[str] = []
    for name, future in futures.items():
        try:
            future.result(DELETE_TIMEOUT_S)
        except (KafkaException, TimeoutError) as exc:
            failed.append(f"{name} ({kafka_reason(exc)})")
    if failed:
        raise BenchError(
            f"cannot delete {len(failed)} of {len(names)} topics {prefix}*: {failed[0]}"
        )
    return names
