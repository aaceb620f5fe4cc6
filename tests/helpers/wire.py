"""A tiny raw Kafka client over a blocking socket, built on kio's schemas.

For tests that must send exactly the bytes they mean (bad input, protocol corner cases),
where a real client would refuse or retry. Requests are kio request entities; responses are
decoded with kio's response schema of the same API and version.
"""

from __future__ import annotations

import datetime
import io
import socket
import ssl
import struct
import sys
import uuid
from collections.abc import Mapping
from typing import Any

from kio.index import load_request_schema
from kio.schema.produce.v8 import request as produce_v8
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.types import TopicName
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from onceflow.protocol.codec import build, response_type

__all__ = ["RawConnection", "encode_entity", "fetch_request", "produce_request", "request_frame"]

SOCKET_TIMEOUT_S = 10.0


def encode_entity(entity: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def request_frame(
    api_key: int,
    api_version: int,
    correlation_id: int,
    body: bytes,
    *,
    flexible: bool,
    client_id: str = "raw-test",
) -> bytes:
    """Size prefix + request header (v1, or v2 for flexible versions) + body bytes."""
    header_cls = RequestHeaderV2 if flexible else RequestHeaderV1
    header = header_cls(
        request_api_key=i16(api_key),
        request_api_version=i16(api_version),
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    payload = encode_entity(header) + body
    return struct.pack(">i", len(payload)) + payload


class RawConnection:
    def __init__(
        self,
        bootstrap: str,
        timeout: float = SOCKET_TIMEOUT_S,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        host, _, port = bootstrap.rpartition(":")
        sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock = sock if tls is None else tls.wrap_socket(sock, server_hostname=host)
        self._correlation = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- bytes -----------------------------------------------------------------------

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_exact(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError(f"connection closed after {len(out)} of {n} bytes")
            out += chunk
        return bytes(out)

    def recv_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self.recv_exact(4))
        return self.recv_exact(size)

    def closed_by_peer(self, timeout: float = SOCKET_TIMEOUT_S) -> bool:
        """True once the broker closes the connection (EOF or reset) within `timeout`.

        Any bytes the broker sends meanwhile make this False: it answered instead.
        """
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError, ssl.SSLEOFError):
            return True
        except TimeoutError:
            return False
        return data == b""

    # ---- requests --------------------------------------------------------------------

    def send_request(self, request: Any, api_version: int | None = None) -> int:
        """Send a kio request entity (at its own version unless `api_version` claims
        another); return its correlation id."""
        self._correlation += 1
        frame = request_frame(
            int(request.__api_key__),
            int(request.__version__) if api_version is None else api_version,
            self._correlation,
            encode_entity(request),
            flexible=bool(request.__flexible__),
        )
        self.send_bytes(frame)
        return self._correlation

    def read_response(self, api_key: int, api_version: int, correlation_id: int) -> Any:
        frame = self.recv_frame()
        (got,) = struct.unpack_from(">i", frame, 0)
        assert got == correlation_id, f"correlation id {got}, expected {correlation_id}"
        pos = 4
        cls = response_type(api_key, api_version)  # Onceflow's own APIs too
        if cls.__flexible__ and api_key != 18:  # ApiVersions answers with header v0
            pos += 1  # empty tagged fields of response header v1
        body, size = entity_reader(cls)(frame, pos)
        assert pos + size == len(frame), "trailing bytes after the response body"
        return body

    def call(self, request: Any) -> Any:
        correlation = self.send_request(request)
        return self.read_response(int(request.__api_key__), int(request.__version__), correlation)


def request_class(api_key: int, api_version: int) -> Any:
    return load_request_schema(api_key, api_version)


def produce_request(topic: str, parts: dict[int, bytes], acks: int = -1) -> Any:
    """A Produce v8 request carrying the given raw record bytes per partition."""
    return produce_v8.ProduceRequest(
        transactional_id=None,
        acks=i16(acks),
        timeout=datetime.timedelta(seconds=10),
        topic_data=(
            produce_v8.TopicProduceData(
                name=TopicName(topic),
                partition_data=tuple(
                    produce_v8.PartitionProduceData(index=i32(p), records=data)
                    for p, data in parts.items()
                ),
            ),
        ),
    )


def fetch_request(
    topic: str,
    offsets: Mapping[int, tuple[int, int]] | None = None,
    *,
    version: int = 11,
    topic_id: uuid.UUID | None = None,
    replica_id: int = -1,
    leader_epoch: int = -1,
    isolation_level: int = 0,
    max_bytes: int = 1 << 20,
    max_wait_ms: int = 10,
    min_bytes: int = 1,
) -> Any:
    """A Fetch of `version` of each partition from its (fetch offset, last fetched epoch)
    (default: partition 0 from 0), as a consumer or (replica_id >= 0) a follower, whose id
    goes in replica_state from v15; the topic is named by `topic_id` from v13."""
    module = sys.modules[request_class(1, version).__module__]
    partitions = tuple(
        build(
            module.FetchPartition,
            partition=p,
            current_leader_epoch=leader_epoch,
            fetch_offset=offset,
            last_fetched_epoch=epoch,
            log_start_offset=-1,
            partition_max_bytes=max_bytes,
        )
        for p, (offset, epoch) in (offsets or {0: (0, -1)}).items()
    )
    return build(
        request_class(1, version),
        replica_id=replica_id,
        replica_state=build(module.ReplicaState, replica_id=replica_id, replica_epoch=-1)
        if version >= 15
        else None,
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=isolation_level,
        session_id=0,
        session_epoch=-1,
        topics=(build(module.FetchTopic, topic=topic, topic_id=topic_id, partitions=partitions),),
        forgotten_topics_data=(),
        rack_id="",
    )
