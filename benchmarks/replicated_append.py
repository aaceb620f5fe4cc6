"""What one replicated append costs: CPU and latency of an acks=all produce on RF=3.

    python -m benchmarks.replicated_append                       # this checkout
    python -m benchmarks.replicated_append --broker-src DIR      # another checkout's broker

A transaction on a 3-broker cluster is a chain of replicated appends (the add, the offsets,
PrepareCommit, the markers), and on two cores each costs mostly CPU: the leader's append,
two followers' fetch rounds (answer, append, fsync, next fetch) and the high watermark.
This times that unit alone: one idempotent producer sends one 100-byte record at a time
and waits for it (acks=all), and the three brokers' CPU time (user + system, /proc) is
divided by the number of records. A transactional producer and a consumer group have been
used first, so `__transaction_state` and `__consumer_offsets` exist (100 partitions, about
35 in each follower's fetch session), as on a cluster running transactions.

The CPU per append is the steadier figure: the latency follows whatever else the machine
does, the brokers' work per append much less.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition

from benchmarks import cluster
from benchmarks.common import BROKER_SRC_ENV
from benchmarks.txn_trace import cpu_seconds

TOPIC = "replicated-append"
WARMUP = 500


def measure(bootstrap: str, pids: list[int], count: int) -> dict[str, float]:
    """Broker CPU per append (ms), and the append's p50 and p99 (ms), over `count` sends."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})

    def append() -> None:
        producer.produce(TOPIC, b"x" * 100, partition=0)
        producer.flush(30)

    for _ in range(WARMUP):
        append()
    latencies: list[float] = []
    before = cpu_seconds(pids)
    for _ in range(count):
        started = time.perf_counter()
        append()
        latencies.append(time.perf_counter() - started)
    used = cpu_seconds(pids) - before
    latencies.sort()
    return {
        "broker_cpu_ms_per_append": 1000 * used / count,
        "append_p50_ms": 1000 * statistics.median(latencies),
        "append_p99_ms": 1000 * latencies[min(count - 1, int(count * 0.99))],
    }


def use_internal_topics(bootstrap: str) -> None:
    """One transaction and one group commit: both internal topics are created."""
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "replicated-append"})
    txn.init_transactions(60)
    txn.begin_transaction()
    txn.produce(TOPIC, b"y", partition=0)
    txn.commit_transaction(60)
    group = Consumer({"bootstrap.servers": bootstrap, "group.id": "replicated-append"})
    group.commit(offsets=[TopicPartition(TOPIC, 0, 1)], asynchronous=False)
    group.close()


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.replicated_append", description=__doc__
    )
    parser.add_argument("--appends", type=int, default=3000, help="appends timed (3000)")
    parser.add_argument("--rounds", type=int, default=1, help="measurements in a row (1)")
    parser.add_argument("--broker-src", metavar="DIR", help="run the broker from DIR/src")
    args = parser.parse_args()
    if args.broker_src:
        os.environ[BROKER_SRC_ENV] = os.path.abspath(args.broker_src)
    if missing := cluster.zookeeper_missing():
        print(f"needs ZooKeeper: {missing}", file=sys.stderr)
        return 1
    bench = cluster.BenchCluster(cluster.BROKERS, {}).start()
    try:
        bench.create_topic(TOPIC, cluster.BROKERS)
        use_internal_topics(bench.bootstrap)
        pids = [bench.pid(b) for b in range(1, cluster.BROKERS + 1)]
        for _ in range(args.rounds):
            figures = measure(bench.bootstrap, pids, args.appends)
            print("  ".join(f"{name} {value:.3f}" for name, value in figures.items()))
    finally:
        bench.close(remove=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
