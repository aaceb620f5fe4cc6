"""Where a consume-transform-produce transaction's time goes, and the round-trip pair alone.

    python -m benchmarks.txn_trace --brokers 3            # the per-step trace
    python -m benchmarks.txn_trace --brokers 3 --pair --rounds 3   # plain and txn p50s
    python -m benchmarks.txn_trace --brokers 1 --broker-src /work/main   # another checkout

The trace runs the copier of `onceflow.bench.roundtrip` (one transaction per poll batch,
read_committed reader timing each record) with two clocks on it:

- the copier's own steps, timed around each call: the sends (queued, with AddPartitionsToTxn
  sent by librdkafka behind them), `send_offsets_to_transaction` (AddOffsetsToTxn to the
  transaction coordinator, then TxnOffsetCommit to the group coordinator), and
  `commit_transaction` (the produce flushed, then EndTxn), and the idle poll between two
  transactions;
- every request the copier's producer sends, with librdkafka's own round-trip time of each
  (`debug=protocol`): what the broker took, by API. On the coordinator, AddOffsetsToTxn is one
  replicated append of `__transaction_state`; AddPartitionsToTxn is one too, plus the wait
  for the previous transaction's markers and CompleteCommit; EndTxn is the PrepareCommit
  append.

It also prints the brokers' CPU time (user + system, from /proc) per second and per
transaction over the run: on a machine shared with other work, latencies follow the load,
while the brokers' work per transaction is a steadier figure to compare checkouts by.

`--pair` runs `roundtrip_pair` (plain then transactional copier) on the same cluster and
prints the p50s and their ratio: the issue's figure, without the rest of `make bench`.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import statistics
import sys
import time
import uuid
from collections import defaultdict

from confluent_kafka import Message

from benchmarks import cluster
from benchmarks.common import BROKER_SRC_ENV, OnceflowBroker
from onceflow.bench import create_topic, pair_figures, roundtrip_pair
from onceflow.bench.roundtrip import Copier, roundtrip_run

RECEIVED = re.compile(r"Received (\w+)Response \(.*rtt ([0-9.]+)ms")


class RttLog(logging.Handler):
    """librdkafka's protocol debug lines: each response's API and round-trip time (ms)."""

    def __init__(self) -> None:
        super().__init__()
        self.rtts: dict[str, list[float]] = defaultdict(list)

    def emit(self, record: logging.LogRecord) -> None:
        found = RECEIVED.search(record.getMessage())
        if found:
            self.rtts[found.group(1)].append(float(found.group(2)))


RTTS = RttLog()
CLIENT_LOG = logging.getLogger("txn-trace-client")
CLIENT_LOG.addHandler(RTTS)
CLIENT_LOG.setLevel(logging.DEBUG)
CLIENT_LOG.propagate = False


class TracedCopier(Copier):
    """The benchmark's copier, each step of its transaction timed (seconds)."""

    steps: dict[str, list[float]] = defaultdict(list)

    def __init__(self, *args: object, **kwargs: object) -> None:
        extra = {"debug": "protocol", "logger": CLIENT_LOG}
        super().__init__(*args, producer_extra=extra, **kwargs)  # type: ignore[arg-type]
        self._ended = 0.0

    def copy(self, batch: list[Message]) -> None:
        if not batch:
            return
        if not self.transactional:
            super().copy(batch)
            return
        start = time.perf_counter()
        if self._ended:
            self.steps["idle between transactions"].append(start - self._ended)
        self.producer.begin_transaction()
        for message in batch:
            self.producer.produce(self.sink, message.value() or b"", partition=0)
        sent = time.perf_counter()
        positions = self.consumer.position(self.consumer.assignment())
        metadata = self.consumer.consumer_group_metadata()
        self.producer.send_offsets_to_transaction(positions, metadata, 60)
        offsets = time.perf_counter()
        self.producer.commit_transaction(60)
        self._ended = time.perf_counter()
        self.steps["sends (queued)"].append(sent - start)
        self.steps["send_offsets_to_transaction"].append(offsets - sent)
        self.steps["commit_transaction"].append(self._ended - offsets)
        self.steps["transaction, begin to commit"].append(self._ended - start)
        self.steps["records per transaction"].append(len(batch) / 1000)  # shown x1000


def percentiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return ordered[len(ordered) // 2], ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def cpu_seconds(pids: list[int]) -> float:
    """The user + system CPU time these processes have used so far (Linux's /proc)."""
    ticks = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def trace(
    bootstrap: str,
    new_topic: object,
    rate: int,
    warmup: float,
    seconds: float,
    broker_pids: list[int],
) -> None:
    name = f"trace-{uuid.uuid4().hex[:8]}"
    source, sink = f"{name}-in", f"{name}-out"
    new_topic(source)  # type: ignore[operator]
    new_topic(sink)  # type: ignore[operator]
    cpu_before, started = cpu_seconds(broker_pids), time.perf_counter()
    trips = roundtrip_run(
        bootstrap,
        source,
        sink,
        rate=rate,
        warmup_seconds=warmup,
        seconds=seconds,
        prefix="trace-",
        copier_type=TracedCopier,
    )
    cpu = cpu_seconds(broker_pids) - cpu_before
    elapsed = time.perf_counter() - started
    transactions = len(TracedCopier.steps["transaction, begin to commit"])
    print(f"\n{transactions} transactions; round trip p50/p99 ms:", end=" ")
    p50, p99 = percentiles(trips)
    print(f"{p50 * 1000:.1f} / {p99 * 1000:.1f}")
    # The brokers' work, which the other processes on the machine do not change much: a
    # figure to compare checkouts by when the machine is shared.
    print(
        f"broker CPU: {cpu / elapsed:.2f} s per s, "
        f"{cpu / max(transactions, 1) * 1000:.1f} ms per transaction"
    )
    print(f"\n{'copier step':40} {'p50 ms':>8} {'p99 ms':>8}")
    for step, values in TracedCopier.steps.items():
        p50, p99 = percentiles(values)
        print(f"{step:40} {p50 * 1000:8.1f} {p99 * 1000:8.1f}")
    print(f"\n{'request (librdkafka rtt)':40} {'count':>8} {'p50 ms':>8} {'mean ms':>8}")
    for api, values in sorted(RTTS.rtts.items(), key=lambda kv: -statistics.fmean(kv[1])):
        p50, _ = percentiles(values)
        print(f"{api:40} {len(values):8d} {p50:8.1f} {statistics.fmean(values):8.1f}")


def pair(
    bootstrap: str, new_topic: object, rate: int, warmup: float, seconds: float, rounds: int
) -> None:
    """`rounds` pairs on the same brokers, each printed, then the medians of each figure."""
    runs: list[dict[str, float]] = []
    for _ in range(rounds):
        trips = roundtrip_pair(
            bootstrap,
            new_topic,  # type: ignore[arg-type]
            rate=rate,
            warmup_seconds=warmup,
            seconds=seconds,
            prefix="pair-",
        )
        runs.append(pair_figures(trips, "ctp"))
        print("  ".join(f"{k.removeprefix('ctp_')} {v:.2f}" for k, v in runs[-1].items()))
    for key in runs[0]:
        print(f"{key:32} {statistics.median(r[key] for r in runs):8.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.txn_trace", description=__doc__)
    parser.add_argument("--brokers", type=int, choices=(1, 3), default=1)
    parser.add_argument("--rate", type=int, default=200, help="records/s (200)")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds not counted (3)")
    parser.add_argument("--seconds", type=float, default=12.0, help="seconds counted (12)")
    parser.add_argument("--pair", action="store_true", help="the plain/transactional p50s")
    parser.add_argument("--rounds", type=int, default=1, help="pairs, one after another (1)")
    parser.add_argument("--keep", action="store_true", help="keep the cluster's data and logs")
    parser.add_argument("--broker-src", metavar="DIR", help="run the broker from DIR/src")
    args = parser.parse_args()
    if args.broker_src:
        os.environ[BROKER_SRC_ENV] = os.path.abspath(args.broker_src)

    def run(bootstrap: str, new_topic: object, pids: list[int]) -> None:
        rate, warmup, seconds = args.rate, args.warmup, args.seconds
        if args.pair:
            pair(bootstrap, new_topic, rate, warmup, seconds, args.rounds)
        else:
            trace(bootstrap, new_topic, rate, warmup, seconds, pids)

    if args.brokers == 1:
        broker = OnceflowBroker()
        try:
            assert broker.proc is not None
            run(
                broker.bootstrap,
                lambda topic: create_topic(broker.bootstrap, topic),
                [broker.proc.pid],
            )
        finally:
            broker.close()
        return 0
    if missing := cluster.zookeeper_missing():
        print(f"needs ZooKeeper: {missing}", file=sys.stderr)
        return 1
    bench = cluster.BenchCluster(cluster.BROKERS, {}).start()
    try:
        run(
            bench.bootstrap,
            lambda topic: bench.create_topic(topic, cluster.BROKERS),
            [bench.pid(b) for b in range(1, cluster.BROKERS + 1)],
        )
    finally:
        bench.close(remove=not args.keep)
        if args.keep:
            print(f"the cluster's logs are in {bench.dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
