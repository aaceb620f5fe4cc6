"""The asyncio driver: one connection from a broker to another broker, one request at a
time, over a `ConnectionCore`. Replica fetchers and inter-broker requests use it.

It is deliberately small: no version negotiation (brokers of one cluster run the same
code, so the caller fixes the versions), a timeout per request, and any failure closes the
connection, so that the next request starts afresh, and is `Unreachable`: to a broker, a
peer that refuses its TLS handshake or credentials is as good as down.

With a `ClientSecurity` (the inter-broker listener's protocol and credentials) the socket
is TLS and, for SASL_*, authenticated when it opens: SaslHandshake v1, then SaslAuthenticate
v2 rounds, without ApiVersions since both ends run the same code. A session the other broker
limits (KIP-368) is renewed on the same connection before it runs out.
"""

from __future__ import annotations

import asyncio
from typing import Any

from onceflow.client.core import ConnectionCore, format_address
from onceflow.client.errors import Unreachable, UnreadableResponse
from onceflow.client.sasl import SaslFailure
from onceflow.client.wire import SIZE
from onceflow.security.client_config import ClientSecurity

__all__ = ["AsyncConnection"]


class AsyncConnection:
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
        self.timeout_s = timeout_s
        self.security = security
        self.core = ConnectionCore(format_address(host, port), client_id)
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def request(self, api_key: int, version: int, body: Any) -> Any:
        """The response to one request at a version the caller chose."""
        try:
            # A timeout scope, not wait_for: no task per request (a follower sends one per
            # fetch round).
            async with asyncio.timeout(self.timeout_s):
                return await self._request(api_key, version, body)
        except SaslFailure as exc:
            self.close()
            raise Unreachable(
                f"{self.host}:{self.port}: SASL authentication failed: {exc}"
            ) from exc
        except UnreadableResponse as exc:
            self.close()
            raise Unreachable(f"{self.host}:{self.port}: {exc}") from exc
        except (
            OSError,  # ssl.SSLError included: a refused certificate or a plaintext peer
            TimeoutError,
            asyncio.IncompleteReadError,
            ValueError,  # TlsConfigError: this broker's own TLS settings do not load
        ) as exc:
            self.close()
            raise Unreachable(f"{self.host}:{self.port}: {type(exc).__name__}: {exc}") from exc

    async def _request(self, api_key: int, version: int, body: Any) -> Any:
        if self._writer is None:
            context = self.security.ssl_context() if self.security is not None else None
            self._reader, self._writer = await asyncio.open_connection(
                self.host, self.port, ssl=context, server_hostname=self.host if context else None
            )
            if self.security is not None and self.security.uses_sasl:
                await self._authenticate()
        elif self.core.reauthentication_due():
            await self._authenticate()
        return await self._round_trip(api_key, version, body)

    async def _authenticate(self) -> None:
        assert self.security is not None
        client = self.security.sasl_client()
        assert client is not None  # uses_sasl: ClientSecurity holds a mechanism and user
        exchange = self.core.authentication(client)
        try:
            request = next(exchange)
            while True:
                response = await self._round_trip(request.api_key, request.version, request.body)
                request = exchange.send(response)
        except StopIteration:
            pass

    async def _round_trip(self, api_key: int, version: int, body: Any) -> Any:
        assert self._reader is not None and self._writer is not None
        self._writer.write(self.core.request(api_key, version, body))
        await self._writer.drain()
        size = self.core.response_size(await self._reader.readexactly(SIZE.size))
        return self.core.response(await self._reader.readexactly(size))

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
        self.core.closed()
