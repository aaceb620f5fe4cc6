"""A fetch's record bytes over TLS (no sendfile): written in chunks, each once the transport
has drained, so a large region is never read, encrypted and queued whole."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from onceflow.broker.security import ListenerSecurity
from onceflow.broker.server import COPY_CHUNK_BYTES, KafkaConnection
from onceflow.storage.partition_log import FileRegion


class FullAfterEachWrite:
    """A TLS transport whose buffer goes over its high-water mark with every write."""

    def __init__(self) -> None:
        self.connection: KafkaConnection | None = None
        self.writes: list[bytes] = []

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return object() if name == "ssl_object" else default

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))
        assert self.connection is not None
        self.connection.pause_writing()


def test_tls_region_is_copied_a_chunk_per_drain(tmp_path: Path) -> None:
    data = os.urandom(2 * COPY_CHUNK_BYTES + 1000)
    offset = 500  # the region starts inside the file
    path = tmp_path / "segment.log"
    path.write_bytes(b"h" * offset + data)
    broker: Any = SimpleNamespace(max_request_bytes=1 << 20)
    connection = KafkaConnection(broker, {}, ListenerSecurity("SASL_SSL", "SASL_SSL"))
    transport = FullAfterEachWrite()
    transport.connection = connection
    region = FileRegion(file=None, position=offset, size=len(data))  # type: ignore[arg-type]

    async def run() -> list[int]:
        fd = os.open(path, os.O_RDONLY)
        try:
            loop = asyncio.get_running_loop()
            copy = loop.create_task(connection._sendfile(loop, transport, fd, region))  # type: ignore[arg-type]
            written = []
            while not copy.done():
                await asyncio.sleep(0.01)
                written.append(len(transport.writes))  # no more while paused
                connection.resume_writing()
            await copy
            return written
        finally:
            os.close(fd)

    written = asyncio.run(run())
    assert written[:3] == [1, 2, 3]
    assert [len(w) for w in transport.writes] == [COPY_CHUNK_BYTES, COPY_CHUNK_BYTES, 1000]
    assert b"".join(transport.writes) == data
