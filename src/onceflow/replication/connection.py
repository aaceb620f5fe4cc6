"""One asyncio connection from a broker to another broker, one request at a time.

Followers fetch through it; it is deliberately small: no version negotiation (brokers of
one cluster run the same code, so the versions are fixed by the caller), a timeout per
request, and any failure closes the connection so the next request starts afresh.

With a `ClientSecurity` (the inter-broker listener's protocol and credentials) the socket
is TLS and, for SASL_*, authenticated when it opens: SaslHandshake v1, then SaslAuthenticate
v2 rounds, without ApiVersions since both ends run the same code. A session the other broker
limits (KIP-368) is renewed on the same connection before it runs out.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from onceflow.protocol.client import SIZE, UnreadableResponse, decode_response, encode_request
from onceflow.protocol.codec import response_type
from onceflow.protocol.sasl_exchange import SaslFailure, reauthenticate_after_s, sasl_exchange
from onceflow.security.client_config import ClientSecurity

MAX_RESPONSE_BYTES = 256 * 1024 * 1024


class BrokerUnreachable(Exception):
    """The other broker could not be reached, did not answer in time, or refused this
    broker's TLS handshake or credentials (the reason says which)."""


class BrokerConnection:
    def __init__(
        self,
        host: str,
        port: int,
        client_id: str,
        timeout_s: float,
        security: ClientSecurity | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.security = security
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation = 0
        self._reauthenticate_at: float | None = None  # monotonic; None: the session lasts

    async def request(self, api_key: int, version: int, body: Any) -> Any:
        try:
            return await asyncio.wait_for(self._request(api_key, version, body), self.timeout_s)
        except SaslFailure as exc:
            self.close()
            raise BrokerUnreachable(
                f"{self.host}:{self.port}: SASL authentication failed: {exc}"
            ) from exc
        except (
            OSError,  # ssl.SSLError included: a refused certificate or a plaintext peer
            TimeoutError,
            asyncio.IncompleteReadError,
            UnreadableResponse,
            ValueError,  # TlsConfigError: this broker's own TLS settings do not load
        ) as exc:
            self.close()
            raise BrokerUnreachable(
                f"{self.host}:{self.port}: {type(exc).__name__}: {exc}"
            ) from exc

    async def _request(self, api_key: int, version: int, body: Any) -> Any:
        if self._writer is None:
            context = self.security.ssl_context() if self.security is not None else None
            self._reader, self._writer = await asyncio.open_connection(
                self.host, self.port, ssl=context, server_hostname=self.host if context else None
            )
            if self.security is not None and self.security.uses_sasl:
                await self._authenticate()
        elif self._reauthenticate_at is not None and time.monotonic() >= self._reauthenticate_at:
            await self._authenticate()
        return await self._round_trip(api_key, version, body)

    async def _authenticate(self) -> None:
        assert self.security is not None
        client = self.security.sasl_client()
        assert client is not None  # uses_sasl: ClientSecurity holds a mechanism and user
        exchange = sasl_exchange(client)
        try:
            request = next(exchange)
            while True:
                response = await self._round_trip(request.api_key, request.version, request.body)
                request = exchange.send(response)
        except StopIteration as done:
            lifetime_ms: int = done.value
        after = reauthenticate_after_s(lifetime_ms)
        self._reauthenticate_at = None if after is None else time.monotonic() + after

    async def _round_trip(self, api_key: int, version: int, body: Any) -> Any:
        assert self._reader is not None and self._writer is not None
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
        self._reauthenticate_at = None
