"""SIGKILL the broker during heavy acks=all produce; every acknowledged record must survive.

An acks=all acknowledgement means the batch is durable (onceflow.fsync.on.ack). After a
crash and restart, each acknowledged record must be readable at exactly the offset its
delivery report gave, with its key, value and headers intact; the log must hold no partial
batch (the consumer checks CRCs) and no offset gaps. Unacknowledged records may or may not be
there (at-least-once without idempotence), but whatever is there must be a record we sent.
Group offsets committed before the crash must be unchanged after it.
"""

from __future__ import annotations

import hashlib
import random
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from onceflow.records.batch import scan_batches
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import (
    OP_TIMEOUT_S,
    committed_offsets,
    consume_until,
    consumer,
    create_topic,
    produce_and_confirm,
    producer,
)

PARTITIONS = 4
CRASHES = 3
GROUP = "chaos-group"


def _value(part: int, seq: int, rng: random.Random) -> bytes:
    """A self-checking value: a header with a digest of a random-length payload."""
    payload = rng.randbytes(rng.choice([10, 100, 1000, 5000]))
    digest = hashlib.blake2b(payload, digest_size=8).hexdigest()
    return f"{part}:{seq}:{digest}:".encode() + payload


def _check_value(value: bytes) -> tuple[int, int]:
    part, seq, digest, payload = value.split(b":", 3)
    assert hashlib.blake2b(payload, digest_size=8).hexdigest().encode() == digest, "corrupt value"
    return int(part), int(seq)


class Load:
    """Produces acks=all as fast as the broker takes it, until stopped."""

    def __init__(self, bootstrap: str, topic: str, seed: int) -> None:
        self.topic = topic
        self.rng = random.Random(seed)
        self.p = producer(
            bootstrap,
            acks="all",
            **{
                "linger.ms": 2,
                "message.timeout.ms": 15_000,
                "retry.backoff.ms": 100,
                "reconnect.backoff.ms": 50,
                "reconnect.backoff.max.ms": 200,
            },
        )
        self.acked: dict[tuple[int, int], tuple[bytes, bytes, list[tuple[str, bytes]]]] = {}
        self.sent: dict[bytes, tuple[bytes, list[tuple[str, bytes]]]] = {}  # value -> key, headers
        self.failed = 0
        self.double_acked: list[tuple[int, int]] = []
        self.stop_flag = threading.Event()
        self.seq = 0
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.failed += 1
            return
        value = msg.value()
        key, headers = self.sent[value]
        pos = (msg.partition(), msg.offset())
        if pos in self.acked:  # checked by the test; an exception here would be lost
            self.double_acked.append(pos)
        self.acked[pos] = (key, value, headers)

    def _run(self) -> None:
        while not self.stop_flag.is_set():
            part = self.seq % PARTITIONS
            value = _value(part, self.seq, self.rng)
            key = f"key-{self.seq % 13}".encode()
            headers = [("seq", str(self.seq).encode())]
            self.sent[value] = (key, headers)
            try:
                self.p.produce(
                    self.topic,
                    value=value,
                    key=key,
                    headers=headers,
                    partition=part,
                    on_delivery=self._on_delivery,
                )
                self.seq += 1
            except BufferError:
                self.p.poll(0.05)
            self.p.poll(0)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stop_flag.set()
        self.thread.join(OP_TIMEOUT_S)
        assert not self.thread.is_alive()

    def drain(self) -> None:
        """Wait for every outstanding delivery report (success or failure)."""
        remaining = self.p.flush(40)
        assert remaining == 0, f"{remaining} messages without a delivery report"


def _check_files_on_disk(data_dir: str, topic: str) -> None:
    """Every segment file holds whole, CRC-valid batches only, and the offsets tile."""
    for p in range(PARTITIONS):
        expected = 0
        for seg in sorted((Path(data_dir) / f"{topic}-{p}").glob("*.log")):
            raw = seg.read_bytes()
            batches, end = scan_batches(raw)
            assert end == len(raw), f"{seg}: {len(raw) - end} bytes of torn or corrupt batch"
            assert int(seg.name.split(".")[0]) == expected, f"{seg}: offsets do not tile"
            for b in batches:
                assert b.header.base_offset == expected, f"{seg}: gap at {expected}"
                expected = b.header.next_offset


def _read_everything(bs: str, topic: str) -> dict[int, list[Message]]:
    c = consumer(bs, **{"check.crcs": True, "enable.partition.eof": True})
    try:
        ends = {}
        for p in range(PARTITIONS):
            low, high = c.get_watermark_offsets(
                TopicPartition(topic, p), timeout=OP_TIMEOUT_S, cached=False
            )
            assert low == 0
            ends[p] = high
        c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS) if ends[p] > 0])
        total = sum(ends.values())
        got = consume_until(c, lambda g: len(g) >= total, timeout=90, what=f"all {total} records")
    finally:
        c.close()
    by_part: dict[int, list[Message]] = defaultdict(list)
    for m in got:
        by_part[m.partition()].append(m)
    for p, msgs in by_part.items():
        assert [m.offset() for m in msgs] == list(range(ends[p])), f"gap or repeat in partition {p}"
    return by_part


