"""Produce at every served version over the wire, request and answer with kio's schema of
that version (v9+ flexible), the records read back by a Fetch."""

from __future__ import annotations

import datetime
import time
import uuid
from typing import Any

import pytest
from kio.index import load_payload_module
from kio.static.constants import EntityType

from onceflow.protocol.api_versions import SUPPORTED_VERSIONS, ApiKey
from onceflow.protocol.codec import build, request_type
from onceflow.records.builder import build_batch
from tests.helpers.broker import BrokerProcess
from tests.helpers.wire import RawConnection, fetch_request
from tests.integration.test_fetch_versions_wire import create_or_describe

lo, hi = SUPPORTED_VERSIONS[ApiKey.PRODUCE]


def produce_request(
    version: int,
    topic: str,
    parts: dict[int, bytes],
    acks: int = -1,
    topic_id: uuid.UUID | None = None,
) -> Any:
    """The topic by name, or by `topic_id` from v13."""
    module = load_payload_module(ApiKey.PRODUCE, version, EntityType.request)
    data = tuple(
        build(module.PartitionProduceData, index=p, records=records) for p, records in parts.items()
    )
    return build(
        request_type(ApiKey.PRODUCE, version),
        transactional_id=None,
        acks=acks,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(
            build(module.TopicProduceData, name=topic, topic_id=topic_id, partition_data=data),
        ),
    )


@pytest.mark.parametrize("version", range(lo, hi + 1))
def test_produce_at_every_version(shared_broker: BrokerProcess, version: int) -> None:
    topic = f"wire-produce-{version}"
    batch = build_batch([(b"k", b"value", [])], timestamp_ms=int(time.time() * 1000))
    with RawConnection(shared_broker.bootstrap) as conn:
        topic_id = create_or_describe(conn, topic)
        first = conn.call(produce_request(version, topic, {0: batch, 7: batch}, topic_id=topic_id))
        second = conn.call(produce_request(version, topic, {0: batch}, topic_id=topic_id))
        fetched = conn.call(fetch_request(topic, version=12, topic_id=topic_id, isolation_level=1))
    (answer,) = first.responses
    if version >= 13:
        assert answer.topic_id == topic_id
    else:
        assert answer.name == topic
    by_partition = {p.index: p for p in answer.partition_responses}
    assert (by_partition[0].error_code, by_partition[0].base_offset) == (0, 0)
    assert by_partition[7].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
    if version >= 10:
        assert by_partition[7].current_leader.leader_id == -1  # only for NOT_LEADER
        assert first.node_endpoints == ()
    (again,) = second.responses[0].partition_responses
    assert (again.error_code, again.base_offset) == (0, 1)
    (records,) = fetched.responses[0].partitions
    assert records.high_watermark == 2 and records.records.count(b"value") == 2


def test_produce_v13_to_an_unknown_topic_id_is_refused_and_creates_nothing(
    shared_broker: BrokerProcess,
) -> None:
    """Kafka's answer: UNKNOWN_TOPIC_ID for each partition; an id is never auto-created."""
    batch = build_batch([(b"k", b"value", [])], timestamp_ms=int(time.time() * 1000))
    unknown = uuid.uuid4()
    with RawConnection(shared_broker.bootstrap) as conn:
        answer = conn.call(produce_request(13, "", {0: batch, 1: batch}, topic_id=unknown))
        (topic,) = answer.responses
        assert topic.topic_id == unknown
        assert {p.index: p.error_code for p in topic.partition_responses} == {0: 100, 1: 100}
        # The same id still names no topic: nothing was created.
        again = conn.call(produce_request(13, "", {0: batch}, topic_id=unknown))
        assert again.responses[0].partition_responses[0].error_code == 100
