"""Who sent a request: the authenticated principal, the client's address and the listener."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ANONYMOUS", "Session", "principal_name"]

#: The principal of an unauthenticated PLAINTEXT connection (and of SSL without client auth).
ANONYMOUS = "User:ANONYMOUS"


def principal_name(user: str) -> str:
    """`User:<user>`, Kafka's principal for a SASL user name or a certificate's name."""
    return f"User:{user}"


@dataclass(frozen=True, slots=True)
class Session:
    principal: str = ANONYMOUS
    client_host: str = "127.0.0.1"
    listener: str = "PLAINTEXT"
    security_protocol: str = "PLAINTEXT"
