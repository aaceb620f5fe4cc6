"""Requests at an API version this broker does not serve, named once per client.

Kafka 4.x (SocketServer's parseRequestHeader) answers such a request by closing the
connection, with no response: there is no schema to answer an unknown version in. The one
exception is ApiVersions, answered with UNSUPPORTED_VERSION and the supported ranges so the
client can retry lower (server.py does both). A client below Kafka 4.0's minimums (KIP-896)
reconnects and retries forever, so Kafka's log line per request would flood the log: here
the first such request of each (client id, API, version) in this broker process is logged
at WARNING with everything needed to find and upgrade the client, the others at DEBUG. The
ones already named are remembered in a bounded LRU.
"""

from __future__ import annotations

import logging
import struct
from collections import OrderedDict

from onceflow.protocol.api_versions import SUPPORTED_VERSIONS, ApiKey
from onceflow.protocol.codec import RequestHeader

log = logging.getLogger(__name__)

REMEMBERED = 4096  # (client id, API, version) triples named at WARNING and remembered
CLIENT_ID_CHARS = 200  # longer client ids are cut (they are keys of the LRU)

_CLIENT_ID = struct.Struct(">hhih")  # api key, version, correlation id, client id length


def api_name(api_key: int) -> str:
    """Kafka's name of an API ("OffsetCommit"), or its key when this broker has none."""
    try:
        return ApiKey(api_key).name.title().replace("_", "")
    except ValueError:
        return f"API key {api_key}"


def client_id(frame: bytes | memoryview) -> str:
    """The client id of a request header (v1 and v2 both start with it), or ""."""
    if len(frame) < _CLIENT_ID.size:
        return ""
    size = _CLIENT_ID.unpack_from(frame, 0)[3]
    start = _CLIENT_ID.size
    raw = bytes(frame[start : start + max(0, min(size, CLIENT_ID_CHARS * 4))])
    return raw.decode("utf-8", "replace")[:CLIENT_ID_CHARS]


def _why(api_key: int, api_version: int) -> str:
    bounds = SUPPORTED_VERSIONS.get(api_key)
    if bounds is None:
        return "an API this broker does not serve"
    low, high = bounds
    if api_version < low:
        return f"below the minimum v{low} (this broker serves v{low} to v{high}; KIP-896)"
    return f"above the maximum v{high} (this broker serves v{low} to v{high})"


class Reporter:
    """Logs each (client id, API, version) at WARNING the first time, then at DEBUG."""

    def __init__(self, capacity: int = REMEMBERED) -> None:
        self.capacity = capacity
        self._named: OrderedDict[tuple[str, int, int], None] = OrderedDict()

    def report(self, frame: bytes | memoryview, header: RequestHeader, peer: str) -> None:
        client = client_id(frame)
        key = (client, header.api_key, header.api_version)
        first = key not in self._named
        self._named[key] = None
        self._named.move_to_end(key)
        if len(self._named) > self.capacity:
            self._named.popitem(last=False)
        log.log(
            logging.WARNING if first else logging.DEBUG,
            "client %r at %s sent %s v%d, %s: closing the connection, as Kafka does "
            "(at WARNING once per client id, API and version)",
            client,
            peer,
            api_name(header.api_key),
            header.api_version,
            _why(header.api_key, header.api_version),
        )


_reporter = Reporter()


def report(frame: bytes | memoryview, header: RequestHeader, peer: str) -> None:
    """Name a client that sent an unsupported version (once per broker process)."""
    _reporter.report(frame, header, peer)
