"""SaslHandshake and SaslAuthenticate: the connection's own authentication exchange.

The connection's ConnectionAuth (in the request context) holds the state; the server has
already refused these requests where the state does not allow them.
"""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from onceflow.broker.handlers.base import Handler, RequestContext
from onceflow.protocol.api_versions import ApiKey


async def handle_sasl_handshake(ctx: RequestContext, request: Any) -> Any:
    auth = ctx.auth
    assert auth is not None  # every connection has one
    error = auth.handshake(request.mechanism)
    return ctx.response(error_code=error, mechanisms=auth.listener.mechanisms)


async def handle_sasl_authenticate(ctx: RequestContext, request: Any) -> Any:
    auth = ctx.auth
    assert auth is not None
    token_in = bytes(request.auth_bytes)
    if auth.mechanism == "PLAIN":
        # PLAIN may check a password against stored SCRAM credentials: thousands of hash
        # iterations, kept off the event loop that serves every other connection.
        outcome = await asyncio.to_thread(auth.authenticate, token_in)
    else:
        outcome = auth.authenticate(token_in)
    error, message, token, lifetime_ms = outcome
    return ctx.response(
        error_code=error,
        error_message=message,
        auth_bytes=token,
        session_lifetime=datetime.timedelta(milliseconds=lifetime_ms),
    )


HANDLERS: dict[int, Handler] = {
    ApiKey.SASL_HANDSHAKE: handle_sasl_handshake,
    ApiKey.SASL_AUTHENTICATE: handle_sasl_authenticate,
}
