"""Restart the broker under an idempotent confluent-kafka producer: still exactly once.

One producer object (acks=all, idempotence on, 5 requests in flight) sends numbered records
to a few partitions without pause while the broker is killed with SIGKILL (or stopped with
SIGTERM) and started again on the same port and data dir, several times. Small segments
make the partitions roll, so producer-state snapshots are written and used.

Just before each restart a proxy in front of the broker swallows the broker's responses for
a moment, so batches are appended (and, with acks=all, durable) but never acknowledged. The
client retries them against the restarted broker, which must recognise them as duplicates
from the producer state it rebuilt: from a snapshot plus the log after it, or from the
whole log when the snapshots are deleted or corrupt. At the end every record is in its
partition exactly once, in order, at the offset the client was told.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Message

from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import OP_TIMEOUT_S, create_topic
from tests.helpers.clients import producer as confluent_producer
from tests.helpers.proxy import FaultProxy, read_partition

PARTITIONS = 3
SEGMENT_BYTES = 65536
VALUE_PADDING = 400
ACKS_PER_CYCLE = 900
MAX_OUTSTANDING = 1500
DELIVERY_TIMEOUT_S = 90.0
SKIPPED_SNAPSHOT_LOG = "skipping unreadable producer snapshot"


def _value(partition: int, i: int) -> bytes:
    head = f"p{partition}-{i:07d}-".encode()
    return head + bytes((i + k) % 251 for k in range(VALUE_PADDING))


class Load:
    """Sends numbered records round-robin over the partitions until stopped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.p = confluent_producer(
            bootstrap,
            **{
                "enable.idempotence": True,
                "acks": "all",
                "max.in.flight.requests.per.connection": 5,
                "linger.ms": 2,
                "message.timeout.ms": int(DELIVERY_TIMEOUT_S * 1000),
                "retry.backoff.ms": 50,
                "reconnect.backoff.ms": 20,
                "reconnect.backoff.max.ms": 200,
            },
        )
        self.sent = [0] * PARTITIONS
        self.acked: dict[tuple[int, int], int] = {}
        self.acked_twice: list[tuple[int, int]] = []
        self.errors: list[KafkaError] = []
        self.stop_flag = threading.Event()
        self.thread = threading.Thread(target=self._run, name="idempotent-load", daemon=True)

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.errors.append(err)
            return
        key = (msg.partition(), int(msg.value().split(b"-")[1]))
        if key in self.acked:
            self.acked_twice.append(key)
        self.acked[key] = msg.offset()

    def _run(self) -> None:
        n = 0
        while not self.stop_flag.is_set():
            if sum(self.sent) - len(self.acked) - len(self.errors) >= MAX_OUTSTANDING:
                self.p.poll(0.05)
                continue
            part = n % PARTITIONS
            try:
                self.p.produce(
                    self.topic,
                    value=_value(part, self.sent[part]),
                    partition=part,
                    on_delivery=self._on_delivery,
                )
            except BufferError:
                self.p.poll(0.05)
                continue
            self.sent[part] += 1
            n += 1
            self.p.poll(0)

    def start(self) -> None:
        self.thread.start()

    def wait_acks(self, more_than: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.acked) <= more_than and time.monotonic() < deadline:
            time.sleep(0.05)

    def finish(self) -> None:
        self.stop_flag.set()
        self.thread.join(OP_TIMEOUT_S)
        assert not self.thread.is_alive(), "the producing thread did not stop"
        remaining = self.p.flush(DELIVERY_TIMEOUT_S)
        assert remaining == 0, f"{remaining} records without a delivery report"


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[tuple[BrokerProcess, FaultProxy]]:
    proxy = FaultProxy(seed=7).start()
    broker = BrokerProcess(
        tmp_path / "data",
        {"advertised.listeners": proxy.address, "log.segment.bytes": str(SEGMENT_BYTES)},
    )
    try:
        broker.start()
        proxy.target_port = broker.port
        yield broker, proxy
        if broker.running:
            assert broker.stop() == 0, f"unclean shutdown; its log:\n{broker.log_tail()}"
    finally:
        broker.kill()
        proxy.stop()


def _partition_dirs(broker: BrokerProcess, topic: str) -> list[Path]:
    return [Path(broker.data_dir) / f"{topic}-{p}" for p in range(PARTITIONS)]


