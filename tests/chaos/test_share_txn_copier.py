"""Exactly-once processing from a work queue: a copier from a share group to a topic whose
acknowledgements are part of its transactions (Onceflow's TxnShareAcknowledge), killed
with SIGKILL at every step of a transaction, with aborts on purpose in between. The output,
read committed, is exactly the input: nothing lost, nothing twice."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer

from tests.helpers.broker import BrokerProcess, die_with_parent
from tests.helpers.share import REPO_ROOT, SHORT_LOCKS, create_topic, produce, set_group_configs
from tests.helpers.share_copier import STEPS


def _copier(broker: BrokerProcess, group: str, src: str, dst: str) -> list[str]:
    return [sys.executable, "-m", "tests.helpers.share_copier", broker.bootstrap, group, src, dst]


def _run_copier(broker: BrokerProcess, group: str, src: str, dst: str, at: str, n: int) -> str:
    proc = subprocess.run(
        [*_copier(broker, group, src, dst), at, str(n)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=die_with_parent,
    )
    assert proc.returncode == -9, f"the copier did not die at {at}: {proc.stderr[-2000:]}"
    return proc.stdout


def _read_committed(bootstrap: str, topic: str, n: int, timeout: float = 90.0) -> list[bytes]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([topic])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout
    quiet_until = None
    while time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            out.append(m.value())
            quiet_until = None
        elif len(out) >= n:
            quiet_until = quiet_until or time.monotonic() + 3.0  # anything extra shows now
            if time.monotonic() >= quiet_until:
                break
    c.close()
    return out


@pytest.mark.broker_overrides(SHORT_LOCKS)
def test_a_copier_killed_at_every_step_copies_exactly_once(broker: BrokerProcess) -> None:
    src, dst, group = "jobs", "results", "copier"
    create_topic(broker.bootstrap, src)
    create_topic(broker.bootstrap, dst)
    set_group_configs(
        broker.bootstrap,
        group,
        {"share.auto.offset.reset": "earliest", "share.delivery.count.limit": "10"},
    )
    n = 120
    produce(broker.bootstrap, src, (f"job-{i}".encode() for i in range(n)))
    for at in STEPS:
        out = _run_copier(broker, group, src, dst, at, 2)
        assert f"KILLED {at}" in out
    # A last copier, never killed, finishes the queue while the output is read.
    finisher = subprocess.Popen(
        [*_copier(broker, group, src, dst), "none", "0"],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=die_with_parent,
    )
    result: list[bytes] = []
    reader = threading.Thread(
        target=lambda: result.extend(_read_committed(broker.bootstrap, dst, n))
    )
    reader.start()
    reader.join(120)
    finisher.kill()
    finisher.wait(10)
    assert sorted(result) == sorted(f"job-{i}".encode() for i in range(n)), (
        f"{len(result)} records, {len(set(result))} distinct"
    )


@pytest.mark.broker_overrides(SHORT_LOCKS)
def test_a_broker_kill_with_a_transactional_acknowledgement_open(broker: BrokerProcess) -> None:
    """kill -9 of the broker while a transaction holds acknowledgements: after the restart
    the records stay held (recovered from __share_group_state) until the producer's
    successor aborts that transaction; then they are delivered again, and the committed
    ones never are."""
    from onceflow.client.errors import ClientError
    from onceflow.client.participant import TwoPhaseProducer
    from onceflow.client.share import TransactionalShareConsumer

    src, dst, group = "jobs", "results", "g"
    create_topic(broker.bootstrap, src)
    create_topic(broker.bootstrap, dst)
    set_group_configs(broker.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    produce(broker.bootstrap, src, (f"job-{i}".encode() for i in range(20)))
    consumer = TransactionalShareConsumer(broker.bootstrap, group, [src])
    producer = TwoPhaseProducer(broker.bootstrap, "copier", two_phase=False)
    producer.init()
    first = consumer.poll(10.0, max_records=10)
    producer.begin()
    for r in first:
        producer.produce(dst, r.value)
    producer.flush()
    consumer.acknowledge_in_transaction(producer, first)
    producer.commit()
    held = consumer.poll(10.0, max_records=10)
    producer.begin()
    for r in held:
        producer.produce(dst, r.value)
    producer.flush()
    consumer.acknowledge_in_transaction(producer, held)  # open when the broker dies
    broker.restart(kill=True)
    with contextlib.suppress(ClientError):  # their connections died with the broker
        consumer.close()
    with contextlib.suppress(ClientError):
        producer.close()
    other = TransactionalShareConsumer(broker.bootstrap, group, [src])
    time.sleep(3)  # longer than the lock: the open transaction, not the lock, holds them
    assert other.poll(2.0) == []
    successor = TwoPhaseProducer(broker.bootstrap, "copier", two_phase=False)
    successor.init()  # aborts the open transaction: its records come back
    again = other.poll(20.0, max_records=20)
    assert sorted(r.value for r in again) == sorted(r.value for r in held)
    assert all(r.delivery_count == 2 for r in again)
    successor.begin()
    for r in again:
        successor.produce(dst, r.value)
    successor.flush()
    other.acknowledge_in_transaction(successor, again)
    successor.commit()
    assert other.poll(3.0) == []
    other.close()
    successor.close()
    out = _read_committed(broker.bootstrap, dst, 20)
    assert sorted(out) == sorted(f"job-{i}".encode() for i in range(20))
