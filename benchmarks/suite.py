"""The benchmark suite: figures for Onceflow beside references measured in the same run.

References:
- librdkafka's in-memory mock cluster, started in this process through confluent-kafka;
- the data disk's durable sequential write bandwidth (burst and sustained: benchmarks/disk.py).

Every figure is the median of `--repeat` runs (default 3). The table goes to stdout and the
figures to benchmarks/results/latest.json (smoke: smoke.json). Sizes: benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks import (
    cluster,
    disk,
    dualwrite,
    participant,
    recovery,
    scaling,
    security,
    share,
    tls_records,
)
from benchmarks.common import BROKER_SRC_ENV, OnceflowBroker, mock_cluster
from onceflow.bench import (
    KIB,
    consume,
    create_topic,
    figure_table,
    latency,
    medians,
    pair_figures,
    produce,
    produce_transactional,
    roundtrip_pair,
    transactional_producer,
)

RESULTS = Path(__file__).parent / "results"
SECTIONS = (
    "throughput",
    "participant",
    "dualwrite",
    "security",
    "latency",
    "scaling",
    "share",
    "recovery",
    "cluster",
    "spark",
    "disk",
)
WRITE_HEAVY = {
    "throughput",
    "participant",
    "dualwrite",
    "security",
    "scaling",
    "recovery",
    "cluster",
}


@dataclass
class Plan:
    """The sizes of one run of the suite."""

    # Produce, transactional produce and consume. Small enough that one interleaved group
    # (idempotent + transactional, messages KiB each) fits the disk's burst allowance; the
    # disk rests between groups.
    messages: int = 150_000
    repeat: int = 3
    # The 1 KiB produce group (Onceflow, mock, transactional) repeats more: on this 2-core VM
    # two identical runs back to back differ by up to 30 %, and its ratios are the targets.
    produce_repeat: int = 5
    settle_seconds: float = 30.0  # the disk's rest before each section that writes a lot
    disk_mb: int = 512
    disk_sustained_mb: int = 1536
    latency_rate: int = 2000  # msg/s offered
    latency_seconds: float = 3.0
    partition_messages: int = 60_000  # per partition count
    share_messages: int = 20_000  # consumed by share groups of 1, 2, 4 and a classic consumer
    producer_messages: int = 60_000  # in all, shared by the concurrent producers
    transactions_per_size: dict[int, int] = field(
        default_factory=lambda: {1: 200, 100: 100, 10_000: 3}
    )
    memory_partitions: int = 500
    recovery_mb: int = 1024  # the large partition; the small one is a quarter of it
    recovery_segment_mb: int = 64
    spark_records: int = 200_000
    spark: bool = True
    dualwrite_units: int = 2_000  # units of work (one row, one record) per run
    # The cluster (3 brokers of `onceflow cluster` sharing this machine's cores).
    cluster_messages: int = 100_000  # per produce run: RF=3 idempotent, transactional; RF=1
    cluster_produce_repeat: int = 5  # its ratios are targets, and noisy like the ones above
    # The consume-transform-produce round trip: issue 26's rate (a load that measures
    # latency, not saturation); a p99 of 3,000 round trips.
    cluster_ctp_rate: int = 200  # records/s
    cluster_ctp_warmup_seconds: float = 3.0  # not counted
    cluster_ctp_seconds: float = 15.0
    cluster_kills: int = 10  # kill -9 of the leader under a producer
    cluster_shutdowns: int = 5  # controlled shutdowns (SIGTERM) of the leader
    cluster_session_timeout_ms: int = 6000  # zookeeper.session.timeout.ms
    cluster_ack_rate: int = 1000  # records/s of the producer whose acks are timed
    cluster_steady_seconds: float = 3.0  # the reference: acks with nothing happening

    @classmethod
    def smoke(cls) -> Plan:
        return cls(
            messages=2_000,
            repeat=1,
            produce_repeat=1,
            settle_seconds=0,
            disk_mb=64,
            disk_sustained_mb=64,
            latency_rate=500,
            latency_seconds=0.5,
            partition_messages=2_000,
            share_messages=500,
            producer_messages=1_600,
            transactions_per_size={1: 20, 100: 5, 10_000: 1},
            memory_partitions=20,
            recovery_mb=8,
            recovery_segment_mb=1,
            spark_records=10_000,
            spark=False,
            dualwrite_units=50,
            cluster_messages=2_000,
            cluster_produce_repeat=1,
            cluster_ctp_rate=200,
            cluster_ctp_warmup_seconds=0.5,
            cluster_ctp_seconds=1.5,
            cluster_kills=1,
            cluster_shutdowns=1,
            cluster_steady_seconds=0.5,
        )


def speed_ratio(reference_seconds: list[float], measured_seconds: list[float]) -> float:
    """The median over repetitions of measured speed / reference speed, from each run's
    seconds for the same work (a ratio of speeds is the inverse ratio of times)."""
    return statistics.median(
        ref / measured for ref, measured in zip(reference_seconds, measured_seconds, strict=True)
    )


def throughput(plan: Plan, broker: OnceflowBroker, mock: str, out: dict[str, float]) -> None:
    """Figures 1-3: idempotent and transactional produce, consume.

    Runs that are compared are interleaved (Onceflow, mock, transactional, then again), so
    drift and the disk's state touch each of them alike.
    """
    n = plan.messages
    b = broker.bootstrap
    for value_bytes in (KIB, 100):
        mb = n * value_bytes / 1e6
        runs: dict[str, list[float]] = {"onceflow": [], "mock": [], "txn": []}
        repetitions = max(plan.repeat, plan.produce_repeat) if value_bytes == KIB else plan.repeat
        for i in range(repetitions):
            if value_bytes == KIB and i:
                disk.settle(plan.settle_seconds)  # each group of three starts rested
            runs["onceflow"].append(
                produce(b, f"produce-onceflow-{value_bytes}-{i}", n, value_bytes)
            )
            runs["mock"].append(produce(mock, f"produce-mock-{value_bytes}-{i}", n, value_bytes))
            if value_bytes == KIB:
                producer = transactional_producer(b, f"bench-txn-{uuid.uuid4().hex[:8]}")
                runs["txn"].append(
                    produce_transactional(producer, f"txn-1024-{i}", n, KIB, partition=0)
                )
        for name in ("onceflow", "mock"):
            seconds = statistics.median(runs[name])
            out[f"produce_{value_bytes}B_{name}_MBps"] = mb / seconds
            out[f"produce_{value_bytes}B_{name}_msgps"] = n / seconds
        # Ratios are medians of each repetition's own ratio: the runs of a repetition ran
        # back to back, on the same disk state.
        out[f"produce_{value_bytes}B_ratio_to_mock"] = speed_ratio(runs["mock"], runs["onceflow"])
        if value_bytes == KIB:
            out["produce_txn_100ms_1024B_MBps"] = mb / statistics.median(runs["txn"])
            out["produce_txn_100ms_ratio_to_idempotent"] = speed_ratio(
                runs["onceflow"], runs["txn"]
            )
    # The transactional topic holds commit markers between the batches, so read_committed
    # works through transactional data (and both isolation levels read the same log).
    reads: dict[str, list[float]] = {"read_uncommitted": [], "read_committed": []}
    for _ in range(3 * plan.repeat):  # a read takes a tenth of a second: more of them
        for isolation, seconds in reads.items():
            seconds.append(consume(b, "txn-1024-0", n, isolation))
    for isolation, seconds in reads.items():
        out[f"consume_{isolation}_MBps"] = n * KIB / 1e6 / statistics.median(seconds)
    out["consume_committed_ratio_to_uncommitted"] = (
        out["consume_read_committed_MBps"] / out["consume_read_uncommitted_MBps"]
    )
    out["consume_committed_ratio_to_produce"] = (
        out["consume_read_committed_MBps"] / out["produce_1024B_onceflow_MBps"]
    )


def participant_section(plan: Plan, out: dict[str, float]) -> None:
    """Figure 10: the participant client's two-phase produce against confluent-kafka's
    transactional producer, 1 KiB and 100 B values, in turn on one broker."""
    out.update(participant.participant_figures(plan.messages, plan.repeat))


def dualwrite_section(plan: Plan, out: dict[str, float]) -> None:
    """Figure 11: units of work per second of the dual write, the database alone and the
    classic outbox with its relay, in turn on one broker and SQLite."""
    out.update(dualwrite.dualwrite_figures(plan.dualwrite_units, plan.repeat))


def security_section(plan: Plan, out: dict[str, float]) -> None:
    """Figure 9: 1 KiB produce and read_committed consume over SASL_SSL (SCRAM-SHA-256)
    against PLAINTEXT on one broker, and over SASL_SSL on a broker with ACLs on; and the
    TLS decryption cost of the produce requests' record sizes."""
    runs = security.security_runs(
        plan.messages,
        groups=max(plan.repeat, plan.produce_repeat),
        reads=3 * plan.repeat,
        settle_seconds=plan.settle_seconds,
    )
    out.update(security.figures(runs, plan.messages))
    # What the broker's TLS receive pays for the record sizes librdkafka sends (CPU only).
    out.update(tls_records.decrypt_figures(rounds=max(3, plan.repeat)))


