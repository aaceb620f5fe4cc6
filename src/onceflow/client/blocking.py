"""The blocking driver: one socket to one broker (TLS when the security says so), requests
answered one at a time, in order, over a `ConnectionCore`.

The CLI, the console and the demo use it (through `Cluster`, mostly), for the admin APIs
confluent-kafka lacks or mishandles, so they work against any Kafka cluster. Versions are
negotiated: ApiVersions once, then per API the highest version both sides speak. With SASL,
the connection authenticates right after ApiVersions (SaslHandshake v1, then
SaslAuthenticate rounds) and again on the same socket before a limited session (KIP-368)
runs out, as Kafka's clients do.
"""

from __future__ import annotations

import select
import socket
import ssl
from collections.abc import Sequence
from typing import Any

from onceflow import __version__
from onceflow.client.core import ConnectionCore, format_address
from onceflow.client.errors import ConfigError, KafkaApiError, Unreachable, UnreadableResponse
from onceflow.client.sasl import SASL_AUTHENTICATE, SASL_HANDSHAKE, SaslFailure
from onceflow.client.wire import Blob, api_name
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import build, request_type
from onceflow.protocol.onceflow_apis import CLIENT_SOFTWARE_NAME, OWN_API_KEYS
from onceflow.security.client_config import ClientSecurity

OWN_VERSIONS_VERSION = 3  # the first ApiVersions that names the client software

__all__ = ["DEFAULT_CLIENT_ID", "DEFAULT_TIMEOUT_S", "Connection", "tls_context"]

DEFAULT_CLIENT_ID = "onceflow-cli"  # what brokers have always logged for Onceflow's tools
DEFAULT_TIMEOUT_S = 30.0
_IOV_MAX = 1024  # pieces one sendmsg may gather (Linux's IOV_MAX)

# TLS alerts a broker sends when it refuses this client's certificate. With TLS 1.3 they
# arrive after the handshake, at the first read, so they can surface on any request.
_TLS_ALERTS = {
    "TLSV13_ALERT_CERTIFICATE_REQUIRED": "the broker requires a client certificate "
    "(ssl.keystore.location, or ssl.certificate.location and ssl.key.location)",
    "TLSV1_ALERT_UNKNOWN_CA": "the broker does not trust this client's certificate",
    "SSLV3_ALERT_BAD_CERTIFICATE": "the broker refused this client's certificate",
    "SSLV3_ALERT_CERTIFICATE_UNKNOWN": "the broker refused this client's certificate",
}


def tls_context(security: ClientSecurity | None) -> ssl.SSLContext | None:
    """The client TLS context of `security` (None without TLS); a bad setting is a
    ConfigError naming the key (never a password)."""
    if security is None:
        return None
    try:
        return security.ssl_context()
    except ValueError as exc:  # TlsConfigError
        raise ConfigError(str(exc)) from None