@pytest.mark.slow
@pytest.mark.parametrize("how", ["sigkill", "sigterm"])
def test_kill_during_acks_all_produce_loses_no_acknowledged_record(
    broker: BrokerProcess, how: str
) -> None:
    """SIGKILL is a crash; SIGTERM is a shutdown under load, which must also exit 0."""
    bs = broker.bootstrap
    topic = create_topic(bs, partitions=PARTITIONS)

    # Group offsets committed before any crash.
    seed = produce_and_confirm(
        producer(bs, acks="all"),
        topic,
        [(p, b"seed", f"seed-{p}-{i}".encode(), None) for p in range(PARTITIONS) for i in range(5)],
    )
    assert not seed.errors
    committed = {p: p + 1 for p in range(PARTITIONS)}
    c = consumer(bs, GROUP)
    try:
        c.commit(
            offsets=[TopicPartition(topic, p, o) for p, o in committed.items()], asynchronous=False
        )
        assert committed_offsets(c, topic, range(PARTITIONS)) == committed
    finally:
        c.close()

    # A clean restart first: the crashes below then follow a start that found the
    # clean-shutdown marker, which must not let a later crash skip recovery.
    broker.restart()

    load = Load(bs, topic, seed=1)
    rng = random.Random(99)
    load.start()
    try:
        for crash in range(CRASHES):
            before = len(load.acked)
            deadline = time.monotonic() + 30
            # Let enough acknowledged traffic build up, then kill at a random moment.
            while len(load.acked) < before + 300 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(load.acked) > before, f"no acks before crash {crash}:\n{broker.log_tail()}"
            time.sleep(rng.uniform(0.0, 0.3))
            if how == "sigkill":
                broker.kill()
            else:
                code = broker.stop()
                assert code == 0, f"exit code {code} on SIGTERM under load:\n{broker.log_tail()}"
            time.sleep(rng.uniform(0.1, 0.5))
            broker.start()
    finally:
        load.stop()
    load.drain()

    assert not load.double_acked, f"offsets acknowledged twice: {load.double_acked[:10]}"
    assert len(load.acked) > CRASHES * 300

    broker.stop()  # quiescent files to check (a clean stop has flushed everything)
    _check_files_on_disk(broker.data_dir, topic)
    broker.start()
    by_part = _read_everything(bs, topic)
    # Seed records first, untouched.
    for p in range(PARTITIONS):
        assert [m.value() for m in by_part[p][:5]] == [f"seed-{p}-{i}".encode() for i in range(5)]

    present: dict[tuple[int, int], Message] = {
        (m.partition(), m.offset()): m for msgs in by_part.values() for m in msgs
    }
    for (p, off), (key, value, headers) in load.acked.items():
        m = present.get((p, off))
        assert m is not None, f"acknowledged record {p}@{off} is missing"
        assert (m.key(), m.value(), m.headers()) == (key, value, headers), (
            f"wrong record at {p}@{off}"
        )
    # Everything else is a record we sent, intact, in the partition it was sent to. (Without
    # idempotence a retried batch may repeat or overtake another: no order is checked.)
    for msgs in by_part.values():
        for m in msgs[5:]:
            part, _ = _check_value(m.value())
            assert part == m.partition()
            key, headers = load.sent[m.value()]
            assert (m.key(), m.headers()) == (key, headers)

    c = consumer(bs, GROUP)
    try:
        assert committed_offsets(c, topic, range(PARTITIONS)) == committed
    finally:
        c.close()


@pytest.mark.slow
def test_kill_during_offset_commits_keeps_every_acknowledged_commit(broker: BrokerProcess) -> None:
    """Synchronous commits race a SIGKILL: a commit the broker acknowledged must survive;
    one whose answer was lost may or may not (but nothing else may appear)."""
    bs = broker.bootstrap
    topic = create_topic(bs, partitions=2)
    group = "chaos-commits"
    attempted: list[int] = []
    acknowledged: list[int] = []
    stop = threading.Event()

    def commit_loop() -> None:
        c = consumer(bs, group, **{"socket.timeout.ms": 3000, "reconnect.backoff.max.ms": 200})
        n = 0
        try:
            while not stop.is_set():
                n += 1
                attempted.append(n)
                try:
                    c.commit(
                        offsets=[TopicPartition(topic, 0, n), TopicPartition(topic, 1, 2 * n)],
                        asynchronous=False,
                    )
                except KafkaException:
                    time.sleep(0.05)
                    continue
                acknowledged.append(n)
        finally:
            c.close()

    rng = random.Random(5)
    thread = threading.Thread(target=commit_loop, daemon=True)
    thread.start()
    try:
        for _ in range(CRASHES):
            before = len(acknowledged)
            deadline = time.monotonic() + 30
            while len(acknowledged) < before + 20 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert len(acknowledged) > before, f"no commit succeeded:\n{broker.log_tail()}"
            time.sleep(rng.uniform(0.0, 0.2))
            broker.kill()
            last_acked = acknowledged[-1]
            broker.start()
            c = consumer(bs, group)
            try:
                got = committed_offsets(c, topic, range(2))
            finally:
                c.close()
            # The stored commit is the last acknowledged one or a later attempt, never older.
            n = got[0]
            assert n >= last_acked, f"acknowledged commit {last_acked} lost; found {n}"
            assert n in attempted and got == {0: n, 1: 2 * n}, got
    finally:
        stop.set()
        thread.join(OP_TIMEOUT_S)
