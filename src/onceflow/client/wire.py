"""Requests to bytes and response frames to values: kio's schemas on the wire, sans-IO.

Requests use header v1 (v2 for flexible versions); responses are read past header v0 (v1
for flexible ones, except ApiVersions, which always answers with v0 so any client can read
it).
"""

from __future__ import annotations

import dataclasses
import functools
import io
import os
import struct
import types
from collections.abc import Sequence
from typing import Any, get_args, get_origin

from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32, i64

from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import build, payload_module, request_type
from onceflow.protocol.compact import compact_length

__all__ = [
    "SIZE",
    "Blob",
    "FrameError",
    "api_name",
    "decode_response",
    "encode",
    "encode_request",
    "encode_request_body",
    "encode_request_parts",
    "lenient_schema",
    "placeholder",
    "request_entity",
]

SIZE = struct.Struct(">i")
Blob = bytes | bytearray | memoryview
_CORRELATION = struct.Struct(">i")
_VERSIONS_TRIED = 8  # kio drops versions Kafka removed: try a few for the name


class FrameError(ValueError):
    """A response frame that does not decode as the answer expected."""


def api_name(api_key: int) -> str:
    """Kafka's name of an API (WriteTxnMarkers), from kio's schema."""
    for version in range(_VERSIONS_TRIED):
        try:
            return str(request_type(api_key, version).__name__).removesuffix("Request")
        except Exception:  # kio lacks this version (removed ones) or the key itself
            continue
    return f"API {api_key}"


def encode(entity: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def encode_request(
    api_key: int, version: int, correlation_id: int, client_id: str, request: Any
) -> bytes:
    """One whole request frame, size prefix included (its header v2 if the request's
    schema is flexible, else v1)."""
    return _framed(
        api_key, version, correlation_id, client_id, request.__flexible__, encode(request)
    )


def encode_request_body(
    api_key: int, version: int, correlation_id: int, client_id: str, body: bytes
) -> bytes:
    """One whole request frame around a body already encoded (protocol/follower_fetch.py)."""
    flexible = request_type(api_key, version).__flexible__
    return _framed(api_key, version, correlation_id, client_id, flexible, body)


def _framed(
    api_key: int, version: int, correlation_id: int, client_id: str, flexible: bool, body: bytes
) -> bytes:
    header_cls = RequestHeaderV2 if flexible else RequestHeaderV1
    header = header_cls(
        request_api_key=i16(api_key),
        request_api_version=i16(version),
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    buf = io.BytesIO()
    buf.write(bytes(SIZE.size))
    entity_writer(header_cls)(buf, header)
    buf.write(body)
    SIZE.pack_into(buf.getbuffer(), 0, buf.tell() - SIZE.size)
    return buf.getvalue()


# A placeholder stands in a request for a large bytes field (a Produce request's records)
# that `encode_request_parts` leaves uncopied: random, so it occurs nowhere else.
_PLACEHOLDER_PREFIX = os.urandom(12)
_PLACEHOLDER_SIZE = len(_PLACEHOLDER_PREFIX) + 4


def placeholder(index: int) -> bytes:
    """The stand-in for blob `index` of `encode_request_parts`."""
    return _PLACEHOLDER_PREFIX + index.to_bytes(4, "big")


def encode_request_parts(
    api_key: int,
    version: int,
    correlation_id: int,
    client_id: str,
    request: Any,
    blobs: Sequence[Blob],
) -> list[Blob]:
    """The frame of `request`, whose bytes fields hold `placeholder(i)` where `blobs[i]`
    goes, as pieces to send one after the other (`socket.sendmsg`): the blobs are not
    copied. Byte for byte what `encode_request` makes of the request with the blobs in."""
    frame = encode_request(api_key, version, correlation_id, client_id, request)
    flexible = request.__flexible__
    places = []
    for index in range(len(blobs)):
        at = frame.find(placeholder(index))
        if at < 0 or frame.find(placeholder(index), at + 1) >= 0:
            raise ValueError(f"blob {index} must have exactly one placeholder in the request")
        places.append((at, index))
    parts: list[Blob] = [b""]  # the size prefix, once the size is known
    size, pos = 0, SIZE.size
    old = _length(_PLACEHOLDER_SIZE, flexible)  # the placeholder's length field
    for at, index in sorted(places):
        if frame[at - len(old) : at] != old:
            raise ValueError(f"blob {index}'s placeholder is not a whole bytes field")
        blob = blobs[index]
        length = _length(memoryview(blob).nbytes, flexible)
        parts += (frame[pos : at - len(old)], length, blob)
        size += at - len(old) - pos + len(length) + memoryview(blob).nbytes
        pos = at + _PLACEHOLDER_SIZE
    parts.append(frame[pos:])
    size += len(frame) - pos
    parts[0] = SIZE.pack(size)
    return parts


def _length(n: int, flexible: bool) -> bytes:
    """A bytes field's length: int32, or when flexible a compact length (n + 1, varint)."""
    return compact_length(n) if flexible else SIZE.pack(n)


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
        raise FrameError(str(exc)) from exc
    return body


def request_entity(api_key: int, api_version: int, name: str, /, **fields: Any) -> Any:
    """A nested request entity of one API version (e.g. DescribeProducers' TopicRequest)."""
    module = payload_module(api_key, api_version, EntityType.request)
    return build(getattr(module, name), **fields)


_SCHEMA_CLASS_VARS = ("__type__", "__version__", "__flexible__", "__api_key__", "__header_schema__")


@functools.cache
def lenient_schema(cls: Any) -> Any:
    """`cls` with every datetime_i64 field read as plain int64 milliseconds.

    kio refuses to read a negative timestamp, yet Kafka sends -1 for "none" (e.g. the
    start time of a transactional id with no transaction running in DescribeTransactions).
    Returns `cls` itself when nothing in it (or nested in it) needs the change.
    """
    changed = False
    fields = []
    for f in dataclasses.fields(cls):
        kind, metadata = f.type, dict(f.metadata)
        if metadata.get("kafka_type") == "datetime_i64":
            kind, metadata["kafka_type"], changed = i64, "int64", True
        elif get_origin(kind) is tuple and dataclasses.is_dataclass(get_args(kind)[0]):
            inner = lenient_schema(get_args(kind)[0])
            if inner is not get_args(kind)[0]:
                kind, changed = types.GenericAlias(tuple, (inner, ...)), True
        elif isinstance(kind, type) and dataclasses.is_dataclass(kind):
            inner = lenient_schema(kind)
            if inner is not kind:
                kind, changed = inner, True
        extra: dict[str, Any] = {}
        if f.default is not dataclasses.MISSING:
            extra["default"] = f.default
        fields.append((f.name, kind, dataclasses.field(metadata=metadata, **extra)))
    if not changed:
        return cls
    namespace = {name: getattr(cls, name) for name in _SCHEMA_CLASS_VARS if hasattr(cls, name)}
    return dataclasses.make_dataclass(
        cls.__name__, fields, namespace=namespace, frozen=True, slots=True, kw_only=True
    )
