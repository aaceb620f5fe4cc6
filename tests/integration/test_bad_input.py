"""Malformed and hostile input on raw sockets: the broker closes or answers, never dies.

After every case a normal client must still be served, and the broker process must be
alive. Requests are built with kio and onceflow's own record batch builder.
"""

from __future__ import annotations

import datetime
import random
import socket
import struct
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import TopicPartition
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.fetch.v11 import request as fetch_v11
from kio.schema.metadata.v8.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import BrokerId, TopicName
from kio.serial import entity_reader
from kio.static.primitive import i8, i32, i64

from onceflow.protocol import codec
from onceflow.records.builder import build_batch
from onceflow.records.record import decode_records
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import (
    consume_until,
    consumer,
    create_topic,
    produce_and_confirm,
    producer,
)
from tests.helpers.wire import RawConnection, encode_entity, produce_request, request_frame

CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
UNSUPPORTED_VERSION = 35
INVALID_RECORD = 87
DEFAULT_MAX_REQUEST_BYTES = 104_857_600  # socket.request.max.bytes


def assert_serves(b: BrokerProcess) -> None:
    """The broker is alive and a real client can produce and read back a record."""
    assert b.running, f"broker died; its log:\n{b.log_tail()}"
    topic = create_topic(b.bootstrap, partitions=1)
    d = produce_and_confirm(producer(b.bootstrap, acks="all"), topic, [(0, b"k", b"alive", None)])
    assert not d.errors and d.ok[0][:2] == (0, 0)
    c = consumer(b.bootstrap)
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got = consume_until(c, lambda g: len(g) >= 1)
        assert got[0].value() == b"alive"
    finally:
        c.close()


@pytest.fixture
def b(shared_broker: BrokerProcess) -> Iterator[BrokerProcess]:
    """The module's broker, checked after each case."""
    yield shared_broker
    assert_serves(shared_broker)


def _frame(
    api_key: int, version: int, body: bytes, correlation: int = 7, flexible: bool = False
) -> bytes:
    return request_frame(api_key, version, correlation, body, flexible=flexible)


# ---- framing ------------------------------------------------------------------------------


def test_negative_frame_size_closes_connection(b: BrokerProcess) -> None:
    with RawConnection(b.bootstrap) as conn:
        conn.send_bytes(b"\xff\xff\xff\xff" + b"\x00" * 20)
        assert conn.closed_by_peer()


def test_random_bytes(b: BrokerProcess) -> None:
    rng = random.Random(20240611)
    closed = 0
    for _ in range(25):
        with RawConnection(b.bootstrap) as conn:
            data = rng.randbytes(rng.randint(1, 6000))
            try:
                conn.send_bytes(data)
            except (BrokenPipeError, ConnectionResetError):
                closed += 1
                continue
            # Either closed (bad size, bad header) or waiting for the rest of a frame.
            if conn.closed_by_peer(timeout=0.5):
                closed += 1
        assert b.running, f"broker died on random input; its log:\n{b.log_tail()}"
    assert closed > 0  # most random size prefixes are negative or too large


def test_random_payload_in_a_valid_frame(b: BrokerProcess) -> None:
    """Well-framed garbage: a random header is an unknown API/version, or undecodable."""
    rng = random.Random(7)
    for _ in range(25):
        payload = rng.randbytes(rng.randint(8, 300))
        with RawConnection(b.bootstrap) as conn:
            conn.send_bytes(struct.pack(">i", len(payload)) + payload)
            assert conn.closed_by_peer(), f"broker answered garbage {payload[:16].hex()}"


