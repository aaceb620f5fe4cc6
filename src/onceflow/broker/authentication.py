"""One connection's authentication: who it is, and which requests it may send yet.

A PLAINTEXT or SSL connection is authenticated when it opens (as ANONYMOUS, or as its
certificate's subject). A SASL connection walks Kafka's state machine: ApiVersions and
SaslHandshake, then SaslAuthenticate until the mechanism completes; any other request
before that closes the connection, as in Kafka. With connections.max.reauth.ms, a session
expires: the client re-authenticates (KIP-368) with the same principal, or the connection
is closed at its next request.
"""

from __future__ import annotations

import enum
import logging
import time

from onceflow.broker.security import ListenerSecurity, SecurityState
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.security.sasl import SaslFailed, SaslServer, make_sasl_server
from onceflow.security.session import ANONYMOUS, Session, principal_name

audit = logging.getLogger("onceflow.audit")


class AuthState(enum.Enum):
    HANDSHAKE = "waiting for SaslHandshake"
    AUTHENTICATE = "waiting for SaslAuthenticate"
    AUTHENTICATED = "authenticated"
    REAUTHENTICATE = "re-authenticating"
    FAILED = "failed"


# Which requests each state accepts; anything else closes the connection.
_ALLOWED: dict[AuthState, frozenset[int] | None] = {
    AuthState.HANDSHAKE: frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE}),
    AuthState.AUTHENTICATE: frozenset({ApiKey.SASL_AUTHENTICATE}),
    AuthState.AUTHENTICATED: None,  # everything, SaslHandshake starting a re-authentication
    AuthState.REAUTHENTICATE: frozenset({ApiKey.SASL_AUTHENTICATE}),
    AuthState.FAILED: frozenset(),
}


class IllegalSaslState(Exception):
    """A request the connection's authentication state does not allow; it is closed."""


class ConnectionAuth:
    def __init__(
        self, listener: ListenerSecurity, security: SecurityState, client_host: str
    ) -> None:
        self.listener = listener
        self.security = security
        self.client_host = client_host
        self.state = AuthState.HANDSHAKE if listener.sasl else AuthState.AUTHENTICATED
        self.session = Session(ANONYMOUS, client_host, listener.name, listener.protocol)
        self._server: SaslServer | None = None
        self._mechanism = ""
        self._expires_at: float | None = None  # monotonic seconds; None: never

    def set_tls_principal(self, principal: str) -> None:
        """The principal of an SSL connection's client certificate (not for SASL_SSL,
        where SASL names the principal)."""
        if not self.listener.sasl:
            self.session = Session(
                principal, self.client_host, self.listener.name, self.listener.protocol
            )

    def check(self, api_key: int) -> None:
        """Raise IllegalSaslState unless a request of `api_key` may be handled now."""
        allowed = _ALLOWED[self.state]
        if allowed is not None:
            if api_key not in allowed:
                raise IllegalSaslState(
                    f"unexpected request (api key {api_key}) while {self.state.value}"
                )
            return
        if api_key == ApiKey.SASL_AUTHENTICATE:
            raise IllegalSaslState("SaslAuthenticate without a SaslHandshake")
        if api_key == ApiKey.SASL_HANDSHAKE and not self.listener.sasl:
            raise IllegalSaslState(f"SaslHandshake on the {self.listener.protocol} listener")
        expires = self._expires_at
        if expires is not None and api_key != ApiKey.SASL_HANDSHAKE and time.monotonic() > expires:
            raise IllegalSaslState("SASL session expired without re-authentication")

    # ---- SaslHandshake and SaslAuthenticate -------------------------------------------

    def handshake(self, mechanism: str) -> ErrorCode:
        """Choose the mechanism; UNSUPPORTED_SASL_MECHANISM (and the connection fails)
        when the listener does not enable it, or a re-authentication switches mechanism."""
        reauth = self.state is AuthState.AUTHENTICATED
        if mechanism not in self.listener.mechanisms or (reauth and mechanism != self._mechanism):
            self._fail(f"unsupported SASL mechanism {mechanism[:64]!r}")
            return ErrorCode.unsupported_sasl_mechanism
        self._mechanism = mechanism
        self._server = make_sasl_server(
            mechanism, self.security.credential, self.listener.plain_users
        )
        self.state = AuthState.REAUTHENTICATE if reauth else AuthState.AUTHENTICATE
        return ErrorCode.none

    def authenticate(self, token: bytes) -> tuple[ErrorCode, str | None, bytes, int]:
        """One SaslAuthenticate round: (error, error message, response token, session
        lifetime in ms, 0 when sessions do not expire)."""
        server = self._server
        assert server is not None  # check() admits SaslAuthenticate only after a handshake
        try:
            response = server.step(token)
        except SaslFailed as exc:
            self._fail(exc.reason, exc.user)
            return ErrorCode.sasl_authentication_failed, exc.message, b"", 0
        if not server.complete:
            return ErrorCode.none, None, response, 0
        assert server.user is not None
        principal = principal_name(server.user)
        if self.state is AuthState.REAUTHENTICATE and principal != self.session.principal:
            message = (
                f"Cannot change principals during re-authentication from "
                f"{self.session.principal}: {principal}"
            )
            self._fail(message, server.user)
            return ErrorCode.sasl_authentication_failed, message, b"", 0
        self.session = Session(
            principal, self.client_host, self.listener.name, self.listener.protocol
        )
        self.state = AuthState.AUTHENTICATED
        self._server = None
        lifetime_ms = self.listener.reauth_ms
        self._expires_at = time.monotonic() + lifetime_ms / 1000 if lifetime_ms else None
        audit.debug(
            "%s authenticated with %s from %s", principal, self._mechanism, self.client_host
        )
        return ErrorCode.none, None, response, lifetime_ms

    @property
    def mechanism(self) -> str:
        """The mechanism of the exchange under way (or the last one)."""
        return self._mechanism

    @property
    def failed(self) -> bool:
        """True once authentication failed: the connection closes after its answer."""
        return self.state is AuthState.FAILED

    def _fail(self, reason: str, user: str | None = None) -> None:
        self.state = AuthState.FAILED
        self._server = None
        audit.info(
            "Failed authentication of %s with %s on listener %s (%s)",
            principal_name(user) if user else "an unnamed client",
            self.client_host,
            self.listener.name,
            reason,
        )
