"""One asyncio connection from a broker to another broker, one request at a time.

Followers fetch through it; it is deliberately small: no version negotiation (brokers of
one cluster run the same code, so the versions are fixed by the caller), a timeout per
request, and any failure closes the connection so the next request starts afresh.
"""

from __future__ import annotations

import asyncio
from typing import Any

from onceflow.protocol.client import SIZE, UnreadableResponse, decode_response, encode_request
from onceflow.protocol.codec import response_type

MAX_RESPONSE_BYTES = 256 * 1024 * 1024


class BrokerUnreachable(Exception):
    """The other broker could not be reached or did not answer in time."""


class BrokerConnection:
    def __init__(self, host: str, port: int, client_id: str, timeout_s: float) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout_s = timeout_s
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation = 0

    async def request(self, api_key: int, version: int, body: Any) -> Any:
        try:
            return await asyncio.wait_for(self._round_trip(api_key, version, body), self.timeout_s)
        except (OSError, TimeoutError, asyncio.IncompleteReadError, UnreadableResponse) as exc:
            self.close()
            raise BrokerUnreachable(
                f"{self.host}:{self.port}: {type(exc).__name__}: {exc}"
            ) from exc

    async def _round_trip(self, api_key: int, version: int, body: Any) -> Any:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        assert self._reader is not None
        self._correlation += 1
        self._writer.write(
            encode_request(api_key, version, self._correlation, self.client_id, body)
        )
        await self._writer.drain()
        (size,) = SIZE.unpack(await self._reader.readexactly(SIZE.size))
        if not 0 <= size <= MAX_RESPONSE_BYTES:
            raise UnreadableResponse(f"a {size}-byte response frame")
        frame = await self._reader.readexactly(size)
        return decode_response(api_key, response_type(api_key, version), frame, self._correlation)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