def test_truncated_frame_then_close(b: BrokerProcess) -> None:
    with RawConnection(b.bootstrap) as conn:
        full = _frame(
            18,
            3,
            encode_entity(
                ApiVersionsRequest(client_software_name="x", client_software_version="1")
            ),
            flexible=True,
        )
        conn.send_bytes(full[: len(full) // 2])
    # A size prefix cut short as well.
    with RawConnection(b.bootstrap) as conn:
        conn.send_bytes(b"\x00\x00")


def test_complete_frame_with_truncated_body_closes(b: BrokerProcess) -> None:
    body = encode_entity(
        MetadataRequest(
            topics=(MetadataRequestTopic(name=TopicName("some-topic")),),
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
    )
    with RawConnection(b.bootstrap) as conn:
        conn.send_bytes(_frame(3, 8, body[:-5]))
        assert conn.closed_by_peer()
    # Bytes after a complete body are ignored, as Kafka ignores them (librdkafka's
    # all-topics Metadata v9+ leaves three behind): the request is answered.
    with RawConnection(b.bootstrap) as conn:
        conn.send_bytes(_frame(3, 8, body + b"\x00\x01\x02"))
        response = conn.read_response(3, 8, 7)
        assert [t.name for t in response.topics] == ["some-topic"]


def test_oversized_frame_closes_connection(b: BrokerProcess) -> None:
    with RawConnection(b.bootstrap) as conn:
        # Only the size is sent: the broker must not wait for (or buffer) 100 MB.
        conn.send_bytes(struct.pack(">i", DEFAULT_MAX_REQUEST_BYTES + 1) + b"\x00\x12\x00\x00")
        assert conn.closed_by_peer()
    with RawConnection(b.bootstrap) as conn:
        conn.send_bytes(struct.pack(">i", 2**31 - 1))
        assert conn.closed_by_peer()


# ---- API keys and versions ----------------------------------------------------------------


@pytest.mark.parametrize("api_key", [999, 57, -1, 4])  # 4 is LeaderAndIsr: not a client API
def test_unknown_api_key_closes_connection(b: BrokerProcess, api_key: int) -> None:
    with RawConnection(b.bootstrap) as conn:
        conn.send_bytes(_frame(api_key, 0, b""))
        assert conn.closed_by_peer()


@pytest.mark.parametrize(
    ("api_key", "version"), [(3, 99), (0, 2), (1, 3), (0, 9), (32, 0), (-2, 1)]
)
def test_unsupported_version_of_known_api_closes_connection(
    b: BrokerProcess, api_key: int, version: int
) -> None:
    with RawConnection(b.bootstrap) as conn:
        conn.send_bytes(_frame(api_key, version, b"\x00" * 16))
        assert conn.closed_by_peer()


def test_api_versions_at_unknown_version_answers_v0_with_error_35(b: BrokerProcess) -> None:
    with RawConnection(b.bootstrap) as conn:
        conn.send_bytes(
            _frame(18, 99, b"\x01\x02\x03 whatever a future client sends", correlation=4242)
        )
        frame = conn.recv_frame()
        (correlation,) = struct.unpack_from(">i", frame, 0)
        assert correlation == 4242
        body, size = entity_reader(ApiVersionsResponseV0)(frame, 4)  # response header v0
        assert 4 + size == len(frame)
        assert body.error_code.value == UNSUPPORTED_VERSION
        versions = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in body.api_keys}
        # KIP-511, as Kafka: only ApiVersions' own range, for the client to retry within.
        assert list(versions) == [18] and versions[18][0] == 0 and versions[18][1] >= 3

        # The connection stays usable: the client retries at a version both speak.
        resp = conn.call(
            ApiVersionsRequest(client_software_name="raw", client_software_version="1")
        )
        assert resp.error_code.value == 0
        listed = {int(k.api_key) for k in resp.api_keys}
        assert {0, 1, 3, 18} <= listed


def test_pipelined_requests_are_answered_in_order(b: BrokerProcess) -> None:
    """Many requests sent before reading any response: all answered, in order."""
    request = ApiVersionsRequest(client_software_name="raw", client_software_version="1")
    body = encode_entity(request)
    n = 200
    with RawConnection(b.bootstrap) as conn:
        conn.send_bytes(
            b"".join(_frame(18, 3, body, correlation=i, flexible=True) for i in range(n))
        )
        for i in range(n):
            frame = conn.recv_frame()
            assert struct.unpack_from(">i", frame, 0)[0] == i


# ---- produce with bad batches -------------------------------------------------------------


def _batch(value: bytes, *, control: bool = False) -> bytes:
    return build_batch(
        [(b"key", value, [("h", b"1")])], timestamp_ms=int(time.time() * 1000), control=control
    )


def _errors(resp) -> dict[int, tuple[int, int]]:  # type: ignore[no-untyped-def]
    (topic,) = resp.responses
    return {
        int(p.index): (p.error_code.value, int(p.base_offset)) for p in topic.partition_responses
    }


def _fetch_all(conn: RawConnection, topic: str, partitions: int) -> dict[int, tuple[int, bytes]]:
    """(high watermark, record bytes) per partition, read with a raw Fetch v11."""
    req = fetch_v11.FetchRequest(
        replica_id=BrokerId(-1),
        max_wait=datetime.timedelta(milliseconds=0),
        min_bytes=i32(0),
        max_bytes=i32(10_000_000),
        isolation_level=i8(0),
        session_id=i32(0),
        session_epoch=i32(-1),
        topics=(
            fetch_v11.FetchTopic(
                topic=TopicName(topic),
                partitions=tuple(
                    fetch_v11.FetchPartition(
                        partition=i32(p),
                        current_leader_epoch=i32(-1),
                        fetch_offset=i64(0),
                        log_start_offset=i64(-1),
                        partition_max_bytes=i32(1_000_000),
                    )
                    for p in range(partitions)
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )
    resp = conn.call(req)
    out = {}
    for p in resp.responses[0].partitions:
        assert p.error_code.value == 0
        out[int(p.partition_index)] = (int(p.high_watermark), bytes(p.records or b""))
    return out


def test_corrupt_crc_fails_only_its_partition(b: BrokerProcess) -> None:
    topic = create_topic(b.bootstrap, partitions=3)
    good = _batch(b"good value")
    bad = bytearray(_batch(b"bad value"))
    bad[-3] ^= 0x01  # a flipped bit in the record bytes, covered by the CRC
    with RawConnection(b.bootstrap) as conn:
        resp = conn.call(produce_request(topic, {0: bytes(bad), 1: good, 7: good}))
        errors = _errors(resp)
        assert errors[0] == (CORRUPT_MESSAGE, -1)
        assert errors[1] == (0, 0)
        assert errors[7][0] == UNKNOWN_TOPIC_OR_PARTITION

        fetched = _fetch_all(conn, topic, 3)
        assert fetched[0] == (0, b"")  # nothing of the corrupt batch was stored
        hw1, records = fetched[1]
        assert hw1 == 1
        [rec] = decode_records(records)
        assert (rec.key, rec.value) == (b"key", b"good value")

        # The corrupt partition still takes a good batch, at offset 0.
        assert _errors(conn.call(produce_request(topic, {0: good}))) == {0: (0, 0)}

    # A real client reads exactly the good records.
    c = consumer(b.bootstrap)
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(3)])
        got = consume_until(c, lambda g: len(g) >= 2)
        assert sorted((m.partition(), m.offset(), m.value()) for m in got) == [
            (0, 0, b"good value"),
            (1, 0, b"good value"),
        ]
    finally:
        c.close()


def test_corrupt_batch_variants_are_rejected(b: BrokerProcess) -> None:
    topic = create_topic(b.bootstrap, partitions=1)
    good = _batch(b"v")
    header_flip = bytearray(good)
    header_flip[23] ^= 0x10  # attributes byte: covered by the CRC
    truncated = good[:-4]
    length_too_big = bytearray(good)
    length_too_big[8:12] = struct.pack(">i", len(good) + 100)
    control = _batch(b"\x00\x00\x00\x01", control=True)
    with RawConnection(b.bootstrap) as conn:
        for data, codes in [
            (bytes(header_flip), {CORRUPT_MESSAGE}),
            (truncated, {CORRUPT_MESSAGE}),
            (bytes(length_too_big), {CORRUPT_MESSAGE}),
            (control, {INVALID_RECORD}),
            (good + bytes(bytearray(good)[:30]), {CORRUPT_MESSAGE}),  # trailing partial batch
        ]:
            (code, offset) = _errors(conn.call(produce_request(topic, {0: data})))[0]
            assert code in codes and offset == -1, (code, data[:32].hex())
        assert _fetch_all(conn, topic, 1)[0] == (0, b"")


def test_corrupt_batch_with_acks_0_gets_no_response_and_stores_nothing(b: BrokerProcess) -> None:
    topic = create_topic(b.bootstrap, partitions=1)
    bad = bytearray(_batch(b"x"))
    bad[-1] ^= 0xFF
    with RawConnection(b.bootstrap) as conn:
        conn.send_request(produce_request(topic, {0: bytes(bad)}, acks=0))
        # The next request's answer is the first thing on the wire.
        resp = conn.call(
            ApiVersionsRequest(client_software_name="raw", client_software_version="1")
        )
        assert resp.error_code.value == 0
        assert _fetch_all(conn, topic, 1)[0] == (0, b"")


def test_client_vanishing_during_a_waiting_fetch(b: BrokerProcess) -> None:
    """A fetch parked in purgatory whose connection closes must not break later appends."""
    topic = create_topic(b.bootstrap, partitions=1)
    req = fetch_v11.FetchRequest(
        replica_id=BrokerId(-1),
        max_wait=datetime.timedelta(seconds=5),
        min_bytes=i32(1),
        max_bytes=i32(1_000_000),
        isolation_level=i8(0),
        session_id=i32(0),
        session_epoch=i32(-1),
        topics=(
            fetch_v11.FetchTopic(
                topic=TopicName(topic),
                partitions=(
                    fetch_v11.FetchPartition(
                        partition=i32(0),
                        current_leader_epoch=i32(-1),
                        fetch_offset=i64(0),
                        log_start_offset=i64(-1),
                        partition_max_bytes=i32(1_000_000),
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )
    for _ in range(5):
        conn = RawConnection(b.bootstrap)
        conn.send_request(req)
        time.sleep(0.05)
        conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()  # RST while the fetch waits
    with RawConnection(b.bootstrap) as conn:
        assert _errors(conn.call(produce_request(topic, {0: _batch(b"after")}))) == {0: (0, 0)}


def test_codec_round_trip_of_our_own_produce_request() -> None:
    """The request bytes these tests send decode with the broker's own codec (sanity)."""
    req = produce_request("t", {0: _batch(b"v")})
    frame = request_frame(0, 8, 1, encode_entity(req), flexible=False)
    header, decoded = codec.decode_request(frame[4:])
    assert (header.api_key, header.api_version, header.correlation_id) == (0, 8, 1)
    assert decoded == req


def test_null_client_id_is_accepted(b: BrokerProcess) -> None:
    """Request header v1 allows a null client id (length -1)."""
    body = encode_entity(
        MetadataRequest(
            topics=(),
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
    )
    payload = struct.pack(">hhih", 3, 8, 99, -1) + body
    with RawConnection(b.bootstrap) as conn:
        conn.send_bytes(struct.pack(">i", len(payload)) + payload)
        resp = conn.read_response(3, 8, 99)
        assert [int(x.node_id) for x in resp.brokers] == [0]
        assert resp.topics == ()


def test_metadata_with_an_illegal_topic_name_answers_per_topic(b: BrokerProcess) -> None:
    good = create_topic(b.bootstrap, partitions=2)
    with RawConnection(b.bootstrap) as conn:
        resp = conn.call(
            MetadataRequest(
                topics=(
                    MetadataRequestTopic(name=TopicName("no/slashes allowed")),
                    MetadataRequestTopic(name=TopicName(good)),
                ),
                allow_auto_topic_creation=True,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )
        )
    by_name = {t.name: t for t in resp.topics}
    assert by_name["no/slashes allowed"].error_code.value == 17  # INVALID_TOPIC_EXCEPTION
    assert by_name[good].error_code.value == 0
    assert len(by_name[good].partitions) == 2


def test_many_connections_at_once(b: BrokerProcess) -> None:
    request = ApiVersionsRequest(client_software_name="raw", client_software_version="1")
    conns = [RawConnection(b.bootstrap) for _ in range(200)]
    try:
        for conn in conns:
            conn.send_request(request)
        for conn in conns:
            assert conn.read_response(18, 3, 1).error_code.value == 0
    finally:
        for conn in conns:
            conn.close()