class Connection:
    """One blocking connection to one broker."""

    def __init__(
        self,
        host: str,
        port: int,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        security: ClientSecurity | None = None,
        client_id: str = DEFAULT_CLIENT_ID,
    ) -> None:
        self.address = format_address(host, port)
        self.security = security
        self.core = ConnectionCore(self.address, client_id, lenient=True)
        self._own_versions_asked = False
        context = tls_context(security)
        try:
            sock = socket.create_connection((host, port), timeout=timeout_s)
        except OSError as exc:
            raise Unreachable(f"cannot connect to {self.address}: {_reason(exc)}") from None
        if context is not None:
            sock = self._tls_handshake(sock, context, host)
        self._sock = sock
        self._answered = False  # no response yet: a TLS refusal would show up now
        if security is not None and security.uses_sasl:
            try:
                self._authenticate()
            except Exception:
                self.close()
                raise

    def close(self) -> None:
        self._sock.close()
        self.core.closed()

    def reusable(self) -> bool:
        """Whether a later request may use this connection: no answer is awaited, and the
        broker has not closed it (a broker sends nothing unasked, so anything to read on an
        idle connection is its end: a restart, an idle timeout)."""
        if self.core.awaiting or self._sock.fileno() < 0:
            return False
        try:
            readable, _, _ = select.select([self._sock], [], [], 0)
        except (OSError, ValueError):
            return False
        return not readable

    # ---- versions --------------------------------------------------------------------

    @property
    def versions(self) -> dict[int, tuple[int, int]]:
        """The broker's ApiVersions, asked once."""
        if self.core.versions is None:
            request = self.core.api_versions_request()
            self.core.learn_versions(self._round_trip(ApiKey.API_VERSIONS, 0, request))
        assert self.core.versions is not None
        return self.core.versions

    def version_for(self, api_key: int) -> int:
        """The highest version of an API both this client and the broker speak."""
        if api_key in OWN_API_KEYS:
            self.learn_own_versions()
        _ = self.versions
        return self.core.version_for(api_key)

    def learn_own_versions(self) -> None:
        """Onceflow's own APIs, which an Onceflow broker lists only to a client that names
        itself as Onceflow's (ApiVersions v3, KIP-511's software name), asked once. A broker
        that cannot say (not Onceflow, or older than Kafka 2.4) offers none."""
        versions = self.versions
        if self._own_versions_asked:
            return
        self._own_versions_asked = True
        request = build(
            request_type(ApiKey.API_VERSIONS, OWN_VERSIONS_VERSION),
            client_software_name=CLIENT_SOFTWARE_NAME,
            client_software_version=__version__,
        )
        try:
            answer = self._round_trip(ApiKey.API_VERSIONS, OWN_VERSIONS_VERSION, request)
        except (KafkaApiError, UnreadableResponse):
            return
        if answer.error_code != ErrorCode.none:
            return
        for entry in answer.api_keys:
            if entry.api_key in OWN_API_KEYS:
                versions[int(entry.api_key)] = (int(entry.min_version), int(entry.max_version))

    # ---- requests --------------------------------------------------------------------

    def call(self, api_key: int, /, **fields: Any) -> Any:
        """Send one request at the best common version; return the decoded response.

        Fields the chosen version lacks are dropped, so one call serves every version.
        """
        version = self.version_for(api_key)
        return self.call_at(api_key, version, build(request_type(api_key, version), **fields))

    def call_at(self, api_key: int, version: int, request: Any, blobs: Sequence[Blob] = ()) -> Any:
        """Send a request already built for `version` (nested entities are per version).
        `blobs` go where the request holds `wire.placeholder(i)`, sent without a copy."""
        if self.core.reauthentication_due():
            self._authenticate()
        return self._round_trip(api_key, version, request, blobs)

    def _round_trip(
        self, api_key: int, version: int, request: Any, blobs: Sequence[Blob] = ()
    ) -> Any:
        try:
            if blobs:
                self._send_parts(self.core.request_parts(api_key, version, request, blobs))
            else:
                self._sock.sendall(self.core.request(api_key, version, request))
            frame = self._recv_exact(self.core.response_size(self._recv_exact(4)))
        except TimeoutError:
            raise Unreachable(
                f"{self.address} did not answer {api_name(api_key)} in time"
            ) from None
        except OSError as exc:
            raise Unreachable(
                f"lost the connection to {self.address}: {_reason(exc)}{self._tls_hint(exc)}"
            ) from None
        self._answered = True
        return self.core.response(frame)

    def _send_parts(self, parts: list[Blob]) -> None:
        """Send the pieces of one frame in order, gathered by the kernel (TLS has no
        gathering send: joined, one copy)."""
        if isinstance(self._sock, ssl.SSLSocket):
            self._sock.sendall(b"".join(parts))
            return
        views = [memoryview(p).cast("B") for p in parts if len(p)]
        while views:
            sent = self._sock.sendmsg(views[:_IOV_MAX])
            while sent:
                if sent >= len(views[0]):
                    sent -= len(views.pop(0))
                else:
                    views[0], sent = views[0][sent:], 0

    def _recv_exact(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self._sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed by the broker")
            out += chunk
        return bytes(out)

    # ---- security --------------------------------------------------------------------

    def _tls_handshake(
        self, sock: socket.socket, context: ssl.SSLContext, host: str
    ) -> ssl.SSLSocket:
        try:
            return context.wrap_socket(sock, server_hostname=host)
        except TimeoutError:
            problem = "no answer in time"
        except ssl.SSLCertVerificationError as exc:
            problem = f"certificate verify failed: {exc.verify_message or exc.reason}"
        except ssl.SSLError as exc:
            problem = _reason(exc)
            if exc.reason in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE"):
                problem += " (is it a TLS listener?)"
        except OSError as exc:
            problem = f"{_reason(exc)} (is it a TLS listener, and does it accept this client?)"
        sock.close()
        raise Unreachable(f"TLS handshake with {self.address} failed: {problem}")

    def _tls_hint(self, exc: OSError) -> str:
        """With TLS 1.3 a broker refuses a client certificate (or its absence) after the
        handshake; the client may see only the closed connection, not the alert saying why."""
        if self._answered or self.security is None or self.security.tls is None:
            return ""
        if isinstance(exc, ssl.SSLError) and exc.reason in _TLS_ALERTS:
            return ""  # the alert arrived: _reason already said it
        tls = self.security.tls
        if not (tls.has_keystore or tls.certificate_location):
            return f"; perhaps {_TLS_ALERTS['TLSV13_ALERT_CERTIFICATE_REQUIRED']}"
        return f"; perhaps {_TLS_ALERTS['TLSV1_ALERT_UNKNOWN_CA']}"

    def _authenticate(self) -> None:
        """SaslHandshake and SaslAuthenticate rounds (after ApiVersions, as Kafka's clients
        do); again on the same connection when a session the broker limits runs out."""
        assert self.security is not None
        client = self.security.sasl_client()
        assert client is not None  # uses_sasl: ClientSecurity holds a mechanism and user
        self.version_for(SASL_HANDSHAKE)
        exchange = self.core.authentication(client, self.version_for(SASL_AUTHENTICATE))
        try:
            request = next(exchange)
            while True:
                response = self._round_trip(request.api_key, request.version, request.body)
                request = exchange.send(response)
        except StopIteration:
            pass
        except SaslFailure as exc:
            raise KafkaApiError(
                exc.code,
                f"SASL authentication of {client.mechanism} user {self.security.username!r} "
                f"with {self.address} failed: {exc}",
            ) from None


def _reason(exc: OSError) -> str:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return _TLS_ALERTS.get(exc.reason, f"TLS error {exc.reason}")
    return exc.strerror or str(exc) or type(exc).__name__
