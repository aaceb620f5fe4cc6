"""The participant client as an ordinary transactional producer (`two_phase=False`), as the
Spark sink's per-task atomicity uses it: offsets sent in a transaction
(`send_offsets`, Kafka's sendOffsetsToTransaction) become the group's committed offsets
when it commits, together with its records, and never when it aborts, even when the
transaction holds nothing else; librdkafka reads the same offsets."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from onceflow.client.errors import KafkaApiError
from onceflow.client.group_offsets import CommittedOffset
from onceflow.client.participant import TransactionStateError, TwoPhaseProducer
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import create_topic, stable_committed
from tests.helpers.txn import end_offsets, read_records, wait_stable

TIMEOUT_S = 20.0


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    # No two-phase commit: what an ordinary producer needs is what every broker has.
    with BrokerProcess(tmp_path_factory.mktemp("ordinary") / "data", {}) as broker:
        yield broker.bootstrap


def committed_values(bootstrap: str, topic: str) -> list[bytes | None]:
    wait_stable(bootstrap, topic, [0])
    lso = end_offsets(bootstrap, topic, [0], committed=True)
    if not lso[0]:
        return []
    return [r.value for r in read_records("confluent", bootstrap, topic, lso, committed=True)]


def test_offsets_commit_with_the_transaction_and_never_with_an_abort(bootstrap: str) -> None:
    topic = create_topic(bootstrap)
    ledger = create_topic(bootstrap)
    group = "ordinary-offsets"
    with TwoPhaseProducer(bootstrap, "ordinary-1", two_phase=False) as producer:
        producer.init()
        assert producer.group_offsets(group).committed(ledger, 0) is None
        producer.begin()
        producer.produce(topic, b"kept", partition=0)
        producer.send_offsets(group, {(ledger, 0): (5, "first")})
        with pytest.raises(TransactionStateError):  # its connections are the sender's now
            producer.group_offsets(group)
        producer.commit()
        assert producer.group_offsets(group).committed(ledger, 0) == CommittedOffset(5, "first")

        # Offsets alone, aborted: the abort must still end the transaction on the broker,
        # else the pending offset would hold every stable read of the group until timeout.
        producer.begin()
        producer.send_offsets(group, {(ledger, 0): (9, "aborted")})
        producer.abort()
        assert producer.group_offsets(group).committed(ledger, 0) == CommittedOffset(5, "first")

        producer.begin()
        producer.produce(topic, b"dropped", partition=0)
        producer.send_offsets(group, {(ledger, 0): (7, "dropped")})
        producer.abort()

        producer.begin()
        producer.produce(topic, b"second", partition=0)
        producer.send_offsets(group, {(ledger, 0): (8, "second")})
        producer.commit()
    assert stable_committed(bootstrap, group, ledger) == (8, "second")
    assert committed_values(bootstrap, topic) == [b"kept", b"second"]


def test_a_new_instance_aborts_offsets_a_fenced_one_left_pending(bootstrap: str) -> None:
    ledger = create_topic(bootstrap)
    group = "ordinary-fenced"
    zombie = TwoPhaseProducer(bootstrap, "ordinary-2", two_phase=False)
    successor = TwoPhaseProducer(bootstrap, "ordinary-2", two_phase=False)
    try:
        zombie.init()
        zombie.begin()
        zombie.send_offsets(group, {(ledger, 0): (3, "zombie")})
        successor.init()  # fences the zombie, aborts its open transaction
        assert successor.group_offsets(group).committed(ledger, 0) is None
        with pytest.raises(KafkaApiError, match=r"PRODUCER_FENCED|INVALID_PRODUCER_EPOCH"):
            zombie.commit()
    finally:
        zombie.close()
        successor.close()