def latencies(plan: Plan, broker: OnceflowBroker, out: dict[str, float]) -> None:
    """Figure 4, and the consume-transform-produce round trip of the transactional copier
    against the plain one (idempotent, asynchronous offset commits) on this broker."""
    for mode in latency.MODES:
        runs = [
            latency.latency_run(broker.bootstrap, mode, plan.latency_rate, plan.latency_seconds)
            for _ in range(plan.repeat)
        ]
        out.update(medians(runs))
    pair = roundtrip_pair(
        broker.bootstrap,
        lambda topic: create_topic(broker.bootstrap, topic),
        rate=plan.cluster_ctp_rate,
        warmup_seconds=plan.cluster_ctp_warmup_seconds,
        seconds=plan.cluster_ctp_seconds,
        prefix="bench-",
    )
    out.update(pair_figures(pair, "ctp"))


def share_section(plan: Plan, broker: OnceflowBroker, out: dict[str, float]) -> None:
    """Share-group consumption of one partition by 1, 2 and 4 consumers, against a classic
    consumer of the same partition, interleaved per repetition."""
    b = broker.bootstrap
    topic = share.prepare(b, plan.share_messages)
    runs: dict[str, list[float]] = {"classic": []}
    runs.update({str(n): [] for n in share.CONSUMER_COUNTS})
    for _ in range(plan.repeat):
        runs["classic"].append(share.classic_run(b, topic, plan.share_messages))
        for n in share.CONSUMER_COUNTS:
            runs[str(n)].append(share.share_run(b, topic, n, plan.share_messages + 1))
    out["share_classic_consumer_recps"] = statistics.median(runs["classic"])
    for n in share.CONSUMER_COUNTS:
        out[f"share_consumers_{n}_recps"] = statistics.median(runs[str(n)])


