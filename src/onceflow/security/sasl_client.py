"""The client side of SASL, sans-IO: PLAIN and SCRAM-SHA-256/512 tokens in and out.

The caller carries each token in a SaslAuthenticate request and feeds the broker's answer
back to `step()`; `step()` returns the next token, or None once the exchange is complete.
PLAIN is one token; SCRAM is client-first, server-first, client-final, server-final, and the
server's final message is verified (it proves the broker knows the credential) before the
exchange counts as complete. SCRAM itself is scramp's; nothing of it is written here.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

from scramp import ScramClient, ScramException  # type: ignore[import-untyped]

from onceflow.security.sasl import SUPPORTED_MECHANISMS

__all__ = ["MECHANISMS", "SaslClient", "SaslClientError"]

PLAIN = "PLAIN"
#: The mechanisms a client can use, by their SaslHandshake names: the broker's.
MECHANISMS = SUPPORTED_MECHANISMS


class SaslClientError(Exception):
    """The exchange cannot go on: bad credentials for the mechanism, an unexpected server
    token, or a server that failed to prove itself."""


class _Stage(enum.Enum):
    START = "start"
    SENT_FIRST = "sent first token"
    SENT_FINAL = "sent final token"
    COMPLETE = "complete"
    FAILED = "failed"


# (mechanism family, stage) -> the stage after the next call; first() from START, step()
# from any other stage listed. Anything absent is illegal, and FAILED is final.
_NEXT: dict[tuple[str, _Stage], _Stage] = {
    ("PLAIN", _Stage.START): _Stage.SENT_FIRST,
    ("PLAIN", _Stage.SENT_FIRST): _Stage.COMPLETE,
    ("SCRAM", _Stage.START): _Stage.SENT_FIRST,
    ("SCRAM", _Stage.SENT_FIRST): _Stage.SENT_FINAL,
    ("SCRAM", _Stage.SENT_FINAL): _Stage.COMPLETE,
}


class SaslClient:
    """One authentication exchange; make a new one per connection (and re-authentication)."""

    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self.mechanism = mechanism.upper()
        if self.mechanism not in MECHANISMS:
            raise SaslClientError(
                f"SASL mechanism {mechanism} is not supported (use {', '.join(MECHANISMS)})"
            )
        if not username:
            raise SaslClientError("the SASL username is empty")
        self._family = "PLAIN" if self.mechanism == PLAIN else "SCRAM"
        self._stage = _Stage.START
        self._username = username
        self._password = password
        self._scram: ScramClient | None = None
        if self._family == "PLAIN":
            if "\0" in username or "\0" in password:
                raise SaslClientError("PLAIN credentials cannot contain a NUL character")
        else:
            try:
                self._scram = ScramClient([self.mechanism], username, password)
            except ScramException as exc:
                raise SaslClientError(f"{self.mechanism}: {exc}") from None

    def __repr__(self) -> str:
        return f"SaslClient({self.mechanism}, {self._username!r}, stage={self._stage.value})"

    @property
    def complete(self) -> bool:
        return self._stage is _Stage.COMPLETE

    def first(self) -> bytes:
        """The client's first token (PLAIN's only one)."""
        self._advance("first()", first=True)
        if self._scram is None:
            return f"\0{self._username}\0{self._password}".encode()
        return self._scram_call(self._scram.get_client_first).encode()

    def step(self, server_token: bytes) -> bytes | None:
        """The answer to the server's token, or None when the exchange is complete."""
        stage = self._advance("step()", first=False)
        if self._scram is None:
            if server_token:
                self._stage = _Stage.FAILED
                raise SaslClientError("PLAIN: the server sent an unexpected token")
            return None
        try:
            message = server_token.decode()
        except UnicodeDecodeError:
            self._stage = _Stage.FAILED
            raise SaslClientError(f"{self.mechanism}: the server's token is not UTF-8") from None
        if stage is _Stage.SENT_FIRST:
            self._scram_call(self._scram.set_server_first, message)
            return self._scram_call(self._scram.get_client_final).encode()
        self._scram_call(self._scram.set_server_final, message)
        return None

    def _advance(self, call: str, *, first: bool) -> _Stage:
        stage = self._stage
        nxt = _NEXT.get((self._family, stage))
        if nxt is None or first != (stage is _Stage.START):
            raise SaslClientError(f"{self.mechanism}: {call} is not allowed once {stage.value}")
        self._stage = nxt
        return stage

    def _scram_call(self, method: Callable[..., Any], *args: str) -> str:
        try:
            result = method(*args)
        except ScramException as exc:
            self._stage = _Stage.FAILED
            raise SaslClientError(f"{self.mechanism}: {_scram_reason(exc)}") from None
        return "" if result is None else str(result)


def _scram_reason(exc: ScramException) -> str:
    text = str(exc)
    if "signature" in text:
        return f"the server did not prove it knows the credential ({text})"
    return text
