"""The client's sans-IO core without a network: frames out, frames in, correlation ids,
the response size bound, version negotiation and the re-authentication deadline."""

from __future__ import annotations

import datetime
import types
from typing import Any

import pytest
from kio.static.primitive import i16, i32, i32Timedelta

from onceflow.client import core
from onceflow.client.core import ConnectionCore
from onceflow.client.errors import KafkaApiError, UnreadableResponse, UnsupportedVersion
from onceflow.client.wire import SIZE, lenient_schema
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import (
    RequestHeader,
    build,
    decode_request,
    encode_response,
    nested,
    request_type,
    response_type,
)
from onceflow.security.sasl_client import SaslClient

ADDRESS = "broker-1:9092"
METADATA_ALL: dict[str, Any] = {
    "topics": None,
    "allow_auto_topic_creation": False,
    "include_cluster_authorized_operations": False,
    "include_topic_authorized_operations": False,
}


def metadata_request(version: int = 8) -> Any:
    return build(request_type(ApiKey.METADATA, version), **METADATA_ALL)


def answer(frame: bytes, response: Any, correlation_id: int | None = None) -> bytes:
    """The broker's response frame (size prefix removed) to a request frame."""
    header, _ = decode_request(frame[SIZE.size :])
    if correlation_id is not None:
        header = RequestHeader(header.api_key, header.api_version, correlation_id, None)
    return encode_response(header, response)


def empty_metadata(version: int = 8) -> Any:
    return build(
        response_type(ApiKey.METADATA, version),
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
        brokers=(),
        cluster_id=None,
        controller_id=i32(1),
        topics=(),
        cluster_authorized_operations=i32(-(2**31)),
    )


def test_a_request_frame_carries_its_size_key_version_correlation_and_client_id() -> None:
    conn = ConnectionCore(ADDRESS, "tool-7")
    frames = [conn.request(ApiKey.METADATA, 8, metadata_request()) for _ in range(2)]
    for correlation_id, frame in enumerate(frames, start=1):
        (size,) = SIZE.unpack_from(frame)
        assert size == len(frame) - SIZE.size
        header, body = decode_request(frame[SIZE.size :])
        assert (header.api_key, header.api_version) == (ApiKey.METADATA, 8)
        assert (header.correlation_id, header.client_id) == (correlation_id, "tool-7")
        assert body.topics is None


@pytest.mark.parametrize("version", [8, 12])  # response header v0, and v1 (flexible)
def test_a_response_is_read_as_the_answer_to_the_request_in_flight(version: int) -> None:
    conn = ConnectionCore(ADDRESS, "c")
    frame = conn.request(ApiKey.METADATA, version, metadata_request(version))
    response = conn.response(answer(frame, empty_metadata(version)))
    assert response.controller_id == 1 and response.topics == ()


def test_a_response_with_another_correlation_id_is_refused() -> None:
    conn = ConnectionCore(ADDRESS, "c")
    frame = conn.request(ApiKey.METADATA, 8, metadata_request())
    with pytest.raises(UnreadableResponse, match="unreadable Metadata v8 response from broker-1"):
        conn.response(answer(frame, empty_metadata(), correlation_id=99))


def test_a_response_without_a_request_is_refused() -> None:
    conn = ConnectionCore(ADDRESS, "c")
    frame = conn.request(ApiKey.METADATA, 8, metadata_request())
    reply = answer(frame, empty_metadata())
    conn.response(reply)
    with pytest.raises(UnreadableResponse, match="to no request"):
        conn.response(reply)


def test_bytes_that_are_not_kafka_are_unreadable() -> None:
    conn = ConnectionCore(ADDRESS, "c")
    conn.request(ApiKey.METADATA, 8, metadata_request())
    with pytest.raises(UnreadableResponse, match="broker-1:9092"):
        conn.response(b"\x00\x00\x00\x01HTTP/1.1 400")


@pytest.mark.parametrize("size", [-1, 1025, 2**31 - 1])
def test_an_oversize_or_negative_response_size_is_refused(size: int) -> None:
    conn = ConnectionCore(ADDRESS, "c", max_response_bytes=1024)
    with pytest.raises(UnreadableResponse, match=f"sent a {size}-byte frame"):
        conn.response_size(SIZE.pack(size))
    assert conn.response_size(SIZE.pack(1024)) == 1024


def test_the_default_bound_refuses_a_tls_alert_read_as_a_length() -> None:
    conn = ConnectionCore(ADDRESS, "c")
    with pytest.raises(UnreadableResponse):
        conn.response_size(b"\x15\x03\x03\x00")  # a TLS alert record's first bytes


