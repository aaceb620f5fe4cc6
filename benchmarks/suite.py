"""The benchmark suite: figures for Onceflow beside references measured in the same run.

References:
- librdkafka's in-memory mock cluster, started in this process through confluent-kafka;
- the data disk's durable sequential write bandwidth (large writes, one fsync).

Every figure is the median of `--repeat` runs (at least 3 for a real run). The table goes to
stdout and the figures to benchmarks/results/latest.json.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

RESULTS = Path(__file__).parent / "results"


@dataclass
class Sizes:
    messages: int
    value_bytes: int
    repeat: int


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class OnceflowBroker:
    """A broker subprocess on a free port with a temporary data dir."""

    def __init__(self, overrides: dict[str, str] | None = None) -> None:
        self.dir = tempfile.mkdtemp(prefix="onceflow-bench-")
        self.port = free_port()
        args = [
            sys.executable,
            "-m",
            "onceflow",
            "serve",
            "--data-dir",
            self.dir,
            "--listener",
            f"127.0.0.1:{self.port}",
        ]
        for key, value in (overrides or {}).items():
            args += ["--override", f"{key}={value}"]
        self.log = open(os.path.join(self.dir, "broker.log"), "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("the broker did not start")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def mock_cluster() -> tuple[AdminClient, str]:
    admin = AdminClient({"test.mock.num.brokers": "1", "log_level": 0})
    brokers = admin.list_topics(timeout=10).brokers
    broker = next(iter(brokers.values()))
    return admin, f"{broker.host}:{broker.port}"


def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    admin.create_topics([NewTopic(topic, num_partitions=partitions)])[topic].result(30)


def produce(bootstrap: str, topic: str, sizes: Sizes, extra: dict[str, object]) -> float:
    """Seconds to produce and acknowledge `sizes.messages` values with acks=all."""
    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "linger.ms": 5,
        "batch.size": 1_000_000,
        "queue.buffering.max.messages": 1_000_000,
        "log_level": 0,
    }
    conf.update(extra)
    producer = Producer(conf)
    value = b"v" * sizes.value_bytes
    failures: list[object] = []

    def report(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(err)

    start = time.perf_counter()
    for i in range(sizes.messages):
        while True:
            try:
                producer.produce(topic, value, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 10_000 == 0:
            producer.poll(0)
    producer.flush(120)
    elapsed = time.perf_counter() - start
    if failures:
        raise RuntimeError(f"{len(failures)} deliveries failed: {failures[:3]}")
    return elapsed


def consume(bootstrap: str, topic: str, count: int, isolation: str) -> float:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "fetch.max.bytes": 52_428_800,
            "log_level": 0,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    start = time.perf_counter()
    deadline = time.monotonic() + 120
    while got < count and time.monotonic() < deadline:
        for message in consumer.consume(10_000, 1.0):
            if message.error() is None:
                got += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    if got < count:
        raise RuntimeError(f"consumed {got} of {count}")
    return elapsed


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


def median_of(repeat: int, run: Callable[[int], float]) -> float:
    return statistics.median(run(i) for i in range(repeat))


def _produce_run(bootstrap: str, sizes: Sizes, extra: dict[str, object], i: int) -> float:
    topic = f"produce-{sizes.value_bytes}-{i}"  # auto-created by both brokers
    return produce(bootstrap, topic, sizes, extra)


def _consume_run(bootstrap: str, topic: str, count: int, isolation: str, _i: int) -> float:
    return consume(bootstrap, topic, count, isolation)


def _disk_run(directory: str, total_bytes: int, _i: int) -> float:
    return disk_bandwidth(directory, total_bytes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make bench", description=__doc__)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: checks the suite runs")
    args = parser.parse_args(argv)
    sizes = Sizes(args.messages, 1024, args.repeat)
    if args.smoke:
        sizes = Sizes(2_000, 1024, 1)
    figures: dict[str, float] = {}
    broker = OnceflowBroker()
    _, mock = mock_cluster()
    idempotent = {"enable.idempotence": True}
    try:
        for value_bytes in (1024, 100):
            s = Sizes(sizes.messages, value_bytes, sizes.repeat)
            mb = s.messages * value_bytes / 1e6
            for name, bootstrap in (("onceflow", broker.bootstrap), ("mock", mock)):
                run = functools.partial(_produce_run, bootstrap, s, idempotent)
                seconds = median_of(s.repeat, run)
                figures[f"produce_{value_bytes}B_{name}_MBps"] = mb / seconds
                figures[f"produce_{value_bytes}B_{name}_msgps"] = s.messages / seconds
            figures[f"produce_{value_bytes}B_ratio_to_mock"] = (
                figures[f"produce_{value_bytes}B_onceflow_MBps"]
                / figures[f"produce_{value_bytes}B_mock_MBps"]
            )
        topic = "produce-1024-0"
        for isolation in ("read_uncommitted", "read_committed"):
            run = functools.partial(
                _consume_run, broker.bootstrap, topic, sizes.messages, isolation
            )
            seconds = median_of(sizes.repeat, run)
            figures[f"consume_{isolation}_MBps"] = sizes.messages * 1024 / 1e6 / seconds
        disk_bytes = 64 << 20 if args.smoke else 512 << 20
        disk = median_of(sizes.repeat, functools.partial(_disk_run, broker.dir, disk_bytes))
        figures["disk_durable_write_MBps"] = disk
        figures["produce_1024B_fraction_of_disk"] = figures["produce_1024B_onceflow_MBps"] / disk
    finally:
        broker.close()
    report(figures, sizes, smoke=args.smoke)
    return 0


def report(figures: dict[str, float], sizes: Sizes, smoke: bool) -> None:
    width = max(len(k) for k in figures)
    print(f"{'figure':<{width}}  median of {sizes.repeat}")
    for key, value in figures.items():
        print(f"{key:<{width}}  {value:,.3f}")
    RESULTS.mkdir(exist_ok=True)
    out = {
        "cores": os.cpu_count(),
        "messages": sizes.messages,
        "repeat": sizes.repeat,
        "smoke": smoke,
        "figures": figures,
    }
    name = "smoke.json" if smoke else "latest.json"
    (RESULTS / name).write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
