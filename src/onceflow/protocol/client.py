"""The client side of the wire, sans-IO: a request to bytes, a response frame to a value.

Used by the CLI's blocking client and by the brokers' replica fetchers alike. Requests use
header v1 (v2 for flexible versions); responses are read past header v0 (v1 for flexible
ones, except ApiVersions, which always answers with v0 so any client can read it).
"""

from __future__ import annotations

import io
import struct
from typing import Any

from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from onceflow.protocol.api_versions import ApiKey

SIZE = struct.Struct(">i")
_CORRELATION = struct.Struct(">i")


class UnreadableResponse(ValueError):
    """A response frame that is not the answer expected, or not Kafka at all."""


def encode(entity: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def encode_request(
    api_key: int, version: int, correlation_id: int, client_id: str, request: Any
) -> bytes:
    """One whole request frame, size prefix included."""
    header_cls = RequestHeaderV2 if request.__flexible__ else RequestHeaderV1
    header = header_cls(
        request_api_key=i16(api_key),
        request_api_version=i16(version),
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    payload = encode(header) + encode(request)
    return SIZE.pack(len(payload)) + payload


def decode_response(api_key: int, cls: Any, frame: bytes, correlation_id: int) -> Any:
    """The body of a response frame (size prefix removed) of schema `cls`."""
    try:
        (correlation,) = _CORRELATION.unpack_from(frame, 0)
        if correlation != correlation_id:
            raise ValueError(f"correlation id {correlation}, expected {correlation_id}")
        pos = _CORRELATION.size
        if cls.__flexible__ and api_key != ApiKey.API_VERSIONS:
            _, pos = entity_reader(ResponseHeaderV1)(frame, 0)
        body, _ = entity_reader(cls)(frame, pos)
    except Exception as exc:  # kio raises assorted errors on bytes it cannot parse
        raise UnreadableResponse(str(exc)) from exc
    return body
