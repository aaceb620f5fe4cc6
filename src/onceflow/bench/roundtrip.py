"""Consume-transform-produce: the round trip of a record through one exactly-once stage.

The pipeline transactions exist for, at a fixed modest rate, so the figure is latency and
not saturation:

1. a paced producer (idempotent, acks=all, `linger.ms=1`) sends 100 B records to `source`,
   each value carrying the time it was due to be sent and its sequence number (open loop,
   as in `latency`: a producer behind its schedule shows as latency, not as a lower rate);
2. a copier, a read_committed consumer in a consumer group and a transactional producer,
   takes the records one poll returns, writes each one transformed to `sink`, adds the
   consumer's positions to the transaction (`send_offsets_to_transaction`) and commits: one
   transaction per poll batch, Kafka's read-process-write loop, the one Kafka's and
   Redpanda's exactly-once latency benchmarks time (`commit_transaction` flushes the batch
   itself, so there is no `flush()`);
3. a read_committed consumer assigned to `sink` takes, for each record, the time it is read
   minus the input's due time: the round trip.

So a round trip holds the input's replication, the copier's fetch, its transaction (the
offsets, the commit, the markers on `sink` and on the group's offsets partition) and the
output becoming visible to read_committed. With `transactional=False` the copier is the
same loop without exactly-once, the reference the transactional one is held against: an
idempotent producer and an asynchronous offset commit after each poll batch. Records due
in the first `warmup_seconds` (connections, coordinator look-ups, the first transactions)
are not counted; the group has joined and the reader is polling before the first record is
due. The three clients are threads of this process, so they share one clock.
"""

from __future__ import annotations

import struct
import threading
import time
import uuid
from collections.abc import Callable

from confluent_kafka import Consumer, Message, Producer, TopicPartition

from onceflow.bench.workloads import (
    BenchError,
    Endpoint,
    Failures,
    client_base,
    producer_config,
    send,
)

__all__ = ["pair_figures", "roundtrip_pair", "roundtrip_run"]

VALUE_BYTES = 100
HEADER = struct.Struct(">dq")  # due time (time.perf_counter()), sequence number
BATCH_MAX = 1000  # records the copier takes from one poll, at most
WAIT_S = 60.0  # for a group join, a commit, the last records: far above what any takes


def transform(value: bytes) -> bytes:
    """The copier's work: the header kept (the reader needs it), the payload upper-cased."""
    return value[: HEADER.size] + value[HEADER.size :].upper()


def consumer_config(bootstrap: Endpoint, group: str) -> dict[str, object]:
    return {
        **client_base(bootstrap),
        "group.id": group,
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "log_level": 0,
    }


def batch_of(consumer: Consumer, what: str) -> list[Message]:
    """What one poll returns: the first record as soon as there is one (consume(n, t) would
    wait for n records or t), then whatever else is already fetched, without waiting."""
    first = consumer.poll(0.05)
    if first is None:
        return []
    batch = [first, *consumer.consume(BATCH_MAX - 1, 0)]
    for message in batch:
        if message.error() is not None or message.value() is None:
            raise BenchError(f"{what}: {message.error()}")
    return batch


class Worker:
    """A daemon thread whose exception the caller's thread raises again (`check`)."""

    def __init__(self, target: Callable[[], None]) -> None:
        self._target = target
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._guarded, daemon=True)
        self._thread.start()

    def _guarded(self) -> None:
        try:
            self._target()
        except BaseException as exc:  # raised again by check()
            self._error = exc

    def alive(self) -> bool:
        return self._thread.is_alive()

    def check(self) -> None:
        if self._error is not None:
            raise self._error

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
        self.check()
        if self._thread.is_alive():
            raise BenchError(f"a thread did not stop within {timeout:.0f} s")


class Copier:
    """`source` to `sink`, transformed, one transaction per poll batch that also commits the
    group's offsets: each input record is in the output once, or its transaction aborts.
    Not `transactional`: idempotent writes and an asynchronous offset commit per batch."""

    def __init__(
        self,
        bootstrap: Endpoint,
        source: str,
        sink: str,
        prefix: str,
        transactional: bool,
        producer_extra: dict[str, object] | None = None,
    ) -> None:
        self.sink = sink
        self.transactional = transactional
        self.assigned = threading.Event()
        self.stop = threading.Event()
        self.report = Failures()
        name = f"{prefix}ctp-{uuid.uuid4().hex[:8]}"
        extra: dict[str, object] = {"linger.ms": 1, **(producer_extra or {})}
        if transactional:
            extra["transactional.id"] = name
        self.producer = Producer(producer_config(bootstrap, extra))
        if transactional:
            self.producer.init_transactions(WAIT_S)
        self.consumer = Consumer(consumer_config(bootstrap, name))
        self.consumer.subscribe([source], on_assign=lambda _c, _p: self.assigned.set())

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self.copy(batch_of(self.consumer, "copier"))
        finally:
            self.consumer.close()  # leaves the group

    def copy(self, batch: list[Message]) -> None:
        if not batch:
            return
        if not self.transactional:
            for message in batch:
                send(self.producer, self.sink, transform(message.value() or b""), self.report, 0)
            self.producer.poll(0)
            self.consumer.commit(asynchronous=True)
            self.report.check()
            return
        self.producer.begin_transaction()
        for message in batch:
            send(self.producer, self.sink, transform(message.value() or b""), self.report, 0)
        positions = self.consumer.position(self.consumer.assignment())
        metadata = self.consumer.consumer_group_metadata()
        self.producer.send_offsets_to_transaction(positions, metadata, WAIT_S)
        self.producer.commit_transaction(WAIT_S)
        self.report.check()


