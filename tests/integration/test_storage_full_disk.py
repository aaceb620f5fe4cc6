"""A full disk, for real: the broker's data dir on a 12 MiB tmpfs, confluent-kafka clients.

The scenario of the storage-faults issue, as an operator met it: an idempotent producer
(acks=all) and a transactional producer write while the disk fills up (here another
process's file takes the last byte, so the moment is exact), the disk stays full for a few
seconds, then the file system is grown with no restart. Every acknowledged record must be
read exactly once and in order, every committed transaction whole with read_committed,
nothing of an aborted one, before and after a kill -9 and restart; the segment files hold
whole batches only; the broker logs a line per state change, not a traceback per request.

A second test keeps the free-space threshold on: client writes are refused before the disk
is full while an open transaction still commits, offsets are still committed, and produce
resumes by itself once space is freed.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from onceflow.errors import ErrorCode
from onceflow.records.batch import scan_batches
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import QUIET_LOGGER, create_topic
from tests.helpers.small_disk import SmallDisk, small_disk
from tests.helpers.txn import (
    TXN_BROKER_OVERRIDES,
    confluent_txn_producer,
    read_records,
    wait_for,
    wait_stable,
)

MIB = 1 << 20
FULL_FOR_S = 4.0  # how long the disk stays full (below the guard's 10 s hold)
TXN_RECORDS = 5
VALUE_PAD = b"." * 900


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[SmallDisk]:
    with small_disk(tmp_path / "data", 12) as mounted:
        yield mounted


def start_broker(disk: SmallDisk, **overrides: str) -> BrokerProcess:
    settings = {
        **TXN_BROKER_OVERRIDES,
        "log.segment.bytes": str(256 * 1024),  # rolls and producer snapshots while full
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.num.partitions": "4",
        **overrides,
    }
    return BrokerProcess(disk.path, settings).start()


# ---- the writers ---------------------------------------------------------------------


@dataclass
class IdempotentWriter:
    """Produces numbered records until stopped; remembers what was acknowledged."""

    bootstrap: str
    topic: str
    acked: dict[int, list[int]] = field(default_factory=dict)  # partition -> numbers
    failed: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        p = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 120_000,
                "logger": QUIET_LOGGER,
                "log_level": 0,
            }
        )

        def delivered(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                self.failed.append(str(err))
                return
            number = int((msg.value() or b"").split(b":")[0])
            self.acked.setdefault(msg.partition() or 0, []).append(number)

        n = 0
        while not self.stop.is_set():
            try:
                p.produce(self.topic, value=b"%d:" % n + VALUE_PAD, on_delivery=delivered)
                n += 1
            except BufferError:
                p.poll(0.05)
            if n % 50 == 0:
                p.poll(0)
                time.sleep(0.005)
        assert p.flush(120) == 0, "idempotent producer could not deliver after space was back"


@dataclass
class TransactionalWriter:
    """Commits transactions of TXN_RECORDS records over two partitions until stopped."""

    bootstrap: str
    topic: str
    committed: list[int] = field(default_factory=list)
    aborted: list[int] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        p = confluent_txn_producer(
            self.bootstrap, "disk-full-txn", **{"transaction.timeout.ms": 60_000}
        )
        p.init_transactions(30)
        txn = 0
        while not self.stop.is_set():
            p.begin_transaction()
            for k in range(TXN_RECORDS):
                p.produce(self.topic, value=b"t%d-%d" % (txn, k), partition=k % 2)
            if self._end(p, txn):
                self.committed.append(txn)
            else:
                self.aborted.append(txn)
            txn += 1
            time.sleep(0.02)

    @staticmethod
    def _end(p: Producer, txn: int) -> bool:
        """Commit, retrying what is retriable; abort what must be aborted."""
        deadline = time.monotonic() + 120
        while True:
            try:
                p.commit_transaction(30)
                return True
            except KafkaException as exc:
                err = exc.args[0]
                if err.txn_requires_abort():
                    p.abort_transaction(60)
                    return False
                if not err.retriable() or time.monotonic() > deadline:
                    raise


# ---- the checks ----------------------------------------------------------------------


def check_idempotent(broker: BrokerProcess, topic: str, writer: IdempotentWriter) -> None:
    ends = wait_stable(broker.bootstrap, topic, [0, 1])
    got = read_records("confluent", broker.bootstrap, topic, ends, committed=False, timeout=60)
    by_partition: dict[int, list[int]] = {}
    for r in got:
        by_partition.setdefault(r.partition, []).append(int((r.value or b"").split(b":")[0]))
    for partition, acked in writer.acked.items():
        read = by_partition.get(partition, [])
        counts = Counter(read)
        assert not [n for n in acked if counts[n] != 1], (
            f"partition {partition}: acknowledged records not read exactly once"
        )
        assert read == sorted(read), f"partition {partition}: records out of order"


def check_transactions(broker: BrokerProcess, topic: str, writer: TransactionalWriter) -> None:
    ends = wait_stable(broker.bootstrap, topic, [0, 1])
    got = read_records("confluent", broker.bootstrap, topic, ends, committed=True, timeout=60)
    values = Counter(r.value for r in got)
    assert all(n == 1 for n in values.values()), "a transactional record read twice"
    by_txn = Counter(int((v or b"").split(b"-")[0][1:]) for v in values)
    for txn in writer.committed:
        assert by_txn[txn] == TXN_RECORDS, f"committed transaction {txn} read in part or lost"
    for txn in writer.aborted:
        assert by_txn[txn] == 0, f"aborted transaction {txn} visible"
    assert set(by_txn) <= set(writer.committed), "records of a transaction never committed"


def check_segments_whole(disk: SmallDisk) -> None:
    for log in disk.path.glob("*-*/*.log"):
        raw = log.read_bytes()
        _, end = scan_batches(raw)
        assert end == len(raw), f"{log}: a torn or corrupt batch at byte {end} of {len(raw)}"


def log_lines(broker: BrokerProcess, text: str) -> int:
    return sum(1 for line in broker.log.splitlines() if text in line)


# ---- the tests -----------------------------------------------------------------------


def test_a_disk_filled_to_the_last_byte_loses_and_tears_nothing(disk: SmallDisk) -> None:
    broker = start_broker(
        disk,
        **{
            "onceflow.log.dir.min.free.bytes": "0",  # the check off: real ENOSPC everywhere
            "onceflow.log.dir.ballast.bytes": str(256 * 1024),
        },
    )
    try:
        data = create_topic(broker.bootstrap, "data", partitions=2)
        txns = create_topic(broker.bootstrap, "txns", partitions=2)
        idem = IdempotentWriter(broker.bootstrap, data)
        txn = TransactionalWriter(broker.bootstrap, txns)
        threads = [threading.Thread(target=w.run, daemon=True) for w in (idem, txn)]
        for t in threads:
            t.start()
        wait_for(lambda: sum(map(len, idem.acked.values())) > 2000, 60, "records before filling")
        wait_for(lambda: len(txn.committed) > 5, 60, "transactions before filling")

        disk.fill(leave=0)  # another process takes the last byte
        wait_for(lambda: log_lines(broker, "-> full") >= 1, 30, "the broker to see the disk full")
        acked_when_full = sum(map(len, idem.acked.values()))
        time.sleep(FULL_FOR_S)
        assert broker.running
        assert log_lines(broker, "released the 262144-byte ballast") == 1
        # Nothing of the client's data got in while the disk had no room for it.
        assert sum(map(len, idem.acked.values())) - acked_when_full < 100

        disk.grow(64)  # space again, no restart
        wait_for(lambda: log_lines(broker, "full -> ok") >= 1, 30, "the broker to see space")
        more = sum(map(len, idem.acked.values())) + 2000
        wait_for(lambda: sum(map(len, idem.acked.values())) > more, 60, "records after growing")
        committed = len(txn.committed)
        wait_for(lambda: len(txn.committed) > committed + 5, 60, "transactions after growing")
        for w in (idem, txn):
            w.stop.set()
        for t in threads:
            t.join(180)
        assert not idem.failed, idem.failed[:3]

        check_idempotent(broker, data, idem)
        check_transactions(broker, txns, txn)
        check_segments_whole(disk)
        assert broker.internal_errors() == []
        # A line per state change, not one per refused request.
        assert 1 <= log_lines(broker, "-> full") <= 2

        broker.kill()  # kill -9: recovery from the files alone
        broker.start()
        check_idempotent(broker, data, idem)
        check_transactions(broker, txns, txn)
        check_segments_whole(disk)
        print(
            f"\nfull disk: {sum(map(len, idem.acked.values()))} idempotent records acked, "
            f"{len(txn.committed)} transactions committed, {len(txn.aborted)} aborted; "
            "all read back exactly once before and after kill -9"
        )
    finally:
        broker.kill()


def test_below_the_threshold_produce_waits_while_transactions_and_offsets_finish(
    disk: SmallDisk,
) -> None:
    broker = start_broker(
        disk,
        **{
            "onceflow.log.dir.min.free.bytes": str(3 * MIB),
            "onceflow.log.dir.min.free.percent": "100",
            "onceflow.log.dir.ballast.bytes": "0",
        },
    )
    try:
        topic = create_topic(broker.bootstrap, "orders", partitions=2)
        # A transaction whose records are written before the disk runs low.
        tp = confluent_txn_producer(broker.bootstrap, "low-disk-txn")
        tp.init_transactions(30)
        tp.begin_transaction()
        for k in range(TXN_RECORDS):
            tp.produce(topic, value=b"before-%d" % k, partition=k % 2)
        assert tp.flush(30) == 0

        disk.fill(leave=2 * MIB)
        wait_for(lambda: log_lines(broker, "ok -> low") == 1, 30, "the broker to see low space")

        # Client data is refused with a retriable storage error, not a closed connection.
        plain = Producer(
            {
                "bootstrap.servers": broker.bootstrap,
                "acks": "all",
                "retries": 0,
                "logger": QUIET_LOGGER,
                "log_level": 0,
            }
        )
        errors: list[KafkaError | None] = []
        plain.produce(
            topic, value=b"refused", partition=0, on_delivery=lambda e, m: errors.append(e)
        )
        plain.flush(30)
        assert len(errors) == 1 and errors[0] is not None
        assert errors[0].code() == KafkaError.KAFKA_STORAGE_ERROR
        assert ErrorCode(errors[0].code()).retriable  # clients retry it (Kafka's table)

        # The broker's own writes go on in the headroom: the transaction commits ...
        tp.commit_transaction(30)
        # ... another one can be aborted ...
        tp.begin_transaction()
        tp.produce(topic, value=b"never", partition=1)
        tp.abort_transaction(60)
        # ... and a consumer group commits its offsets.
        group = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": "low-disk-group",
                "enable.auto.commit": False,
                "logger": QUIET_LOGGER,
                "log_level": 0,
            }
        )
        group.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
        committed = group.committed([TopicPartition(topic, 0)], timeout=30)
        assert committed[0].offset == 1
        group.close()

        ends = wait_stable(broker.bootstrap, topic, [0, 1])
        got = read_records("confluent", broker.bootstrap, topic, ends, committed=True)
        assert sorted(r.value for r in got) == [b"before-%d" % k for k in range(TXN_RECORDS)]

        disk.unfill()  # space freed: produce resumes with no restart
        wait_for(lambda: log_lines(broker, "low -> ok") == 1, 30, "the broker to see space")
        errors.clear()
        plain.produce(
            topic, value=b"accepted", partition=0, on_delivery=lambda e, m: errors.append(e)
        )
        plain.flush(30)
        assert errors == [None]
        ends = wait_stable(broker.bootstrap, topic, [0, 1])
        got = read_records("confluent", broker.bootstrap, topic, ends, committed=True)
        assert Counter(r.value for r in got)[b"accepted"] == 1
        assert b"refused" not in {r.value for r in got} and b"never" not in {r.value for r in got}
        assert log_lines(broker, "ok -> low") == 1 and log_lines(broker, "low -> ok") == 1
        assert broker.internal_errors() == []
    finally:
        broker.kill()
