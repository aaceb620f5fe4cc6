"""The participant client (onceflow.client.participant) against a real broker with
two-phase commit on: a transaction prepared by a process that then exits is committed or
aborted from this one; nothing shows before; zombies are fenced; a stale prepared state
commits nothing; a Produce whose answer was lost is not written twice; per-partition order
holds across many batches; and a prepared transaction survives kill -9 of the broker.

Records are read back by a read_committed confluent-kafka consumer and, behind the
clients' backs, with raw Fetch requests (each record's producer id and sequence).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, TopicPartition

from onceflow.client.errors import KafkaApiError
from onceflow.client.participant import (
    PreparedTransaction,
    StalePreparedTransaction,
    TwoPhaseProducer,
    complete,
)
from onceflow.client.participant_records import kafka_partition
from onceflow.errors import ErrorCode
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import consumer, create_topic
from tests.helpers.proxy import FaultProxy, Faults, read_partition
from tests.helpers.wire import RawConnection, fetch_request

TWO_PC = {"transaction.two.phase.commit.enable": "true"}
PARTITIONS = 3
ROOT = Path(__file__).resolve().parents[2]

# The producing side, run as its own process: it prepares, prints the prepared state and
# exits without closing anything.
CHILD = textwrap.dedent(
    """
    import os, sys
    from onceflow.client.participant import TwoPhaseProducer
    bootstrap, txn_id, topic, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    producer = TwoPhaseProducer(bootstrap, txn_id, batch_size=2048)
    producer.init()
    producer.begin()
    for i in range(count):
        producer.produce(topic, b"%05d" % i, key=b"key-%d" % (i % 17))
    print(producer.prepare().to_json(), flush=True)
    os._exit(0)
    """
)


def expected_by_partition(count: int) -> dict[int, list[bytes]]:
    """What CHILD writes, per partition, in order (Kafka's partitioner on its keys)."""
    out: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for i in range(count):
        out[kafka_partition(b"key-%d" % (i % 17), PARTITIONS)].append(b"%05d" % i)
    return out


def prepare_in_child(bootstrap: str, txn_id: str, topic: str, count: int) -> PreparedTransaction:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, bootstrap, txn_id, topic, str(count)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return PreparedTransaction.from_json(done.stdout.strip())


def read_committed(
    bootstrap: str, topic: str, partitions: int = PARTITIONS
) -> dict[int, list[bytes]]:
    """Every record a read_committed consumer sees, per partition, up to each end."""
    c = consumer(bootstrap, **{"isolation.level": "read_committed", "enable.partition.eof": True})
    got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    ended: set[int] = set()
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + 30
        while len(ended) < partitions and time.monotonic() < deadline:
            message = c.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None and error.code() == KafkaError._PARTITION_EOF:
                ended.add(message.partition())
                continue
            assert error is None, error
            got[message.partition()].append(message.value())
    finally:
        c.close()
    assert len(ended) == partitions, f"no end reached on every partition; read {got}"
    return got


def stable_and_high(bootstrap: str, topic: str) -> dict[int, tuple[int, int, bytes]]:
    """(last stable offset, high watermark, records) of a read_committed Fetch, per partition."""
    with RawConnection(bootstrap) as conn:
        answer = conn.call(
            fetch_request(
                topic, {p: (0, -1) for p in range(PARTITIONS)}, isolation_level=1, max_wait_ms=0
            )
        )
    out = {}
    for part in answer.responses[0].partitions:
        assert part.error_code == ErrorCode.none, part.error_code
        out[int(part.partition_index)] = (
            int(part.last_stable_offset),
            int(part.high_watermark),
            bytes(part.records or b""),
        )
    return out


def assert_nothing_visible(bootstrap: str, topic: str, written: int) -> None:
    """The records are in the log (the high watermarks add up) and none is readable."""
    seen = stable_and_high(bootstrap, topic)
    assert sum(hw for _, hw, _ in seen.values()) == written
    assert all(lso == 0 and records == b"" for lso, _, records in seen.values()), seen


@pytest.mark.broker_overrides(TWO_PC)
@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_a_transaction_prepared_by_a_process_that_exited_is_completed_from_another(
    broker: BrokerProcess, commit: bool
) -> None:
    topic = create_topic(broker.bootstrap, f"participant-{commit}", PARTITIONS)
    count = 3000
    prepared = prepare_in_child(broker.bootstrap, "participant-child", topic, count)
    assert prepared.transactional_id == "participant-child"
    assert_nothing_visible(broker.bootstrap, topic, count)
    complete(prepared, commit, bootstrap_servers=broker.bootstrap)
    seen = read_committed(broker.bootstrap, topic)
    if commit:
        assert seen == expected_by_partition(count)  # each once, in order per partition
    else:
        assert seen == {p: [] for p in range(PARTITIONS)}
        assert sum(hw for _, hw, _ in stable_and_high(broker.bootstrap, topic).values()) > count


@pytest.mark.broker_overrides(TWO_PC)
def test_completing_a_stale_prepared_state_commits_nothing(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, "participant-stale", PARTITIONS)
    first = prepare_in_child(broker.bootstrap, "participant-stale", topic, 10)
    complete(first, True, bootstrap_servers=broker.bootstrap)
    # Completed already: a second commit is refused, an abort does nothing.
    with pytest.raises(StalePreparedTransaction) as refused:
        complete(first, True, bootstrap_servers=broker.bootstrap)
    assert refused.value.name == "INVALID_TXN_STATE"
    complete(first, False, bootstrap_servers=broker.bootstrap)
    assert sum(len(v) for v in read_committed(broker.bootstrap, topic).values()) == 10
    # Replaced: a new instance without keepPreparedTxn aborted it.
    second = prepare_in_child(broker.bootstrap, "participant-stale", topic, 5)
    assert (second.producer_id, second.producer_epoch) != (first.producer_id, first.producer_epoch)
    with TwoPhaseProducer(broker.bootstrap, "participant-stale") as successor:
        successor.init()
    with pytest.raises(StalePreparedTransaction):
        complete(second, True, bootstrap_servers=broker.bootstrap)
    complete(second, False, bootstrap_servers=broker.bootstrap)
    assert sum(len(v) for v in read_committed(broker.bootstrap, topic).values()) == 10


@pytest.mark.broker_overrides(TWO_PC)
def test_zombies_are_fenced_by_a_new_instance(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, "participant-zombie", PARTITIONS)
    zombie = TwoPhaseProducer(broker.bootstrap, "participant-zombie")
    zombie.init()
    zombie.begin()
    zombie.produce(topic, b"zombie-1", partition=0)
    zombie.flush()
    successor = TwoPhaseProducer(broker.bootstrap, "participant-zombie")
    successor.init()  # aborts the zombie's transaction at a new epoch
    zombie.produce(topic, b"zombie-2", partition=0)
    with pytest.raises(KafkaApiError) as produced:
        zombie.flush()
    assert produced.value.name == "INVALID_PRODUCER_EPOCH"
    with pytest.raises(KafkaApiError) as again:
        zombie.commit()
    assert again.value.name == "INVALID_PRODUCER_EPOCH"  # fatal: it sticks
    # A prepared instance is fenced by the completion of its transaction elsewhere.
    successor.begin()
    successor.produce(topic, b"kept", partition=1)
    prepared = successor.prepare()
    complete(prepared, True, bootstrap_servers=broker.bootstrap)
    with pytest.raises(KafkaApiError) as ended:
        successor.commit()
    assert ended.value.name == "PRODUCER_FENCED"
    successor.close()
    zombie.close()
    assert read_committed(broker.bootstrap, topic) == {0: [], 1: [b"kept"], 2: []}


@pytest.mark.broker_overrides(TWO_PC)
@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_order_and_sequences_per_partition_across_many_batches_and_transactions(
    broker: BrokerProcess, compression: str
) -> None:
    """The log itself (raw Fetch, no consumer) holds every record once, in order, with
    sequences continuing from 0 across batches and transactions of one epoch."""
    topic = create_topic(broker.bootstrap, f"participant-order-{compression}", PARTITIONS)
    settings = {"batch.size": 1024, "compression.type": compression}
    with TwoPhaseProducer(broker.bootstrap, "participant-order", **settings) as producer:
        producer.init()
        sent: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        for txn, commit in enumerate((True, False, True)):
            producer.begin()
            for i in range(2000):
                value = b"t%d-%05d" % (txn, i)
                producer.produce(topic, value)  # no key: round robin, across transactions
                if commit:
                    sent[(txn * 2000 + i) % PARTITIONS].append(value)
            if commit:
                producer.commit()
            else:
                producer.flush()
                producer.abort()
        pid, epoch = producer.producer_id, producer.producer_epoch
    for p in range(PARTITIONS):
        logged = read_partition(broker.bootstrap, topic, p).records
        data = [r for r in logged if r.producer_id == pid and r.sequence >= 0]  # no markers
        assert [r.sequence for r in data] == list(range(len(data)))
        assert {r.producer_epoch for r in data} == {epoch}
        assert [r.value for r in data if not (r.value or b"").startswith(b"t1-")] == sent[p]
    assert read_committed(broker.bootstrap, topic) == sent


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[tuple[BrokerProcess, FaultProxy]]:
    proxy = FaultProxy(seed=3).start()
    broker = BrokerProcess(tmp_path / "data", {**TWO_PC, "advertised.listeners": proxy.address})
    try:
        broker.start()
        proxy.target_port = broker.port
        yield broker, proxy
        assert broker.stop() == 0, broker.log_tail()
    finally:
        broker.kill()
        proxy.stop()


def test_a_produce_whose_answer_was_lost_is_sent_again_and_written_once(
    proxied: tuple[BrokerProcess, FaultProxy],
) -> None:
    broker, proxy = proxied
    topic = create_topic(proxy.address, "participant-cut", PARTITIONS)
    proxy.set_faults(Faults(drop_produce_responses=frozenset({2, 5, 9})))
    with TwoPhaseProducer(proxy.address, "participant-cut", batch_size=4096) as producer:
        producer.init()
        producer.begin()
        for i in range(3000):
            producer.produce(topic, b"%05d" % i, partition=i % PARTITIONS)
        prepared = producer.prepare()
    stats = proxy.stats()
    assert stats.dropped_responses == 3
    assert stats.unanswered_appends and stats.retried_appends == stats.unanswered_appends
    for p in range(PARTITIONS):
        values = read_partition(broker.bootstrap, topic, p).values()
        assert values == [b"%05d" % i for i in range(p, 3000, PARTITIONS)]
    complete(prepared, True, bootstrap_servers=proxy.address)
    seen = read_committed(proxy.address, topic)
    assert seen == {p: [b"%05d" % i for i in range(p, 3000, PARTITIONS)] for p in seen}


def test_a_prepared_transaction_survives_kill_9_of_the_broker(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data", TWO_PC) as broker:
        topic = create_topic(broker.bootstrap, "participant-crash", PARTITIONS)
        prepared = prepare_in_child(broker.bootstrap, "participant-crash", topic, 500)
        stored = json.dumps({"prepared": prepared.to_json()})  # as a decider would keep it
        broker.restart(kill=True)
        assert_nothing_visible(broker.bootstrap, topic, 500)
        restored = PreparedTransaction.from_json(json.loads(stored)["prepared"])
        complete(restored, True, bootstrap_servers=broker.bootstrap)
        assert read_committed(broker.bootstrap, topic) == expected_by_partition(500)


@pytest.mark.broker_overrides(TWO_PC)
def test_a_topic_that_does_not_exist_yet_is_created_on_first_use(broker: BrokerProcess) -> None:
    """As Kafka's producers ask Metadata (allow.auto.create.topics), so that the per-batch
    Spark sink writes to a new topic as the per-task one does."""
    topic = f"participant-new-{time.monotonic_ns()}"
    with TwoPhaseProducer(broker.bootstrap, "participant-new-topic") as producer:
        producer.init()
        producer.begin()
        producer.produce(topic, b"first", key=b"k")
        complete(producer.prepare(), True, bootstrap_servers=broker.bootstrap)
    assert read_committed(broker.bootstrap, topic, partitions=1) == {0: [b"first"]}
