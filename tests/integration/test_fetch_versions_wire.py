"""Fetch at every served version over the wire, decoded with kio's schema of that version:
the pre-encoded response (record bytes spliced in from the segment file) must be exactly
what kio reads, flexible encoding (v12+: compact counts, tag buffers) included.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from kio.index import load_payload_module
from kio.static.constants import EntityType

from onceflow.protocol.api_versions import SUPPORTED_VERSIONS, ApiKey
from onceflow.protocol.codec import build
from onceflow.records.builder import build_batch
from tests.helpers.broker import BrokerProcess
from tests.helpers.wire import RawConnection, fetch_request, produce_request

lo, hi = SUPPORTED_VERSIONS[ApiKey.FETCH]
VERSIONS = range(lo, hi + 1)


def _entity(version: int, name: str, /, **fields: Any) -> Any:
    module = load_payload_module(ApiKey.FETCH, version, EntityType.request)
    return build(getattr(module, name), **fields)


def create_or_describe(conn: RawConnection, topic: str) -> uuid.UUID:
    """Create the topic (auto-creation by Metadata v10) and return its id."""
    meta = load_payload_module(ApiKey.METADATA, 10, EntityType.request)
    req = meta.MetadataRequest(
        topics=(meta.MetadataRequestTopic(topic_id=None, name=topic),),
        allow_auto_topic_creation=True,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    for _ in range(50):
        (answer,) = conn.call(req).topics
        if answer.error_code == 0:
            return uuid.UUID(str(answer.topic_id))
        time.sleep(0.1)
    raise AssertionError(f"{topic} was not created: {answer.error_code}")


def _produce(conn: RawConnection, topic: str, parts: dict[int, bytes]) -> None:
    resp = conn.call(produce_request(topic, parts))
    assert all(p.error_code == 0 for t in resp.responses for p in t.partition_responses)


def _batch(value: bytes) -> bytes:
    return build_batch([(b"k", value, [])], timestamp_ms=int(time.time() * 1000))


@pytest.mark.parametrize("version", VERSIONS)
def test_fetch_records_at_every_version(shared_broker: BrokerProcess, version: int) -> None:
    topic = f"wire-fetch-{version}"
    first, second = _batch(b"one" * 50), _batch(b"two")
    with RawConnection(shared_broker.bootstrap) as conn:
        topic_id = create_or_describe(conn, topic)
        _produce(conn, topic, {0: first})
        _produce(conn, topic, {0: second})
        # Partition 0 with two batches and an unknown one in one answer, then the log's end.
        resp = conn.call(
            fetch_request(
                topic,
                {0: (0, -1), 99: (0, -1)},
                version=version,
                topic_id=topic_id,
                isolation_level=1,
            )
        )
        at_end = conn.call(
            fetch_request(
                topic, {0: (2, -1)}, version=version, topic_id=topic_id, isolation_level=1
            )
        )
    (end,) = at_end.responses[0].partitions
    (answer,) = resp.responses
    if version >= 13:
        assert answer.topic_id == topic_id
    else:
        assert answer.topic == topic
    by_partition = {p.partition_index: p for p in answer.partitions}
    full, unknown = by_partition[0], by_partition[99]
    assert (full.error_code, full.high_watermark, full.last_stable_offset) == (0, 2, 2)
    assert full.aborted_transactions == ()  # read_committed, none aborted
    # Offsets are rewritten by the broker: compare past the base offset.
    assert len(full.records) == len(first) + len(second)
    assert full.records[8:12] == first[8:12]  # batch length
    assert b"one" * 50 in full.records[: len(first)]
    assert b"two" in full.records[len(first) :]
    assert (end.error_code, end.high_watermark, len(end.records or b"")) == (0, 2, 0)
    assert unknown.error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
    if version >= 12:
        assert full.diverging_epoch.epoch == -1  # none: the default, not sent


def test_fetch_v12_diverging_epoch(shared_broker: BrokerProcess) -> None:
    """KIP-595: a fetcher whose last fetched epoch ends before its fetch offset here learns
    where (epoch, end offset) and gets no records; an epoch the log never had is out of range."""
    topic = "wire-fetch-diverging"
    with RawConnection(shared_broker.bootstrap) as conn:
        create_or_describe(conn, topic)
        _produce(conn, topic, {0: _batch(b"a")})
        _produce(conn, topic, {0: _batch(b"b")})
        (diverged,) = (
            conn.call(fetch_request(topic, {0: (5, 0)}, version=12, isolation_level=1))
            .responses[0]
            .partitions
        )
        (same,) = (
            conn.call(fetch_request(topic, {0: (1, 0)}, version=12, isolation_level=1))
            .responses[0]
            .partitions
        )
        (unknown,) = (
            conn.call(fetch_request(topic, {0: (0, 7)}, version=12, isolation_level=1))
            .responses[0]
            .partitions
        )
    assert diverged.error_code == 0
    assert (diverged.diverging_epoch.epoch, diverged.diverging_epoch.end_offset) == (0, 2)
    assert len(diverged.records or b"") == 0
    assert diverged.high_watermark == 2
    assert same.error_code == 0 and same.diverging_epoch.epoch == -1 and len(same.records) > 0
    assert unknown.error_code == 1  # OFFSET_OUT_OF_RANGE


@pytest.mark.parametrize("version", [v for v in VERSIONS if v >= 13])
def test_fetch_unknown_topic_id(shared_broker: BrokerProcess, version: int) -> None:
    """v13+ names topics by id: an id no topic has is UNKNOWN_TOPIC_ID, echoed back."""
    unknown = uuid.uuid4()
    with RawConnection(shared_broker.bootstrap) as conn:
        resp = conn.call(
            fetch_request(
                "", {0: (0, -1), 1: (0, -1)}, version=version, topic_id=unknown, isolation_level=1
            )
        )
    (answer,) = resp.responses
    assert answer.topic_id == unknown
    assert [(p.partition_index, p.error_code) for p in answer.partitions] == [(0, 100), (1, 100)]
