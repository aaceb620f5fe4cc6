"""Recovery after kill -9: seconds from starting the broker process until it answers a
Metadata request, with one large partition, with and without a producer-state snapshot.

The partition is built by an idempotent confluent producer (1 KiB values in batches of up to
16 KiB, so there are many batches to replay), so the log carries producer state. Segments
have a fixed size whatever the partition's size, so rolls write producer-state snapshots
(`<offset>.snapshot`) and move the recovery point: with a snapshot, recovery scans only the
active segment, and its time should not grow with the log. Each repetition: kill -9, start
(timed: "with snapshot"), kill -9, delete every `.snapshot` file, start (timed: "without":
producer state is replayed from every batch header of the log). Every "with" run comes
before the first "without" run, which deletes the snapshots.
"""

from __future__ import annotations

import os

from benchmarks import disk
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
    size_bytes: int, segment_bytes: int, repeat: int, rest_s: float = 0.0
) -> tuple[list[float], list[float]]:
    """Seconds to serve after kill -9: (with snapshot, without snapshot) per repetition.

    Every run with snapshots comes first: deleting them for a run without would leave the
    later "with" runs without any (nothing writes a snapshot between two kill -9s). The
    disk rests `rest_s` after the build, so the timed starts do not pay for its writes.
    """
    broker = build(size_bytes, segment_bytes)
    with_snapshot: list[float] = []
    without: list[float] = []
    try:
        broker.kill9()
        disk.settle(rest_s)
        for _ in range(repeat):
            with_snapshot.append(broker.start())
            broker.kill9()
        for _ in range(repeat):
            delete_snapshots(broker.data_dir)
            without.append(broker.start())
            broker.kill9()
    finally:
        broker.close()
    return with_snapshot, without
