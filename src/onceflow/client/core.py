"""One client connection's protocol state, sans-IO: what the blocking and asyncio drivers
share, so each of them only moves bytes.

The core decides those bytes: each request's correlation id and frame, the bound on a
response's size (a TLS alert or an HTTP answer read as a Kafka length is huge), the response
read back with its correlation id checked, the versions the broker offers (ApiVersions) and
the one to use per API, and when a SASL session the broker limits (KIP-368) must be renewed.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Sequence
from typing import Any

from onceflow.client.errors import KafkaApiError, UnreadableResponse, UnsupportedVersion, error_name
from onceflow.client.sasl import (
    SASL_AUTHENTICATE,
    SASL_AUTHENTICATE_MAX_VERSION,
    SASL_HANDSHAKE,
    SASL_HANDSHAKE_VERSION,
    SaslRequest,
    reauthenticate_after_s,
    sasl_exchange,
)
from onceflow.client.wire import (
    SIZE,
    Blob,
    FrameError,
    api_name,
    decode_response,
    encode_request,
    encode_request_body,
    encode_request_parts,
    lenient_schema,
)
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import build, request_type, response_type
from onceflow.security.sasl_client import SaslClient

__all__ = [
    "API_VERSIONS_VERSION",
    "CLIENT_VERSIONS",
    "MAX_RESPONSE_BYTES",
    "ConnectionCore",
    "format_address",
]

MAX_RESPONSE_BYTES = 256 * 1024 * 1024
API_VERSIONS_VERSION = 0  # every broker since 0.10 answers v0

# The version ranges negotiated with a broker. The minimums are the oldest versions that
# carry what the callers need (Metadata v1: null means all topics; DescribeAcls v1: pattern
# types); the maximums are the newest whose fields have been looked at.
CLIENT_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.METADATA: (1, 12),
    ApiKey.FIND_COORDINATOR: (1, 6),
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1),
    ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 2),
    ApiKey.DESCRIBE_LOG_DIRS: (1, 4),
    ApiKey.WRITE_TXN_MARKERS: (1, 2),
    ApiKey.DESCRIBE_ACLS: (1, 3),
    ApiKey.CREATE_ACLS: (1, 3),
    ApiKey.DELETE_ACLS: (1, 3),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.DESCRIBE_CLUSTER: (0, 0),  # the controller's id, for ElectLeaders
    ApiKey.ELECT_LEADERS: (0, 2),
    ApiKey.LIST_GROUPS: (5, 5),  # share groups by type
    ApiKey.SHARE_GROUP_HEARTBEAT: (1, 1),
    ApiKey.SHARE_GROUP_DESCRIBE: (1, 1),
    ApiKey.SHARE_FETCH: (1, 2),
    ApiKey.SHARE_ACKNOWLEDGE: (1, 2),
    ApiKey.TXN_SHARE_ACKNOWLEDGE: (0, 0),
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: (0, 1),
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: (0, 0),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: (0, 0),
    ApiKey.DELETE_GROUPS: (2, 2),
    ApiKey.LIST_OFFSETS: (1, 1),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 1),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    SASL_HANDSHAKE: (SASL_HANDSHAKE_VERSION, SASL_HANDSHAKE_VERSION),
    SASL_AUTHENTICATE: (0, SASL_AUTHENTICATE_MAX_VERSION),
}


def format_address(host: str, port: int) -> str:
    """HOST:PORT as messages show it (an IPv6 host in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class ConnectionCore:
    """The state of one connection, one request in flight at a time.

    `lenient` reads timestamps as plain milliseconds (`lenient_schema`), as admin tools
    must: Kafka sends -1 for "none" where kio expects a time.
    """

    def __init__(
        self,
        address: str,
        client_id: str,
        *,
        lenient: bool = False,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        self.address = address
        self.client_id = client_id
        self.lenient = lenient
        self.max_response_bytes = max_response_bytes
        self.versions: dict[int, tuple[int, int]] | None = None
        self._correlation = 0
        self._pending: tuple[int, int, int] | None = None  # api key, version, correlation id
        self._reauthenticate_at: float | None = None  # monotonic; None: the session lasts

    # ---- framing ---------------------------------------------------------------------

    def request(self, api_key: int, version: int, body: Any) -> bytes:
        """The whole frame of the next request; its response is the next one read."""
        self._correlation += 1
        self._pending = (api_key, version, self._correlation)
        if isinstance(body, bytes):  # encoded already (protocol/follower_fetch.py)
            return encode_request_body(api_key, version, self._correlation, self.client_id, body)
        return encode_request(api_key, version, self._correlation, self.client_id, body)

    def request_parts(
        self, api_key: int, version: int, body: Any, blobs: Sequence[Blob]
    ) -> list[Blob]:
        """`request` as pieces, `blobs` (in place of their placeholders) not copied."""
        self._correlation += 1
        self._pending = (api_key, version, self._correlation)
        return encode_request_parts(
            api_key, version, self._correlation, self.client_id, body, blobs
        )

    @property
    def awaiting(self) -> bool:
        """A request was sent and its response not read yet."""
        return self._pending is not None

    def response_size(self, prefix: bytes) -> int:
        """The length of the response frame whose 4-byte size prefix this is."""
        size: int = SIZE.unpack(prefix)[0]
        if not 0 <= size <= self.max_response_bytes:
            raise UnreadableResponse(
                f"{self.address} sent a {size}-byte frame: is it a Kafka broker?"
            )
        return size

    def response(self, frame: bytes) -> Any:
        """The response to the request in flight, from its frame (size prefix removed)."""
        if self._pending is None:
            raise UnreadableResponse(f"{self.address} sent a response to no request")
        api_key, version, correlation = self._pending
        self._pending = None
        cls = response_type(api_key, version)
        try:
            return decode_response(
                api_key, lenient_schema(cls) if self.lenient else cls, frame, correlation
            )
        except FrameError as exc:
            raise UnreadableResponse(
                f"unreadable {api_name(api_key)} v{version} response from {self.address}: {exc}"
            ) from None

    def closed(self) -> None:
        """The connection is gone: a new one starts without a request or a session."""
        self._pending = None
        self._reauthenticate_at = None

    # ---- versions --------------------------------------------------------------------

    def api_versions_request(self) -> Any:
        return build(request_type(ApiKey.API_VERSIONS, API_VERSIONS_VERSION))

    def learn_versions(self, response: Any) -> None:
        """Keep the broker's ApiVersions answer; its error is the broker's refusal."""
        if response.error_code != ErrorCode.none:
            raise KafkaApiError(
                response.error_code,
                f"{self.address} refused ApiVersions: {error_name(response.error_code)}",
            )
        self.versions = {
            int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys
        }

    def version_for(self, api_key: int) -> int:
        """The highest version of an API both this client and the broker speak."""
        assert self.versions is not None, "learn_versions first"
        lo, hi = CLIENT_VERSIONS[api_key]
        theirs = self.versions.get(api_key)
        if theirs is None:
            raise UnsupportedVersion(
                f"the broker at {self.address} does not support {api_name(api_key)}"
            )
        best = min(hi, theirs[1])
        if best < max(lo, theirs[0]):
            raise UnsupportedVersion(
                f"the broker at {self.address} supports {api_name(api_key)} "
                f"v{theirs[0]}-{theirs[1]}, this client v{lo}-{hi}"
            )
        return best

    # ---- authentication --------------------------------------------------------------

    def authentication(
        self, client: SaslClient, authenticate_version: int = SASL_AUTHENTICATE_MAX_VERSION
    ) -> Generator[SaslRequest, Any, None]:
        """The SASL exchange's requests (send each response back); at its end, the time
        to authenticate again is set from the session lifetime the broker granted."""
        lifetime_ms = yield from sasl_exchange(client, authenticate_version)
        after = reauthenticate_after_s(lifetime_ms)
        self._reauthenticate_at = None if after is None else time.monotonic() + after

    def reauthentication_due(self) -> bool:
        """Whether the session must be renewed before the next request."""
        return self._reauthenticate_at is not None and time.monotonic() >= self._reauthenticate_at