def _spoil_snapshots(broker: BrokerProcess, topic: str, rng: random.Random) -> int:
    """Partition 0 loses its snapshots, partition 1 has all of them corrupted (a full
    replay each), partition 2 only its newest (the older one plus a longer replay).
    Returns how many snapshot files were made unreadable (not counting deleted ones)."""
    spoiled = 0
    for p, directory in enumerate(_partition_dirs(broker, topic)):
        snapshots = sorted(directory.glob("*.snapshot"))
        assert snapshots, f"no snapshot in {directory} after a clean shutdown"
        if p == 0:
            for path in snapshots:
                path.unlink()
            continue
        for path in snapshots if p == 1 else snapshots[-1:]:
            data = bytearray(path.read_bytes())
            if rng.random() < 0.5 and len(data) > 8:
                data = data[: rng.randrange(1, len(data) - 1)]  # torn
            else:
                i = rng.randrange(len(data))
                data[i] ^= 0x5A  # a flipped byte
            path.write_bytes(bytes(data))
            spoiled += 1
    return spoiled


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "cycles"), [("kill", 3), ("clean", 2), ("clean-spoiled-snapshots", 2)]
)
def test_idempotent_producer_survives_broker_restarts_exactly_once(
    proxied: tuple[BrokerProcess, FaultProxy], mode: str, cycles: int
) -> None:
    broker, proxy = proxied
    topic = create_topic(proxy.address, partitions=PARTITIONS)
    rng = random.Random(f"{mode}-42")
    load = Load(proxy.address, topic)
    load.start()
    spoiled = 0
    try:
        for cycle in range(cycles):
            before = len(load.acked)
            load.wait_acks(before + ACKS_PER_CYCLE)
            assert len(load.acked) > before, f"no progress in cycle {cycle}:\n{broker.log_tail()}"
            time.sleep(rng.uniform(0.0, 0.2))

            # Appended but unanswered: hold the broker's answers until some success is lost.
            lost_before = len(proxy.stats().unanswered_appends)
            proxy.hold_responses()
            deadline = time.monotonic() + 10
            while (
                len(proxy.stats().unanswered_appends) <= lost_before and time.monotonic() < deadline
            ):
                time.sleep(0.01)
            time.sleep(rng.uniform(0.0, 0.05))
            if mode == "kill":
                broker.kill()
            else:
                assert broker.stop() == 0, f"unclean shutdown:\n{broker.log_tail()}"
                if mode == "clean-spoiled-snapshots":
                    spoiled += _spoil_snapshots(broker, topic, rng)
            proxy.release_responses()
            time.sleep(rng.uniform(0.1, 1.0))
            broker.start()
        load.wait_acks(len(load.acked) + ACKS_PER_CYCLE // 3)
    finally:
        proxy.release_responses()
        load.finish()

    assert not load.errors, f"delivery errors: {load.errors[:5]}"
    assert not load.acked_twice, f"records acknowledged twice: {load.acked_twice[:5]}"
    stats = proxy.stats()
    print(
        f"{mode}: sent {load.sent}, {stats.batches_resent} batches resent, "
        f"{len(stats.unanswered_appends)} acknowledged batches unanswered, "
        f"{len(stats.retried_appends)} of them retried"
    )
    # Batches the broker had acknowledged before a restart were sent again after it.
    assert stats.retried_appends, f"no acknowledged batch was retried: {stats}"

    for p in range(PARTITIONS):
        expected = [_value(p, i) for i in range(load.sent[p])]
        contents = read_partition(broker.bootstrap, topic, p)
        got = contents.values()
        if got != expected:
            dupes = len(got) - len(set(got))
            first_diff = next(
                (i for i, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b), None
            )
            raise AssertionError(
                f"partition {p}: {len(got)} records for {len(expected)} sent, {dupes} repeated, "
                f"first difference at offset {first_diff}"
            )
        assert contents.high_watermark == load.sent[p]
        wrong = [(i, load.acked[(p, i)]) for i in range(load.sent[p]) if load.acked[(p, i)] != i]
        assert not wrong, f"partition {p}: acknowledged at other offsets: {wrong[:5]}"

    # The segments rolled, so snapshots were written along the way, not just at shutdown.
    for directory in _partition_dirs(broker, topic):
        assert len(list(directory.glob("*.log"))) > 2, f"{directory} never rolled"
        snapshots = list(directory.glob("*.snapshot"))
        assert 1 <= len(snapshots) <= 2, f"{directory}: snapshots {snapshots} (the newest two)"
    if mode == "clean-spoiled-snapshots":
        assert spoiled > 0
        assert SKIPPED_SNAPSHOT_LOG in broker.log, "the broker never skipped a bad snapshot"
