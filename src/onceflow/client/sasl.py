"""A client's SASL exchange as kio requests and responses, sans-IO.

Kafka's order: SaslHandshake (v1, naming the mechanism), then SaslAuthenticate requests
carrying the mechanism's tokens until it completes. `sasl_exchange()` is a generator that
both drivers run through `ConnectionCore.authentication`: it yields each request to send,
is sent back the decoded response, and returns the session lifetime (KIP-368) at the end.
"""

from __future__ import annotations

import datetime
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from onceflow.client.errors import error_name
from onceflow.errors import ErrorCode
from onceflow.protocol.codec import build, request_type
from onceflow.security.sasl_client import SaslClient, SaslClientError

__all__ = [
    "SASL_AUTHENTICATE",
    "SASL_AUTHENTICATE_MAX_VERSION",
    "SASL_HANDSHAKE",
    "SASL_HANDSHAKE_VERSION",
    "SaslFailure",
    "SaslRequest",
    "reauthenticate_after_s",
    "sasl_exchange",
]

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
SASL_HANDSHAKE_VERSION = 1  # v0 sends raw tokens outside Kafka framing: not spoken here
SASL_AUTHENTICATE_MAX_VERSION = 2
# Kafka's clients re-authenticate at 85-95% of the session lifetime; the low end leaves the
# most room for a slow exchange.
REAUTH_FRACTION = 0.85


class SaslFailure(Exception):
    """Authentication failed; `code` is the broker's error (or SASL_AUTHENTICATION_FAILED
    when this side refused the broker's answer)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class SaslRequest:
    api_key: int
    version: int
    body: Any


def sasl_exchange(
    client: SaslClient, authenticate_version: int = SASL_AUTHENTICATE_MAX_VERSION
) -> Generator[SaslRequest, Any, int]:
    """Yield SaslHandshake then SaslAuthenticate requests; send back each response.
    Returns the session lifetime in ms (0: the session does not expire)."""
    mechanism = client.mechanism
    response = yield SaslRequest(
        SASL_HANDSHAKE,
        SASL_HANDSHAKE_VERSION,
        build(request_type(SASL_HANDSHAKE, SASL_HANDSHAKE_VERSION), mechanism=mechanism),
    )
    if response.error_code != ErrorCode.none:
        enabled = ", ".join(response.mechanisms) or "none"
        raise SaslFailure(
            response.error_code,
            f"{error_name(response.error_code)}: the broker does not enable {mechanism} "
            f"(it enables {enabled})",
        )
    token: bytes | None = client.first()
    cls = request_type(SASL_AUTHENTICATE, authenticate_version)
    while token is not None:
        response = yield SaslRequest(
            SASL_AUTHENTICATE, authenticate_version, build(cls, auth_bytes=token)
        )
        if response.error_code != ErrorCode.none:
            message = response.error_message or "no reason given"
            raise SaslFailure(response.error_code, f"{error_name(response.error_code)}: {message}")
        try:
            token = client.step(response.auth_bytes)
        except SaslClientError as exc:
            raise SaslFailure(
                ErrorCode.sasl_authentication_failed,
                f"{error_name(ErrorCode.sasl_authentication_failed)}: {exc}",
            ) from None
    lifetime = getattr(response, "session_lifetime", None)
    if isinstance(lifetime, datetime.timedelta):
        return int(lifetime / datetime.timedelta(milliseconds=1))
    return 0


def reauthenticate_after_s(lifetime_ms: int) -> float | None:
    """Seconds after authenticating when a client should authenticate again (None: never)."""
    return lifetime_ms * REAUTH_FRACTION / 1000 if lifetime_ms > 0 else None
