"""A request sent as pieces (`wire.encode_request_parts`: a Produce request's record
batches sent without a copy) is byte for byte the frame `encode_request` makes of the same
request with the batches in, at every Produce version the participant client speaks; and
the pieces reach a real socket whole, however the kernel splits the gathering send."""

from __future__ import annotations

import datetime
import socket
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onceflow.client.blocking import Connection
from onceflow.client.participant_sender import PRODUCE_VERSIONS
from onceflow.client.wire import encode_request, encode_request_parts, placeholder, request_entity
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import build, request_type

# Lengths around the one-, two- and three-byte compact lengths (127 and 16383 plus one).
BLOBS = st.lists(
    st.one_of(st.binary(max_size=300), st.integers(16380, 16390).map(lambda n: b"\x5a" * n)),
    min_size=1,
    max_size=4,
)


def produce_request(version: int, records: list[bytes], topics: int) -> object:
    """One partition per batch, spread over `topics` topics."""
    by_topic: dict[str, list[object]] = {}
    for i, data in enumerate(records):
        entity = request_entity(
            ApiKey.PRODUCE, version, "PartitionProduceData", index=i, records=data
        )
        by_topic.setdefault(f"topic-{i % topics}", []).append(entity)
    return build(
        request_type(ApiKey.PRODUCE, version),
        transactional_id="txn-1",
        acks=-1,
        timeout=datetime.timedelta(seconds=30),
        topic_data=tuple(
            request_entity(
                ApiKey.PRODUCE, version, "TopicProduceData", name=n, partition_data=tuple(p)
            )
            for n, p in by_topic.items()
        ),
    )


@given(
    blobs=BLOBS,
    version=st.integers(*PRODUCE_VERSIONS),
    topics=st.integers(1, 3),
    correlation=st.integers(0, 1 << 31 - 1),
)
def test_the_pieces_are_the_whole_frame(
    blobs: list[bytes], version: int, topics: int, correlation: int
) -> None:
    marked = produce_request(version, [placeholder(i) for i in range(len(blobs))], topics)
    whole = produce_request(version, blobs, topics)
    views = [memoryview(b) for b in blobs]
    parts = encode_request_parts(ApiKey.PRODUCE, version, correlation, "c", marked, views)
    assert b"".join(parts) == encode_request(ApiKey.PRODUCE, version, correlation, "c", whole)


def test_a_request_without_its_placeholder_is_refused() -> None:
    request = produce_request(9, [b"records"], 1)
    with pytest.raises(ValueError, match="exactly one placeholder"):
        encode_request_parts(ApiKey.PRODUCE, 9, 1, "c", request, [b"x"])


@settings(max_examples=20, deadline=None)
@given(sizes=st.lists(st.integers(0, 3_000_000), min_size=1, max_size=5))
def test_gathered_pieces_arrive_whole_over_a_socket(sizes: list[int]) -> None:
    """Megabytes each: the kernel takes them in several sends, cut anywhere."""
    parts = [bytes([i % 251]) * n for i, n in enumerate(sizes)]
    left, right = socket.socketpair()
    left.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)
    got = bytearray()

    def drain() -> None:
        while len(got) < sum(sizes):
            got.extend(right.recv(1 << 20))

    reader = threading.Thread(target=drain)
    reader.start()
    connection = object.__new__(Connection)
    connection._sock = left
    connection._send_parts(parts)
    reader.join(30)
    left.close()
    right.close()
    assert bytes(got) == b"".join(parts)
