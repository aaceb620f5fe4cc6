"""A transaction's records are never acknowledged as retries of an aborted one's.

librdkafka (2.16) loses records of a committed transaction against Kafka's rules, and did so
against Onceflow in the copier chaos test (750 records of one committed transaction):

1. a Produce request of transaction T1 is written, but its response is lost (here the proxy
   cuts the connection; in the chaos test the broker was killed);
2. the application aborts T1 while the records wait for their retry: librdkafka purges them
   and, with no epoch bump, gives their sequence numbers to the next records it sends;
3. T2's first batch then has exactly the sequences of T1's written batch. Kafka's
   duplicate check matches it, answers with T1's offsets and writes nothing; T2 commits,
   and the application was told its records were delivered.

Onceflow matches retries only within the producer's current transaction (batches before
its last marker on the partition belong to an ended one), so T2's batch is out of order:
librdkafka raises a fatal error, the application starts a new producer (which fences the
old one) and writes the records again. Every record a commit acknowledged is in the log.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Message, Producer

from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import create_topic
from tests.helpers.proxy import FaultProxy, Faults, read_partition

QUIET = logging.getLogger("purged-sequences")
QUIET.setLevel(logging.CRITICAL + 1)
RECORDS = 10


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[tuple[BrokerProcess, FaultProxy]]:
    proxy = FaultProxy(seed=7).start()
    broker = BrokerProcess(tmp_path / "data", {"advertised.listeners": proxy.address})
    try:
        broker.start()
        proxy.target_port = broker.port
        yield broker, proxy
        assert broker.stop() == 0, broker.log_tail()
    finally:
        broker.kill()
        proxy.stop()


def _producer(bootstrap: str) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": "purged-sequences",
            "transaction.timeout.ms": 60_000,
            "message.timeout.ms": 30_000,
            "linger.ms": 50,
            # The lost response's records wait this long for their retry: the abort comes
            # first and purges them, as an application's abort does after any error.
            "retry.backoff.ms": 5_000,
            "retry.backoff.max.ms": 5_000,
            "logger": QUIET,
        }
    )


def test_records_purged_at_an_abort_never_hide_the_next_transaction(
    proxied: tuple[BrokerProcess, FaultProxy],
) -> None:
    broker, proxy = proxied
    topic = create_topic(broker.bootstrap)
    reports: list[tuple[KafkaError | None, bytes]] = []

    def delivered(err: KafkaError | None, msg: Message) -> None:
        reports.append((err, msg.value() or b""))

    p = _producer(proxy.address)
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"t1-first", partition=0, on_delivery=delivered)
    assert p.flush(30) == 0
    # T1's next Produce request is written, and its response lost.
    proxy.set_faults(Faults(drop_produce_responses=frozenset({proxy.stats().produce_requests + 1})))
    for i in range(RECORDS):
        p.produce(topic, b"t1-%d" % i, partition=0, on_delivery=delivered)
    deadline = time.monotonic() + 30
    while not proxy.stats().unanswered_appends and time.monotonic() < deadline:
        p.poll(0.05)
    assert proxy.stats().unanswered_appends, "the fault did not fire"
    p.abort_transaction(30)
    purged = [err for err, value in reports if value.startswith(b"t1-") and value != b"t1-first"]
    assert len(purged) == RECORDS
    assert all(err is not None and err.code() == KafkaError._PURGE_QUEUE for err in purged)

    # T2 at the same epoch: librdkafka numbers its records with T1's purged sequences.
    reports.clear()
    p.begin_transaction()
    for i in range(RECORDS):
        p.produce(topic, b"t2-%d" % i, partition=0, on_delivery=delivered)
    try:
        p.commit_transaction(30)
        committed = True
    except KafkaException as exc:
        committed = False
        assert exc.args[0].fatal(), exc  # sequence desynchronization: a new producer
    acknowledged = {value for err, value in reports if err is None}
    log = read_partition(broker.bootstrap, topic, 0)
    missing = acknowledged - set(log.values())
    assert not missing, f"acknowledged but never written: {sorted(missing)}"
    if not committed:
        # A new producer fences the old one and writes T2 again, once.
        p = _producer(proxy.address)
        p.init_transactions(30)
        p.begin_transaction()
        for i in range(RECORDS):
            p.produce(topic, b"t2-%d" % i, partition=0, on_delivery=delivered)
        p.commit_transaction(30)
        log = read_partition(broker.bootstrap, topic, 0)
    t2 = [r for r in log.records if r.value is not None and r.value.startswith(b"t2-")]
    assert [r.value for r in t2] == [b"t2-%d" % i for i in range(RECORDS)]
    assert len({r.producer_epoch for r in t2}) == 1