def scale(plan: Plan, broker: OnceflowBroker, out: dict[str, float]) -> None:
    """Figure 5. Partition counts are interleaved per repetition, like the throughput runs."""
    b = broker.bootstrap
    by_count: dict[int, list[float]] = {p: [] for p in scaling.PARTITION_COUNTS}
    for _ in range(plan.repeat):
        for p, mbps in by_count.items():
            mbps.append(scaling.partitions_run(b, p, plan.partition_messages))
    for p, mbps in by_count.items():
        out[f"scale_partitions_{p}_MBps"] = statistics.median(mbps)
    top, one = scaling.PARTITION_COUNTS[-1], scaling.PARTITION_COUNTS[0]
    out[f"scale_partitions_{top}_ratio_to_{one}"] = (
        out[f"scale_partitions_{top}_MBps"] / out[f"scale_partitions_{one}_MBps"]
    )
    disk.settle(plan.settle_seconds)
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
    """Figure 6, for a partition of recovery_mb and one a quarter of that size, with the
    same segment size: with a snapshot, recovery should not grow with the log."""
    large, small = plan.recovery_mb, max(1, plan.recovery_mb // 4)
    segment = plan.recovery_segment_mb << 20
    for mb in (small, large):
        with_snapshot, without = recovery.recovery_runs(
            mb << 20, segment, plan.repeat, plan.settle_seconds
        )
        out[f"recovery_{mb}MB_with_snapshot_s"] = statistics.median(with_snapshot)
        out[f"recovery_{mb}MB_without_snapshot_s"] = statistics.median(without)
    for kind in ("with", "without"):
        out[f"recovery_{kind}_snapshot_growth_{large}MB_to_{small}MB"] = (
            out[f"recovery_{large}MB_{kind}_snapshot_s"]
            / out[f"recovery_{small}MB_{kind}_snapshot_s"]
        )


def cluster_section(plan: Plan, out: dict[str, float]) -> None:
    """Figure 8: a 3-broker cluster. The consume-transform-produce round trip on RF=3;
    acks=all produce on RF=3 (idempotent and transactional) against RF=1, interleaved;
    failover after kill -9 of the leader and the gap in acknowledgements of a controlled
    shutdown, both under a producer."""
    runs = cluster.cluster_runs(
        messages=plan.cluster_messages,
        groups=max(plan.repeat, plan.cluster_produce_repeat),
        ctp_rate=plan.cluster_ctp_rate,
        ctp_warmup_seconds=plan.cluster_ctp_warmup_seconds,
        ctp_seconds=plan.cluster_ctp_seconds,
        kills=plan.cluster_kills,
        shutdowns=plan.cluster_shutdowns,
        session_timeout_ms=plan.cluster_session_timeout_ms,
        ack_rate=plan.cluster_ack_rate,
        steady_seconds=plan.cluster_steady_seconds,
    )
    out.update(cluster.figures(runs, plan.cluster_messages, plan.cluster_session_timeout_ms))


def disk_reference(plan: Plan, broker: OnceflowBroker, out: dict[str, float]) -> None:
    """The disk's durable write bandwidth, burst and sustained; last, as it drains the disk."""
    directory = broker.dir
    burst = [disk.burst_bandwidth(directory, plan.disk_mb << 20) for _ in range(plan.repeat)]
    out["disk_durable_write_MBps"] = statistics.median(burst)
    out["disk_sustained_write_MBps"] = disk.sustained_bandwidth(
        directory, plan.disk_sustained_mb << 20
    )
    if "produce_1024B_onceflow_MBps" in out:
        out["produce_1024B_fraction_of_disk"] = (
            out["produce_1024B_onceflow_MBps"] / out["disk_durable_write_MBps"]
        )


def spark(plan: Plan, out: dict[str, float]) -> None:
    """Figure 7."""
    from benchmarks import spark_job

    broker = OnceflowBroker(participant.TWO_PC)  # per-batch atomicity needs KIP-939
    try:
        rates, cpu = spark_job.spark_runs(broker.bootstrap, plan.spark_records, plan.repeat)
    finally:
        broker.close()
    for sink, runs in rates.items():
        out[f"spark_{sink}_sink_recps"] = statistics.median(runs)
        out[f"spark_{sink}_sink_cpu_us_per_record"] = statistics.median(cpu[sink])
    pairs = [("batch", "noop"), ("task", "noop"), ("discard", "noop")]
    pairs += [("batch", "discard"), ("task", "discard")]
    for sink, base in pairs:
        out[f"spark_{sink}_sink_ratio_to_{base}"] = statistics.median(
            mine / other for mine, other in zip(rates[sink], rates[base], strict=True)
        )
    out["spark_batch_sink_ratio_to_task"] = statistics.median(
        b / t for b, t in zip(rates["batch"], rates["task"], strict=True)
    )
    for sink in ("batch", "task", "discard"):  # a CPU-bound machine's rate ratio
        out[f"spark_{sink}_sink_cpu_ratio_to_noop"] = statistics.median(
            noop / mine for mine, noop in zip(cpu[sink], cpu["noop"], strict=True)
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make bench", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: checks the suite runs")
    parser.add_argument("--messages", type=int, help="produce/consume messages (100000)")
    parser.add_argument("--repeat", type=int, help="repetitions; figures are medians (3)")
    parser.add_argument(
        "--recovery-mb", type=int, help="size of the larger recovered partition (1024)"
    )
    parser.add_argument(
        "--broker-src",
        metavar="DIR",
        help="run the broker from the checkout DIR (its src/), e.g. for before/after figures",
    )
    parser.add_argument(
        "--settle", type=float, help="seconds the disk rests before write-heavy sections (30)"
    )
    spark_flag = parser.add_mutually_exclusive_group()
    spark_flag.add_argument("--spark", action="store_true", help="run figure 7 (even in smoke)")
    spark_flag.add_argument("--no-spark", action="store_true", help="skip figure 7")
    parser.add_argument(
        "--only",
        help="comma-separated sections to run: " + ",".join(SECTIONS),
    )
    args = parser.parse_args(argv)
    plan = Plan.smoke() if args.smoke else Plan()
    if args.messages:
        plan.messages = args.messages
    if args.repeat:
        plan.repeat = args.repeat
    if args.recovery_mb:
        plan.recovery_mb = args.recovery_mb
    if args.settle is not None:
        plan.settle_seconds = args.settle
    if args.broker_src:
        os.environ[BROKER_SRC_ENV] = os.path.abspath(args.broker_src)
    if args.spark:
        plan.spark = True
    if args.no_spark:
        plan.spark = False
    sections = set((args.only or ",".join(SECTIONS)).split(","))
    if not plan.spark:
        sections.discard("spark")
    unknown = sections - set(SECTIONS)
    if unknown:
        parser.error(f"unknown section(s) {', '.join(sorted(unknown))}; choose from {SECTIONS}")
    if "cluster" in sections and (missing := cluster.zookeeper_missing()):
        if args.only:  # asked for by name: say why it cannot run
            parser.error(f"the cluster section needs ZooKeeper: {missing}")
        print(f"cluster section skipped: {missing}", file=sys.stderr)
        sections.discard("cluster")

    figures: dict[str, float] = {}
    seconds: dict[str, float] = {}
    broker = OnceflowBroker()
    _admin, mock = mock_cluster()  # the mock lives as long as its client
    steps: dict[str, Callable[[], None]] = {
        "throughput": lambda: throughput(plan, broker, mock, figures),
        "participant": lambda: participant_section(plan, figures),
        "dualwrite": lambda: dualwrite_section(plan, figures),
        "security": lambda: security_section(plan, figures),
        "latency": lambda: latencies(plan, broker, figures),
        "scaling": lambda: scale(plan, broker, figures),
        "share": lambda: share_section(plan, broker, figures),
        "recovery": lambda: recover(plan, figures),
        "cluster": lambda: cluster_section(plan, figures),
        "spark": lambda: spark(plan, figures),
        "disk": lambda: disk_reference(plan, broker, figures),
    }
    try:
        for name in SECTIONS:
            if name in sections:
                if name in WRITE_HEAVY and seconds:
                    disk.settle(plan.settle_seconds)
                start = time.perf_counter()
                steps[name]()
                seconds[name] = time.perf_counter() - start
    finally:
        broker.close()
    report(figures, plan, seconds, smoke=args.smoke)
    return 0


def report(figures: dict[str, float], plan: Plan, seconds: dict[str, float], smoke: bool) -> None:
    cores = os.cpu_count()
    print(figure_table(figures, plan.repeat, cores))
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
        "broker_src": os.environ.get(BROKER_SRC_ENV),
        "plan": plan_json,
        "section_seconds": seconds,
        "figures": figures,
    }
    name = "smoke.json" if smoke else "latest.json"
    (RESULTS / name).write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
