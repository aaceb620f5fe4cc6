"""Recovery after kill -9: seconds from starting the broker process until it answers a
Metadata request, with one large partition, with and without a producer-state snapshot.

The partition is built by an idempotent confluent producer (1 KiB values in batches of up to
16 KiB, so there are many batches to replay), so the log carries producer state. Segments
have a fixed size whatever the partition's size, so rolls write producer-state snapshots
(`<offset>.snapshot`) and move the recovery point: with a snapshot, recovery scans only the
active segment, and its time should not grow with the log. Each repetition: kill -9, start
(timed: "with snapshot"), kill -9, delete every `.snapshot` file, start (timed: "without":
producer state is replayed from every batch header of the log).
"""

from __future__ import annotations

import os

from benchmarks.common import OnceflowBroker
from onceflow.bench import KIB, create_topic, produce

TOPIC = "recovery"


def build(size_bytes: int, segment_bytes: int) -> OnceflowBroker:
    broker = OnceflowBroker({"log.segment.bytes": str(segment_bytes)})
    create_topic(broker.bootstrap, TOPIC)
    produce(
        broker.bootstrap,
        TOPIC,
        max(1, size_bytes // KIB),
        KIB,
        {"linger.ms": 5, "batch.size": 16_384},
    )
    return broker


def delete_snapshots(data_dir: str) -> int:
    removed = 0
    for root, _dirs, files in os.walk(data_dir):
        for name in files:
            if name.endswith(".snapshot"):
                os.remove(os.path.join(root, name))
                removed += 1
    return removed


def recovery_runs(
    size_bytes: int, segment_bytes: int, repeat: int
) -> tuple[list[float], list[float]]:
    """Seconds to serve after kill -9: (with snapshot, without snapshot) per repetition."""
    broker = build(size_bytes, segment_bytes)
    with_snapshot: list[float] = []
    without: list[float] = []
    try:
        for _ in range(repeat):
            broker.kill9()
            with_snapshot.append(broker.start())
            broker.kill9()
            delete_snapshots(broker.data_dir)
            without.append(broker.start())
    finally:
        broker.close()
    return with_snapshot, without
