"""Sans-IO request decoding and response encoding with kio's generated schemas.

Every request and response struct comes from kio, which generates one dataclass per API
version from Kafka's JSON schemas. `build()` lets one handler serve every version of an API:
it fills only the fields the chosen version has.
"""

from __future__ import annotations

import dataclasses
import io
import struct
from dataclasses import dataclass
from functools import cache
from types import ModuleType
from typing import Any

from kio.index import load_payload_module, load_request_schema, load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from onceflow.errors import ProtocolError
from onceflow.protocol import onceflow_apis
from onceflow.protocol.api_versions import ApiKey

_PREFIX = struct.Struct(">hhi")  # api_key, api_version, correlation_id
_CORRELATION = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def peek_header(frame: bytes | memoryview) -> RequestHeader:
    """The API key, version and correlation id of any frame, even one we cannot decode."""
    if len(frame) < _PREFIX.size:
        raise ProtocolError(f"frame of {len(frame)} bytes is shorter than a request header")
    api_key, api_version, correlation_id = _PREFIX.unpack_from(frame, 0)
    return RequestHeader(api_key, api_version, correlation_id, None)


# Onceflow's own APIs (protocol/onceflow_apis.py) are looked up before kio's.
@cache
def request_type(api_key: int, api_version: int) -> Any:
    own = onceflow_apis.REQUESTS.get((api_key, api_version))
    return own if own is not None else load_request_schema(api_key, api_version)


@cache
def response_type(api_key: int, api_version: int) -> Any:
    own = onceflow_apis.RESPONSES.get((api_key, api_version))
    return own if own is not None else load_response_schema(api_key, api_version)


@cache
def payload_module(api_key: int, api_version: int, entity_type: EntityType) -> ModuleType:
    """The module of an API version's entities, nested ones included."""
    if entity_type is EntityType.request:
        own = onceflow_apis.REQUEST_MODULES.get((api_key, api_version))
        return own or load_payload_module(api_key, api_version, EntityType.request)
    own = onceflow_apis.RESPONSE_MODULES.get((api_key, api_version))
    return own or load_payload_module(api_key, api_version, EntityType.response)


def response_module(api_key: int, api_version: int) -> ModuleType:
    return payload_module(api_key, api_version, EntityType.response)


@cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def build(cls: Any, **fields: Any) -> Any:
    """Construct a kio entity from the fields this version has; others are dropped."""
    names = _field_names(cls)
    return cls(**{k: v for k, v in fields.items() if k in names})


@cache
def nested(api_key: int, api_version: int, name: str) -> Any:
    """A nested response entity class, e.g. nested(FETCH, 11, "PartitionData")."""
    return getattr(response_module(api_key, api_version), name)


def decode_request(frame: bytes | memoryview) -> tuple[RequestHeader, Any]:
    """Decode a whole request frame of a supported API version.

    Raises ProtocolError when the bytes do not parse. The caller checks the version first.
    """
    prefix = peek_header(frame)
    try:
        cls = request_type(prefix.api_key, prefix.api_version)
        header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
        header, pos = entity_reader(header_cls)(frame, 0)
        body, _ = entity_reader(cls)(frame, pos)
    except Exception as exc:  # kio raises assorted errors on malformed input
        raise ProtocolError(
            f"malformed {_api_name(prefix.api_key)} v{prefix.api_version} request: {exc}"
        ) from exc
    # Bytes after the body are ignored, as Kafka (which never checks for them) ignores them:
    # librdkafka sends an extra empty tag buffer with AlterUserScramCredentials, and the rest
    # of its unfinished 4-byte array count with an all-topics Metadata v9+.
    client_id: str | None = getattr(header, "client_id", None)
    return RequestHeader(prefix.api_key, prefix.api_version, prefix.correlation_id, client_id), body


def response_header(api_key: int, api_version: int, correlation_id: int) -> bytes:
    """Response header v0 (correlation id), or v1 (plus empty tagged fields) when flexible.

    ApiVersions always answers with header v0, so a client can read it at any version.
    """
    head = _CORRELATION.pack(correlation_id)
    if api_key != ApiKey.API_VERSIONS and response_type(api_key, api_version).__flexible__:
        head += b"\x00"
    return head


def encode_body(response: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(response))(buf, response)
    return buf.getvalue()


def encode_response(header: RequestHeader, response: Any) -> bytes:
    """Header and body of a response, without the size prefix."""
    return response_header(header.api_key, header.api_version, header.correlation_id) + (
        encode_body(response)
    )


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"api {api_key}"
