"""A follower's Fetch request packed by `protocol/follower_fetch.py` is byte for byte kio's
encoding of the same request, at every version it packs (by topic name before v13, by id
from v13, the replica in ReplicaState from v15), and a leader decodes it to what the
follower meant."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.static.constants import EntityType

from onceflow.client.wire import encode_request, encode_request_body
from onceflow.protocol import follower_fetch as ff
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import build, decode_request, payload_module, request_type

I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
NAMES = st.text(min_size=1, max_size=140)
IDS = st.uuids()

PARTITIONS = st.builds(ff.FetchPartition, I32, I32, I64, I64, I32)
TOPICS = st.builds(ff.FetchTopic, NAMES, IDS, st.lists(PARTITIONS, max_size=4).map(tuple))
FORGOTTEN = st.builds(ff.ForgottenTopic, NAMES, IDS, st.lists(I32, max_size=4).map(tuple))
FETCHES = st.builds(
    ff.FollowerFetch,
    replica_id=st.integers(0, 2**31 - 1),
    max_wait_ms=st.integers(0, 2**31 - 1),
    max_bytes=I32,
    session_id=I32,
    session_epoch=I32,
    topics=st.lists(TOPICS, max_size=4).map(tuple),
    forgotten=st.lists(FORGOTTEN, max_size=3).map(tuple),
)


def kio_request(version: int, fetch: ff.FollowerFetch) -> Any:
    module = payload_module(ApiKey.FETCH, version, EntityType.request)
    state = build(module.ReplicaState, replica_id=fetch.replica_id) if version >= 15 else None
    return build(
        request_type(ApiKey.FETCH, version),
        replica_id=fetch.replica_id,
        replica_state=state,
        max_wait=datetime.timedelta(milliseconds=fetch.max_wait_ms),
        min_bytes=1,
        max_bytes=fetch.max_bytes,
        isolation_level=0,
        session_id=fetch.session_id,
        session_epoch=fetch.session_epoch,
        topics=tuple(
            build(
                module.FetchTopic,
                topic=t.name,
                topic_id=t.topic_id,
                partitions=tuple(
                    build(
                        module.FetchPartition,
                        partition=p.index,
                        current_leader_epoch=p.leader_epoch,
                        fetch_offset=p.fetch_offset,
                        last_fetched_epoch=-1,
                        log_start_offset=p.log_start_offset,
                        partition_max_bytes=p.max_bytes,
                    )
                    for p in t.partitions
                ),
            )
            for t in fetch.topics
        ),
        forgotten_topics_data=tuple(
            build(module.ForgottenTopic, topic=t.name, topic_id=t.topic_id, partitions=t.partitions)
            for t in fetch.forgotten
        ),
        rack_id="",
    )


@settings(max_examples=300, deadline=None)
@given(version=st.integers(ff.LOWEST, ff.HIGHEST), fetch=FETCHES, correlation=I32)
def test_the_packed_request_is_kios_encoding(
    version: int, fetch: ff.FollowerFetch, correlation: int
) -> None:
    packed = encode_request_body(
        ApiKey.FETCH, version, correlation, "broker-2", ff.encode_body(version, fetch)
    )
    expected = encode_request(
        ApiKey.FETCH, version, correlation, "broker-2", kio_request(version, fetch)
    )
    assert packed == expected
    header, request = decode_request(packed[4:])
    assert (header.api_key, header.api_version, header.correlation_id) == (1, version, correlation)
    replica = request.replica_id if version < 15 else request.replica_state.replica_id
    assert request.max_wait == datetime.timedelta(milliseconds=fetch.max_wait_ms)
    assert replica == fetch.replica_id


def test_a_version_it_does_not_pack_is_refused() -> None:
    fetch = ff.FollowerFetch(1, 500, 1 << 20, 0, 0, (), ())
    for version in (ff.LOWEST - 1, ff.HIGHEST + 1):
        with pytest.raises(ValueError, match="packed at"):
            ff.encode_body(version, fetch)
