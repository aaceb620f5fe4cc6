"""The benchmark suite: figures for Onceflow beside references measured in the same run.

References:
- librdkafka's in-memory mock cluster, started in this process through confluent-kafka;
- the data disk's durable sequential write bandwidth (large writes, one fsync).

Every figure is the median of `--repeat` runs (default 3). The table goes to stdout and the
figures to benchmarks/results/latest.json (smoke: smoke.json). Sizes: benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks import recovery, scaling
from benchmarks.common import OnceflowBroker, mock_cluster
from onceflow.bench import (
    KIB,
    consume,
    latency,
    median_of,
    medians,
    produce,
    produce_transactional,
    transactional_producer,
)

RESULTS = Path(__file__).parent / "results"


@dataclass
class Plan:
    """The sizes of one run of the suite."""

    messages: int = 200_000  # produce, transactional produce and consume
    repeat: int = 3
    disk_mb: int = 512
    latency_rate: int = 2000  # msg/s offered
    latency_seconds: float = 3.0
    partition_messages: int = 100_000  # per partition count
    producer_messages: int = 60_000  # in all, shared by the concurrent producers
    transactions_per_size: dict[int, int] = field(
        default_factory=lambda: {1: 200, 100: 100, 10_000: 3}
    )
    memory_partitions: int = 500
    recovery_mb: int = 256
    spark_records: int = 200_000
    spark: bool = True

    @classmethod
    def smoke(cls) -> Plan:
        return cls(
            messages=2_000,
            repeat=1,
            disk_mb=64,
            latency_rate=500,
            latency_seconds=0.5,
            partition_messages=2_000,
            producer_messages=1_600,
            transactions_per_size={1: 20, 100: 5, 10_000: 1},
            memory_partitions=20,
            recovery_mb=4,
            spark_records=10_000,
            spark=False,
        )


def disk_bandwidth(directory: str, total_bytes: int) -> float:
    """Durable sequential write bandwidth in MB/s: large writes, then one fsync."""
    path = os.path.join(directory, "bandwidth.tmp")
    block = b"\0" * (1 << 20)
    start = time.perf_counter()
    with open(path, "wb") as f:
        written = 0
        while written < total_bytes:
            f.write(block)
            written += len(block)
        f.flush()
        os.fsync(f.fileno())
    elapsed = time.perf_counter() - start
    os.remove(path)
    return total_bytes / elapsed / 1e6


def throughput(plan: Plan, broker: OnceflowBroker, mock: str, out: dict[str, float]) -> None:
    """Figures 1-3: idempotent and transactional produce, consume, disk bandwidth."""
    n = plan.messages
    for value_bytes in (KIB, 100):
        mb = n * value_bytes / 1e6
        for name, bootstrap in (("onceflow", broker.bootstrap), ("mock", mock)):

            def run(i: int, b: str = bootstrap, v: int = value_bytes, k: str = name) -> float:
                return produce(b, f"produce-{k}-{v}-{i}", n, v)

            seconds = median_of(plan.repeat, run)
            out[f"produce_{value_bytes}B_{name}_MBps"] = mb / seconds
            out[f"produce_{value_bytes}B_{name}_msgps"] = n / seconds
        out[f"produce_{value_bytes}B_ratio_to_mock"] = (
            out[f"produce_{value_bytes}B_onceflow_MBps"] / out[f"produce_{value_bytes}B_mock_MBps"]
        )

    def txn(i: int) -> float:
        producer = transactional_producer(broker.bootstrap, f"bench-txn-{uuid.uuid4().hex[:8]}")
        return produce_transactional(producer, f"txn-1024-{i}", n, KIB, partition=0)

    seconds = median_of(plan.repeat, txn)
    out["produce_txn_100ms_1024B_MBps"] = n * KIB / 1e6 / seconds
    out["produce_txn_100ms_ratio_to_idempotent"] = (
        out["produce_txn_100ms_1024B_MBps"] / out["produce_1024B_onceflow_MBps"]
    )
    # The transactional topic holds commit markers between the batches, so read_committed
    # works through transactional data (and both isolation levels read the same log).
    for isolation in ("read_uncommitted", "read_committed"):

        def read(_i: int, level: str = isolation) -> float:
            return consume(broker.bootstrap, "txn-1024-0", n, level)

        out[f"consume_{isolation}_MBps"] = n * KIB / 1e6 / median_of(plan.repeat, read)
    out["consume_committed_ratio_to_uncommitted"] = (
        out["consume_read_committed_MBps"] / out["consume_read_uncommitted_MBps"]
    )
    out["consume_committed_ratio_to_produce"] = (
        out["consume_read_committed_MBps"] / out["produce_1024B_onceflow_MBps"]
    )
    disk_bytes = plan.disk_mb << 20
    disk = median_of(plan.repeat, lambda _i: disk_bandwidth(broker.dir, disk_bytes))
    out["disk_durable_write_MBps"] = disk
    out["produce_1024B_fraction_of_disk"] = out["produce_1024B_onceflow_MBps"] / disk


def latencies(plan: Plan, broker: OnceflowBroker, out: dict[str, float]) -> None:
    """Figure 4."""
    for mode in latency.MODES:
        runs = [
            latency.latency_run(broker.bootstrap, mode, plan.latency_rate, plan.latency_seconds)
            for _ in range(plan.repeat)
        ]
        out.update(medians(runs))


def scale(plan: Plan, broker: OnceflowBroker, out: dict[str, float]) -> None:
    """Figure 5."""
    b = broker.bootstrap
    for p in scaling.PARTITION_COUNTS:
        out[f"scale_partitions_{p}_MBps"] = statistics.median(
            scaling.partitions_run(b, p, plan.partition_messages) for _ in range(plan.repeat)
        )
    top, one = scaling.PARTITION_COUNTS[-1], scaling.PARTITION_COUNTS[0]
    out[f"scale_partitions_{top}_ratio_to_{one}"] = (
        out[f"scale_partitions_{top}_MBps"] / out[f"scale_partitions_{one}_MBps"]
    )
    for producers in scaling.PRODUCER_COUNTS:
        out[f"scale_txn_producers_{producers}_recps"] = statistics.median(
            scaling.producers_run(b, producers, plan.producer_messages) for _ in range(plan.repeat)
        )
    for size, transactions in plan.transactions_per_size.items():
        out[f"scale_txn_size_{size}_recps"] = statistics.median(
            scaling.transaction_size_run(b, size, transactions) for _ in range(plan.repeat)
        )
    out["broker_memory_per_partition_KiB"] = statistics.median(
        scaling.memory_run(broker, plan.memory_partitions) for _ in range(plan.repeat)
    )


def recover(plan: Plan, out: dict[str, float]) -> None:
    """Figure 6."""
    with_snapshot, without = recovery.recovery_runs(plan.recovery_mb << 20, plan.repeat)
    out[f"recovery_{plan.recovery_mb}MB_with_snapshot_s"] = statistics.median(with_snapshot)
    out[f"recovery_{plan.recovery_mb}MB_without_snapshot_s"] = statistics.median(without)


def spark(plan: Plan, broker: OnceflowBroker, out: dict[str, float]) -> None:
    """Figure 7."""
    from benchmarks import spark_job

    sink, noop = spark_job.spark_runs(broker.bootstrap, plan.spark_records, plan.repeat)
    out["spark_onceflow_sink_recps"] = statistics.median(sink)
    out["spark_noop_sink_recps"] = statistics.median(noop)
    out["spark_sink_ratio_to_noop"] = (
        out["spark_onceflow_sink_recps"] / out["spark_noop_sink_recps"]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make bench", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: checks the suite runs")
    parser.add_argument("--messages", type=int, help="produce/consume messages (200000)")
    parser.add_argument("--repeat", type=int, help="repetitions; figures are medians (3)")
    parser.add_argument("--recovery-mb", type=int, help="size of the recovered partition (256)")
    spark_flag = parser.add_mutually_exclusive_group()
    spark_flag.add_argument("--spark", action="store_true", help="run figure 7 (even in smoke)")
    spark_flag.add_argument("--no-spark", action="store_true", help="skip figure 7")
    parser.add_argument(
        "--only",
        help="comma-separated sections to run: throughput,latency,scaling,recovery,spark",
    )
    args = parser.parse_args(argv)
    plan = Plan.smoke() if args.smoke else Plan()
    if args.messages:
        plan.messages = args.messages
    if args.repeat:
        plan.repeat = args.repeat
    if args.recovery_mb:
        plan.recovery_mb = args.recovery_mb
    if args.spark:
        plan.spark = True
    if args.no_spark:
        plan.spark = False
    sections = set((args.only or "throughput,latency,scaling,recovery,spark").split(","))
    if not plan.spark:
        sections.discard("spark")

    figures: dict[str, float] = {}
    seconds: dict[str, float] = {}
    broker = OnceflowBroker()
    _admin, mock = mock_cluster()  # the mock lives as long as its client
    steps: list[tuple[str, Callable[[], None]]] = [
        ("throughput", lambda: throughput(plan, broker, mock, figures)),
        ("latency", lambda: latencies(plan, broker, figures)),
        ("scaling", lambda: scale(plan, broker, figures)),
        ("recovery", lambda: recover(plan, figures)),
        ("spark", lambda: spark(plan, broker, figures)),
    ]
    try:
        for name, step in steps:
            if name in sections:
                start = time.perf_counter()
                step()
                seconds[name] = time.perf_counter() - start
    finally:
        broker.close()
    report(figures, plan, seconds, smoke=args.smoke)
    return 0


def report(figures: dict[str, float], plan: Plan, seconds: dict[str, float], smoke: bool) -> None:
    width = max(len(k) for k in figures)
    cores = os.cpu_count()
    print(f"{'figure':<{width}}  {'median of ' + str(plan.repeat):>16}   ({cores} cores)")
    group = ""
    for key, value in figures.items():
        prefix = key.split("_")[0]
        if prefix != group:
            print()
            group = prefix
        print(f"{key:<{width}}  {value:>16,.3f}")
    print()
    print("seconds per section: " + ", ".join(f"{k} {v:.1f}" for k, v in seconds.items()))
    RESULTS.mkdir(exist_ok=True)
    plan_json = asdict(plan)
    plan_json["transactions_per_size"] = {str(k): v for k, v in plan.transactions_per_size.items()}
    out = {
        "cores": cores,
        "messages": plan.messages,
        "repeat": plan.repeat,
        "smoke": smoke,
        "plan": plan_json,
        "section_seconds": seconds,
        "figures": figures,
    }
    name = "smoke.json" if smoke else "latest.json"
    (RESULTS / name).write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
