"""Onceflow's client reads and writes a member-less group's committed offset
(`onceflow.client.group_offsets`, the Spark sink's decision log): what it commits is what
librdkafka reads and the reverse, a commit is idempotent, an offset pending in an open
transaction is waited out rather than read stale, and an oversized metadata is refused
with Kafka's name."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from onceflow.client.errors import KafkaApiError
from onceflow.client.group_offsets import CommittedOffset, GroupOffsets
from onceflow.client.participant_link import Link
from onceflow.client.participant_state import ProducerSettings
from onceflow.errors import ErrorCode
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import QUIET_LOGGER, create_topic, stable_committed

TIMEOUT_S = 20.0


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with BrokerProcess(tmp_path_factory.mktemp("group-offsets") / "data", {}) as broker:
        yield broker.bootstrap


def offsets_of(bootstrap: str, group: str) -> GroupOffsets:
    return GroupOffsets(Link(bootstrap, ProducerSettings.of({})), group, TIMEOUT_S)


def test_a_commit_reads_back_here_and_in_librdkafka(bootstrap: str) -> None:
    topic = create_topic(bootstrap)
    offsets = offsets_of(bootstrap, "decisions-a")
    try:
        assert offsets.committed(topic, 0) is None
        offsets.commit(topic, 0, 8, '{"o":"q"}')
        offsets.commit(topic, 0, 8, '{"o":"q"}')  # the same value again: one commit
        assert offsets.committed(topic, 0) == CommittedOffset(8, '{"o":"q"}')
        assert stable_committed(bootstrap, "decisions-a", topic) == (8, '{"o":"q"}')
    finally:
        offsets.link.close()


def test_a_pending_transactional_offset_is_waited_out(bootstrap: str) -> None:
    """TxnOffsetCommit leaves the offset pending until the marker: the read (require_stable)
    waits for the commit and then returns the new offset, never the old one."""
    topic = create_topic(bootstrap)
    group = "decisions-pending"
    offsets = offsets_of(bootstrap, group)
    offsets.commit(topic, 0, 1, "old")
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": "pending-1", "logger": QUIET_LOGGER}
    )
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "logger": QUIET_LOGGER})
    producer.send_offsets_to_transaction(
        [TopicPartition(topic, 0, 5)], consumer.consumer_group_metadata(), TIMEOUT_S
    )
    consumer.close()
    got: list[CommittedOffset | None] = []
    reader = threading.Thread(target=lambda: got.append(offsets.committed(topic, 0)))
    reader.start()
    reader.join(1.0)
    assert reader.is_alive() and not got, "the read returned while the offset was pending"
    producer.commit_transaction(TIMEOUT_S)
    reader.join(TIMEOUT_S)
    (after,) = got
    assert after is not None and after.offset == 5
    offsets.link.close()


def test_metadata_over_the_brokers_limit_is_refused_by_name(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data", {"offset.metadata.max.bytes": "64"}) as broker:
        topic = create_topic(broker.bootstrap)
        offsets = offsets_of(broker.bootstrap, "decisions-big")
        try:
            with pytest.raises(KafkaApiError) as refused:
                offsets.commit(topic, 0, 3, "x" * 65)
            assert refused.value.code == ErrorCode.offset_metadata_too_large
            assert "OFFSET_METADATA_TOO_LARGE" in str(refused.value)
            offsets.commit(topic, 0, 3, "x" * 64)
            assert offsets.committed(topic, 0) == CommittedOffset(3, "x" * 64)
        finally:
            offsets.link.close()


def test_a_restarted_coordinator_is_found_again(tmp_path: Path) -> None:
    """The connection to the coordinator is lost with its broker: the next call connects
    again and reads what was committed before the restart."""
    with BrokerProcess(tmp_path / "data", {}) as broker:
        topic = create_topic(broker.bootstrap)
        offsets = offsets_of(broker.bootstrap, "decisions-restart")
        try:
            offsets.commit(topic, 0, 42, "before")
            broker.restart(kill=True)
            assert offsets.committed(topic, 0) == CommittedOffset(42, "before")
        finally:
            offsets.link.close()