class Reader:
    """A read_committed consumer of `sink` by assignment from offset 0: the round trip of
    each record from `counted_from` on, and whether any record came twice."""

    def __init__(self, bootstrap: Endpoint, sink: str, total: int, counted_from: int) -> None:
        self.total = total
        self.counted_from = counted_from
        self.ready = threading.Event()
        self.stop = threading.Event()
        self.seen: set[int] = set()
        self.duplicates = 0
        self.roundtrips: list[float] = []
        self.consumer = Consumer(consumer_config(bootstrap, "bench-ctp-reader"))
        self.consumer.assign([TopicPartition(sink, 0, 0)])

    def run(self) -> None:
        try:
            while len(self.seen) < self.total and not self.stop.is_set():
                batch = batch_of(self.consumer, "reader")
                self.ready.set()
                now = time.perf_counter()
                for message in batch:
                    self.record(message.value() or b"", now)
        finally:
            self.consumer.close()

    def record(self, value: bytes, now: float) -> None:
        due, sequence = HEADER.unpack_from(value)
        if sequence in self.seen:
            self.duplicates += 1
            return
        self.seen.add(sequence)
        if sequence >= self.counted_from:
            self.roundtrips.append(now - due)


def paced_send(bootstrap: Endpoint, topic: str, total: int, rate: int) -> None:
    """`total` records at `rate` per second, each carrying its due time and sequence."""
    producer = Producer(producer_config(bootstrap, {"linger.ms": 1}))
    report = Failures()
    padding = b"p" * (VALUE_BYTES - HEADER.size)
    interval = 1.0 / rate
    start = time.perf_counter()
    for i in range(total):
        due = start + i * interval
        wait = due - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        send(producer, topic, HEADER.pack(due, i) + padding, report, 0)
        producer.poll(0)
    if producer.flush(WAIT_S) != 0:
        raise BenchError(f"deliveries to {topic} still pending {WAIT_S:.0f} s after the last")
    report.check()


def wait_until(done: Callable[[], bool], copying: Worker, timeout: float, what: str) -> None:
    """Until `done()`, raising the copier's error as soon as it has one."""
    deadline = time.monotonic() + timeout
    while not done():
        copying.check()
        if time.monotonic() > deadline:
            raise BenchError(what)
        time.sleep(0.01)


def roundtrip_run(
    bootstrap: Endpoint,
    source: str,
    sink: str,
    *,
    rate: int,
    warmup_seconds: float,
    seconds: float,
    prefix: str = "",
    transactional: bool = True,
    copier_type: type[Copier] = Copier,
) -> list[float]:
    """The round trips, in seconds, of the records due in the last `seconds` of a run of
    `warmup_seconds + seconds` at `rate` records/s. `source` and `sink` are new, empty
    one-partition topics (the caller picks their replication); the copier's group and
    transactional id start with `prefix`. `copier_type` may be a Copier that traces."""
    total = int(rate * (warmup_seconds + seconds))
    copier = copier_type(bootstrap, source, sink, prefix, transactional)
    reader = Reader(bootstrap, sink, total, int(rate * warmup_seconds))
    copying = Worker(copier.run)
    reading = Worker(reader.run)
    try:
        wait_until(copier.assigned.is_set, copying, WAIT_S, "the copier got no partition")
        wait_until(reader.ready.is_set, copying, WAIT_S, "the reader does not poll")
        paced_send(bootstrap, source, total, rate)
        wait_until(
            lambda: not reading.alive(),
            copying,
            WAIT_S,
            f"{sink}: read {len(reader.seen)} of {total} records",
        )
        reading.join(WAIT_S)
    finally:
        reader.stop.set()
        copier.stop.set()
    copying.join(WAIT_S)
    if reader.duplicates:
        raise BenchError(f"{reader.duplicates} records read twice from {sink}")
    return reader.roundtrips


def roundtrip_pair(
    bootstrap: Endpoint,
    new_topic: Callable[[str], None],
    *,
    rate: int,
    warmup_seconds: float,
    seconds: float,
    prefix: str = "",
) -> dict[str, list[float]]:
    """The round trips of the plain copier, then of the transactional one, each through two
    topics `new_topic` creates, keyed "plain" and "txn"."""
    out: dict[str, list[float]] = {}
    for mode in ("plain", "txn"):
        name = f"{prefix}ctp-{mode}-{uuid.uuid4().hex[:8]}"
        source, sink = f"{name}-in", f"{name}-out"
        new_topic(source)
        new_topic(sink)
        out[mode] = roundtrip_run(
            bootstrap,
            source,
            sink,
            rate=rate,
            warmup_seconds=warmup_seconds,
            seconds=seconds,
            prefix=prefix,
            transactional=mode == "txn",
        )
    return out


def pair_figures(pair: dict[str, list[float]], name: str) -> dict[str, float]:
    """p50 and p99 of each copier in ms, and the ratio of the p50s (transactional/plain)."""
    out: dict[str, float] = {}
    for mode, trips in pair.items():
        ordered = sorted(trips)
        out[f"{name}_{mode}_p50_ms"] = ordered[len(ordered) // 2] * 1000
        out[f"{name}_{mode}_p99_ms"] = (
            ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000
        )
    out[f"{name}_txn_to_plain_p50_ratio"] = out[f"{name}_txn_p50_ms"] / out[f"{name}_plain_p50_ms"]
    return out
