"""What every part of the suite shares: brokers, topics, producers, medians."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

KIB = 1024
COMMIT_INTERVAL_S = 0.1  # "transactions committing every 100 ms"


@dataclass
class Sizes:
    messages: int
    value_bytes: int
    repeat: int


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def metadata_answered(port: int, timeout: float = 0.5) -> bool:
    """Whether a Metadata v0 request (all topics) to 127.0.0.1:`port` is answered."""
    client_id = b"bench"
    body = struct.pack(">hhih", 3, 0, 1, len(client_id)) + client_id + struct.pack(">i", 0)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(struct.pack(">i", len(body)) + body)
            head = s.recv(8, socket.MSG_WAITALL)
            if len(head) < 8:
                return False
            _size, correlation = struct.unpack(">ii", head)
            return correlation == 1
    except OSError:
        return False


class OnceflowBroker:
    """A broker subprocess on a free port, by default with a fresh temporary data dir."""

    def __init__(self, overrides: dict[str, str] | None = None, start: bool = True) -> None:
        self.dir = tempfile.mkdtemp(prefix="onceflow-bench-")
        self.port = free_port()
        self.overrides = dict(overrides or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = os.path.join(self.dir, "broker.log")
        if start:
            self.start()

    def start(self, deadline_s: float = 600.0) -> float:
        """Start the process; return the seconds until it answered a Metadata request."""
        args = [
            sys.executable,
            "-m",
            "onceflow",
            "serve",
            "--data-dir",
            os.path.join(self.dir, "data"),
            "--listener",
            f"127.0.0.1:{self.port}",
        ]
        for key, value in self.overrides.items():
            args += ["--override", f"{key}={value}"]
        with open(self.log_path, "ab") as log:
            started = time.perf_counter()
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        deadline = started + deadline_s
        while time.perf_counter() < deadline:
            if metadata_answered(self.port):
                return time.perf_counter() - started
            if self.proc.poll() is not None:
                break
            time.sleep(0.01)
        raise RuntimeError(f"the broker did not start; see {self.log_path}")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def data_dir(self) -> str:
        return os.path.join(self.dir, "data")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def rss_bytes(self) -> int:
        """The broker process's resident set size (VmRSS in /proc/<pid>/status)."""
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        shutil.rmtree(self.dir, ignore_errors=True)


def mock_cluster() -> tuple[AdminClient, str]:
    admin = AdminClient({"test.mock.num.brokers": "1", "log_level": 0})
    brokers = admin.list_topics(timeout=10).brokers
    broker = next(iter(brokers.values()))
    return admin, f"{broker.host}:{broker.port}"


def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    admin.create_topics([NewTopic(topic, num_partitions=partitions)])[topic].result(60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = admin.list_topics(topic, timeout=10).topics.get(topic)
        if found is not None and found.error is None and len(found.partitions) == partitions:
            return
        time.sleep(0.05)
    raise RuntimeError(f"topic {topic} did not appear")


def producer_config(bootstrap: str, extra: dict[str, object] | None = None) -> dict[str, object]:
    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "batch.size": 1_000_000,
        "queue.buffering.max.messages": 1_000_000,
        "log_level": 0,
    }
    conf.update(extra or {})
    return conf


class Failures:
    def __init__(self) -> None:
        self.errors: list[object] = []

    def __call__(self, err: object, _msg: object) -> None:
        if err is not None:
            self.errors.append(err)

    def check(self) -> None:
        if self.errors:
            raise RuntimeError(f"{len(self.errors)} deliveries failed: {self.errors[:3]}")


def send(producer: Producer, topic: str, value: bytes, report: Failures, partition: int) -> None:
    while True:
        try:
            if partition < 0:
                producer.produce(topic, value, on_delivery=report)
            else:
                producer.produce(topic, value, partition=partition, on_delivery=report)
            return
        except BufferError:
            producer.poll(0.01)


def produce(
    bootstrap: str,
    topic: str,
    messages: int,
    value_bytes: int,
    extra: dict[str, object] | None = None,
    partitions: int = 0,
) -> float:
    """Seconds to produce and acknowledge `messages` values (acks=all, idempotent by default).
    With `partitions`, records go round-robin to partitions 0..partitions-1. One warm-up
    record (not timed, so the topic holds `messages` + 1) first connects the producer, fetches
    the topic's metadata and, if idempotent, its producer id: the figure is steady state."""
    producer = Producer(producer_config(bootstrap, extra))
    value = b"v" * value_bytes
    report = Failures()
    send(producer, topic, value, report, 0 if partitions else -1)
    producer.flush(60)
    start = time.perf_counter()
    for i in range(messages):
        send(producer, topic, value, report, i % partitions if partitions else -1)
        if i % 10_000 == 0:
            producer.poll(0)
    producer.flush(300)
    elapsed = time.perf_counter() - start
    report.check()
    return elapsed


def transactional_producer(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer(producer_config(bootstrap, {"transactional.id": transactional_id}))
    producer.init_transactions(60)
    return producer


def produce_transactional(
    producer: Producer,
    topic: str,
    messages: int,
    value_bytes: int,
    *,
    per_transaction: int = 0,
    partition: int = -1,
) -> float:
    """Seconds to produce `messages` values in transactions and commit the last one. A
    transaction commits after `per_transaction` records, or when 0, every 100 ms."""
    value = b"v" * value_bytes
    report = Failures()
    producer.list_topics(topic, timeout=30)  # as `produce` warms up: metadata before timing
    start = time.perf_counter()
    producer.begin_transaction()
    opened = start
    in_transaction = 0
    for i in range(messages):
        send(producer, topic, value, report, partition)
        in_transaction += 1
        if per_transaction:
            due = in_transaction >= per_transaction
        else:
            due = i % 64 == 0 and time.perf_counter() - opened >= COMMIT_INTERVAL_S
        if due and i < messages - 1:
            producer.commit_transaction(60)
            producer.begin_transaction()
            opened = time.perf_counter()
            in_transaction = 0
        elif i % 10_000 == 0:
            producer.poll(0)
    producer.commit_transaction(60)
    elapsed = time.perf_counter() - start
    report.check()
    return elapsed


def median_of(repeat: int, run: Callable[[int], float]) -> float:
    return statistics.median(run(i) for i in range(repeat))


def medians(runs: list[dict[str, float]]) -> dict[str, float]:
    """Per-figure medians of several runs' figures."""
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}