def test_lenient_reads_a_minus_one_timestamp_that_kio_refuses() -> None:
    api = ApiKey.DESCRIBE_TRANSACTIONS
    strict, lenient = ConnectionCore(ADDRESS, "c"), ConnectionCore(ADDRESS, "c", lenient=True)
    request = build(request_type(api, 0), transactional_ids=("tx",))
    # A broker's answer, written with the lenient schema so -1 fits (as Kafka sends it).
    schema = lenient_schema(response_type(api, 0))
    lenient_state = lenient_schema(nested(api, 0, "TransactionState"))
    reply = build(
        schema,
        throttle_time=datetime.timedelta(0),
        transaction_states=(
            build(
                lenient_state,
                error_code=ErrorCode.none,
                transactional_id="tx",
                transaction_state="Empty",
                transaction_timeout=datetime.timedelta(seconds=60),
                transaction_start_time=-1,
                producer_id=7,
                producer_epoch=0,
                topics=(),
            ),
        ),
    )
    frame = answer(lenient.request(api, 0, request), reply)
    [found] = lenient.response(frame).transaction_states
    assert found.transaction_start_time == -1
    strict.request(api, 0, request)
    with pytest.raises(UnreadableResponse, match="DescribeTransactions v0"):
        strict.response(frame)


def versions_response(error: int = ErrorCode.none, **ranges: tuple[int, int]) -> Any:
    entry = nested(ApiKey.API_VERSIONS, 0, "ApiVersion")
    keys = tuple(
        entry(api_key=i16(ApiKey[name]), min_version=i16(lo), max_version=i16(hi))
        for name, (lo, hi) in ranges.items()
    )
    return build(response_type(ApiKey.API_VERSIONS, 0), error_code=error, api_keys=keys)


def test_the_highest_version_both_sides_speak_is_chosen() -> None:
    conn = ConnectionCore(ADDRESS, "c")
    frame = conn.request(ApiKey.API_VERSIONS, 0, conn.api_versions_request())
    conn.learn_versions(conn.response(answer(frame, versions_response(METADATA=(0, 13)))))
    assert conn.version_for(ApiKey.METADATA) == core.CLIENT_VERSIONS[ApiKey.METADATA][1]


def test_a_missing_api_or_no_common_version_is_unsupported() -> None:
    conn = ConnectionCore(ADDRESS, "c")
    conn.learn_versions(versions_response(METADATA=(0, 0)))
    with pytest.raises(UnsupportedVersion, match="supports Metadata v0-0, this client v1-"):
        conn.version_for(ApiKey.METADATA)
    with pytest.raises(UnsupportedVersion, match="broker-1:9092 does not support OffsetDelete"):
        conn.version_for(ApiKey.OFFSET_DELETE)


def test_a_refused_api_versions_is_the_brokers_error() -> None:
    conn = ConnectionCore(ADDRESS, "c")
    with pytest.raises(KafkaApiError) as refused:
        conn.learn_versions(versions_response(ErrorCode.unsupported_version))
    assert refused.value.code == ErrorCode.unsupported_version
    assert refused.value.name == "UNSUPPORTED_VERSION"


# ---- the KIP-368 re-authentication deadline ---------------------------------------------


def authenticate(conn: ConnectionCore, lifetime_ms: int) -> list[int]:
    """Run a PLAIN exchange against scripted answers; the API keys it asked for."""
    exchange = conn.authentication(SaslClient("PLAIN", "alice", "secret"), 2)
    asked = []
    request = next(exchange)
    try:
        while True:
            asked.append(request.api_key)
            if request.api_key == 17:
                reply = build(
                    response_type(17, 1), error_code=ErrorCode.none, mechanisms=("PLAIN",)
                )
            else:
                reply = build(
                    response_type(36, 2),
                    error_code=ErrorCode.none,
                    error_message=None,
                    auth_bytes=b"",
                    session_lifetime=datetime.timedelta(milliseconds=lifetime_ms),
                )
            request = exchange.send(reply)
    except StopIteration:
        return asked


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    now = types.SimpleNamespace(value=500.0)
    monkeypatch.setattr(core, "time", types.SimpleNamespace(monotonic=lambda: now.value))
    return now


def test_a_limited_session_is_renewed_at_85_percent_of_its_lifetime(
    clock: types.SimpleNamespace,
) -> None:
    conn = ConnectionCore(ADDRESS, "c")
    assert not conn.reauthentication_due()  # not authenticated: nothing to renew
    assert authenticate(conn, 10_000) == [17, 36]
    clock.value += 8.4
    assert not conn.reauthentication_due()
    clock.value += 0.1
    assert conn.reauthentication_due()
    authenticate(conn, 10_000)  # renewed: the next deadline counts from now
    assert not conn.reauthentication_due()


def test_an_unlimited_session_is_never_renewed_and_a_closed_one_is_forgotten(
    clock: types.SimpleNamespace,
) -> None:
    conn = ConnectionCore(ADDRESS, "c")
    authenticate(conn, 0)
    clock.value += 10**9
    assert not conn.reauthentication_due()
    authenticate(conn, 1_000)
    conn.closed()
    clock.value += 10
    assert not conn.reauthentication_due()
