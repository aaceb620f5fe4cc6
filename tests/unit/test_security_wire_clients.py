"""Onceflow's own client over TLS and SASL: the blocking `Connection` and `Cluster` (the
CLI's, the console's), and the brokers' asyncio `AsyncConnection`, against a small fake
broker that speaks ApiVersions, SaslHandshake, SaslAuthenticate (scramp's SCRAM server)
and Metadata, optionally behind TLS with the test PKI."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import secrets
import socket
import ssl
import threading
import time
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kio.static.primitive import i16, i32, i32Timedelta, i64Timedelta
from scramp import ScramException, ScramMechanism  # type: ignore[import-untyped]
from tests.helpers.certs import Pki, make_pki

from onceflow.client import core
from onceflow.client.aio import AsyncConnection
from onceflow.client.blocking import Connection
from onceflow.client.cluster import Cluster
from onceflow.client.errors import ClientError, KafkaApiError, Unreachable
from onceflow.client.wire import SIZE
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import (
    build,
    decode_request,
    encode_response,
    nested,
    request_type,
    response_type,
)
from onceflow.security.client_config import ClientSecurity
from onceflow.security.tls import TlsSettings, server_context

TIMEOUT_S = 10.0
HANDSHAKE, AUTHENTICATE, VERSIONS, METADATA = 17, 36, 18, 3
USERS = {"alice": "alice-secret", "bob": "bob-secret"}
METADATA_ALL: dict[str, Any] = {
    "topics": None,
    "allow_auto_topic_creation": False,
    "include_cluster_authorized_operations": False,
    "include_topic_authorized_operations": False,
}
SCRAM_FAILED = "Authentication failed during authentication due to invalid credentials"


@dataclass
class _ConnectionState:
    mechanism: str | None = None
    scram: Any = None
    user: str = ""


@dataclass
class FakeBroker:
    """One listener on loopback, a thread per connection. `seen` records every request's
    (api key, version) in order; `principals` every user that authenticated."""

    tls: ssl.SSLContext | None = None
    mechanisms: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    session_lifetime_ms: int = 0
    forge_server_final: bool = False
    seen: list[tuple[int, int]] = field(default_factory=list)
    principals: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.bootstrap = f"127.0.0.1:{self.port}"
        self._threads: list[threading.Thread] = []
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self._accepting.start()

    def close(self) -> None:
        with contextlib.suppress(OSError):  # wakes the blocked accept() (Linux)
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._accepting.join(TIMEOUT_S)

    def _accept(self) -> None:
        while True:
            try:
                raw, _ = self._listener.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(raw,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _serve(self, raw: socket.socket) -> None:
        raw.settimeout(TIMEOUT_S)
        with contextlib.ExitStack() as stack:
            conn = stack.enter_context(raw)
            try:
                if self.tls is not None:
                    conn = stack.enter_context(self.tls.wrap_socket(raw, server_side=True))
                state = _ConnectionState()
                while True:
                    head = _recv_exact(conn, SIZE.size)
                    (size,) = SIZE.unpack(head)
                    if not 0 < size < 1 << 20:  # a TLS ClientHello on a plaintext port
                        return
                    header, body = decode_request(_recv_exact(conn, size))
                    self.seen.append((header.api_key, header.api_version))
                    response, close = self._answer(state, header.api_key, header.api_version, body)
                    payload = encode_response(header, response)
                    conn.sendall(SIZE.pack(len(payload)) + payload)
                    if close:
                        return
            except (OSError, EOFError):
                return

    def _answer(self, state: _ConnectionState, key: int, version: int, body: Any) -> Any:
        cls = response_type(key, version)
        if key == VERSIONS:
            ranges = {VERSIONS: (0, 3), METADATA: (1, 8), HANDSHAKE: (1, 1), AUTHENTICATE: (0, 2)}
            entry = nested(VERSIONS, version, "ApiVersion")
            keys = tuple(
                entry(api_key=i16(k), min_version=i16(lo), max_version=i16(hi))
                for k, (lo, hi) in ranges.items()
            )
            return build(cls, error_code=ErrorCode.none, api_keys=keys), False
        if key == HANDSHAKE:
            if body.mechanism not in self.mechanisms:
                return build(
                    cls, error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=self.mechanisms
                ), True
            state.mechanism, state.scram = body.mechanism, None
            return build(cls, error_code=ErrorCode.none, mechanisms=self.mechanisms), False
        if key == AUTHENTICATE:
            return self._authenticate(state, cls, bytes(body.auth_bytes))
        if key == METADATA:
            broker = nested(METADATA, version, "MetadataResponseBroker")
            return build(
                cls,
                throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
                brokers=(broker(node_id=i32(1), host="127.0.0.1", port=i32(self.port), rack=None),),
                cluster_id="fake",
                controller_id=i32(1),
                topics=(),
            ), False
        raise AssertionError(f"unexpected api key {key}")

    def _authenticate(self, state: _ConnectionState, cls: Any, token: bytes) -> Any:
        lifetime = i64Timedelta.parse(datetime.timedelta(milliseconds=self.session_lifetime_ms))

        def ok(reply: bytes, user: str | None = None) -> Any:
            if user is not None:
                self.principals.append(user)
            return build(
                cls,
                error_code=ErrorCode.none,
                error_message=None,
                auth_bytes=reply,
                session_lifetime=lifetime,
            ), False

        def failed(message: str) -> Any:
            return build(
                cls,
                error_code=ErrorCode.sasl_authentication_failed,
                error_message=message,
                auth_bytes=b"",
            ), True

        if state.mechanism == "PLAIN":
            _, user, password = token.decode().split("\0")
            if USERS.get(user) != password:
                return failed("Authentication failed: Invalid username or password")
            return ok(b"", user)
        if state.scram is None:
            mechanism = ScramMechanism(state.mechanism)

            def credential(user: str) -> Any:
                state.user = user
                password = USERS.get(user, secrets.token_hex(8))
                return mechanism.make_auth_info(password, iteration_count=4096)

            state.scram = mechanism.make_server(credential)
            state.scram.set_client_first(token.decode())
            return ok(state.scram.get_server_first().encode())
        try:
            state.scram.set_client_final(token.decode())
        except ScramException:
            return failed(f"{SCRAM_FAILED} with SASL mechanism {state.mechanism}")
        final = state.scram.get_server_final().encode()
        if self.forge_server_final:
            final = b"v=" + b"A" * 43 + b"="
        return ok(final, state.user)


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = conn.recv(n - len(out))
        if not chunk:
            raise EOFError
        out += chunk
    return bytes(out)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def make_broker() -> Iterator[Any]:
    brokers: list[FakeBroker] = []

    def make(**kwargs: Any) -> FakeBroker:
        broker = FakeBroker(**kwargs)
        brokers.append(broker)
        return broker

    yield make
    for broker in brokers:
        broker.close()


def tls_broker_context(pki: Pki, client_auth: str = "none") -> ssl.SSLContext:
    return server_context(
        TlsSettings(
            keystore_location=str(pki.broker.keystore),
            truststore_location=str(pki.ca),
            client_auth=client_auth,
        )
    )


def security(protocol: str, pki: Pki | None = None, /, **props: str) -> ClientSecurity:
    base = {"security.protocol": protocol}
    if pki is not None:
        base["ssl.truststore.type"] = "PEM"
        base["ssl.truststore.location"] = str(pki.ca)
    return ClientSecurity.from_properties({**base, **props})


def scram(user: str, password: str, mechanism: str = "SCRAM-SHA-256") -> dict[str, str]:
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user}" password="{password}";'
    )
    return {"sasl.mechanism": mechanism, "sasl.jaas.config": jaas}


class FakeClock:
    """Replaces a module's `time`: monotonic() reads `now`, sleep() really sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0

    def module(self) -> types.SimpleNamespace:
        return types.SimpleNamespace(monotonic=lambda: self.now, sleep=time.sleep)


# ---- the CLI's blocking client ---------------------------------------------------------


def test_cli_sasl_ssl_scram_authenticates_after_api_versions(pki: Pki, make_broker: Any) -> None:
    broker = make_broker(tls=tls_broker_context(pki))
    conn = Connection(
        "127.0.0.1",
        broker.port,
        TIMEOUT_S,
        security("SASL_SSL", pki, **scram("alice", "alice-secret")),
    )
    try:
        assert broker.principals == ["alice"]
        response = conn.call(ApiKey.METADATA, **METADATA_ALL)
        assert [b.node_id for b in response.brokers] == [1]
    finally:
        conn.close()
    assert broker.seen == [
        (VERSIONS, 0),
        (HANDSHAKE, 1),
        (AUTHENTICATE, 2),
        (AUTHENTICATE, 2),
        (METADATA, 8),
    ]


def test_cli_sasl_plaintext_plain_with_librdkafka_names(make_broker: Any) -> None:
    broker = make_broker()
    props = {"sasl.mechanisms": "PLAIN", "sasl.username": "bob", "sasl.password": "bob-secret"}
    with Cluster(broker.bootstrap, TIMEOUT_S, security("SASL_PLAINTEXT", **props)) as cluster:
        assert [n.node_id for n in cluster.brokers()] == [1]
    assert broker.principals == ["bob"]
    assert [key for key, _ in broker.seen] == [VERSIONS, HANDSHAKE, AUTHENTICATE, METADATA]


def test_cli_wrong_password_gets_the_brokers_reason(make_broker: Any) -> None:
    broker = make_broker()
    with pytest.raises(KafkaApiError) as info:
        Cluster(broker.bootstrap, TIMEOUT_S, security("SASL_PLAINTEXT", **scram("alice", "guess")))
    assert info.value.code == ErrorCode.sasl_authentication_failed
    message = str(info.value)
    assert f"SASL_AUTHENTICATION_FAILED: {SCRAM_FAILED}" in message
    assert "guess" not in message
    assert broker.principals == []
    assert METADATA not in [key for key, _ in broker.seen]


def test_cli_mechanism_the_broker_does_not_enable(make_broker: Any) -> None:
    broker = make_broker(mechanisms=("PLAIN",))
    props = scram("alice", "alice-secret", "SCRAM-SHA-512")
    with pytest.raises(KafkaApiError) as info:
        Connection("127.0.0.1", broker.port, TIMEOUT_S, security("SASL_PLAINTEXT", **props))
    assert info.value.code == ErrorCode.unsupported_sasl_mechanism
    assert "does not enable SCRAM-SHA-512 (it enables PLAIN)" in str(info.value)


def test_cli_refuses_a_broker_that_cannot_prove_the_credential(make_broker: Any) -> None:
    broker = make_broker(forge_server_final=True)
    with pytest.raises(KafkaApiError, match="did not prove"):
        Connection(
            "127.0.0.1",
            broker.port,
            TIMEOUT_S,
            security("SASL_PLAINTEXT", **scram("alice", "alice-secret")),
        )


def test_cli_ssl_with_client_certificate(pki: Pki, make_broker: Any) -> None:
    broker = make_broker(tls=tls_broker_context(pki, "required"))
    alice = pki.clients["alice"]
    props = {"ssl.certificate.location": str(alice.cert), "ssl.key.location": str(alice.key)}
    with Cluster(broker.bootstrap, TIMEOUT_S, security("SSL", pki, **props)) as cluster:
        assert [n.node_id for n in cluster.brokers()] == [1]
    assert [key for key, _ in broker.seen] == [VERSIONS, METADATA]


@pytest.mark.parametrize(
    ("client", "reason"),
    [
        (None, "the broker requires a client certificate"),
        ("mallory", "the broker does not trust this client's certificate"),
    ],
)
def test_cli_client_certificate_refused_by_the_broker(
    pki: Pki, make_broker: Any, client: str | None, reason: str
) -> None:
    broker = make_broker(tls=tls_broker_context(pki, "required"))
    props = {}
    if client is not None:
        mallory = pki.issue(client, f"CN={client}", trusted=False)
        props["ssl.keystore.location"] = str(mallory.keystore)
    with (
        pytest.raises(ClientError, match=reason),
        Cluster(broker.bootstrap, TIMEOUT_S, security("SSL", pki, **props)) as cluster,
    ):
        cluster.brokers()  # with TLS 1.3 the refusal arrives at the first read
    assert broker.seen == []


def test_cli_untrusted_broker_certificate(pki: Pki, make_broker: Any) -> None:
    broker = make_broker(tls=tls_broker_context(pki))
    untrusted = security("SSL", None, **{"ssl.ca.location": str(pki.untrusted_ca)})
    with pytest.raises(
        ClientError, match=r"TLS handshake with 127.0.0.1:\d+ failed: certificate verify"
    ):
        Connection("127.0.0.1", broker.port, TIMEOUT_S, untrusted)


def test_cli_tls_to_a_plaintext_listener(pki: Pki, make_broker: Any) -> None:
    broker = make_broker()
    with pytest.raises(ClientError, match=r"TLS handshake with .* failed"):
        Connection("127.0.0.1", broker.port, TIMEOUT_S, security("SSL", pki))


def test_cli_bad_tls_setting_is_reported_before_connecting(pki: Pki, make_broker: Any) -> None:
    broker = make_broker(tls=tls_broker_context(pki))
    bad = security("SSL", None, **{"ssl.ca.location": str(pki.directory / "nope.pem")})
    with pytest.raises(ClientError, match=r"ssl\.truststore\.location: no such file"):
        Cluster(broker.bootstrap, TIMEOUT_S, bad)
    assert broker.seen == []


def test_cli_renews_a_limited_session_before_it_expires(
    pki: Pki, make_broker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    monkeypatch.setattr(core, "time", clock.module())
    broker = make_broker(session_lifetime_ms=60_000)
    conn = Connection(
        "127.0.0.1",
        broker.port,
        TIMEOUT_S,
        security("SASL_PLAINTEXT", **scram("alice", "alice-secret")),
    )
    try:
        conn.call(ApiKey.METADATA, **METADATA_ALL)
        clock.now += 50.0  # within the lifetime, short of Kafka's 85% mark
        conn.call(ApiKey.METADATA, **METADATA_ALL)
        assert broker.principals == ["alice"]
        clock.now += 2.0  # 52 s of 60: past 85%
        conn.call(ApiKey.METADATA, **METADATA_ALL)
        assert broker.principals == ["alice", "alice"]
    finally:
        conn.close()
    keys = [key for key, _ in broker.seen]
    assert keys == [
        VERSIONS,
        HANDSHAKE,
        AUTHENTICATE,
        AUTHENTICATE,
        METADATA,
        METADATA,
        HANDSHAKE,
        AUTHENTICATE,
        AUTHENTICATE,
        METADATA,
    ]


# ---- the brokers' asyncio link ---------------------------------------------------------


def metadata_request() -> Any:
    return build(request_type(METADATA, 8), **METADATA_ALL)


def broker_request(
    conn: AsyncConnection, times: int = 1, clock: FakeClock | None = None, advance_s: float = 0.0
) -> list[Any]:
    async def run() -> list[Any]:
        answers = []
        try:
            for _ in range(times):
                answers.append(await conn.request(METADATA, 8, metadata_request()))
                if clock is not None:
                    clock.now += advance_s
        finally:
            conn.close()
        return answers

    return asyncio.run(run())


def test_broker_link_sasl_ssl_scram_without_api_versions(pki: Pki, make_broker: Any) -> None:
    broker = make_broker(tls=tls_broker_context(pki, "requested"))
    link = AsyncConnection(
        "127.0.0.1",
        broker.port,
        "replica-2",
        TIMEOUT_S,
        security("SASL_SSL", pki, **scram("bob", "bob-secret", "SCRAM-SHA-512")),
    )
    [answer] = broker_request(link)
    assert [b.node_id for b in answer.brokers] == [1]
    assert broker.principals == ["bob"]
    assert broker.seen == [(HANDSHAKE, 1), (AUTHENTICATE, 2), (AUTHENTICATE, 2), (METADATA, 8)]


def test_broker_link_authentication_failure_is_unreachable_with_the_reason(
    make_broker: Any,
) -> None:
    broker = make_broker()
    link = AsyncConnection(
        "127.0.0.1",
        broker.port,
        "replica-2",
        TIMEOUT_S,
        security("SASL_PLAINTEXT", **scram("bob", "hunter2")),
    )
    with pytest.raises(Unreachable) as info:
        broker_request(link)
    assert f"SASL authentication failed: SASL_AUTHENTICATION_FAILED: {SCRAM_FAILED}" in str(
        info.value
    )
    assert "hunter2" not in str(info.value)
    assert METADATA not in [key for key, _ in broker.seen]


def test_broker_link_refuses_an_untrusted_broker(pki: Pki, make_broker: Any) -> None:
    broker = make_broker(tls=tls_broker_context(pki))
    link = AsyncConnection(
        "127.0.0.1",
        broker.port,
        "replica-2",
        TIMEOUT_S,
        security("SSL", None, **{"ssl.ca.location": str(pki.untrusted_ca)}),
    )
    with pytest.raises(Unreachable, match="certificate verify failed"):
        broker_request(link)


def test_broker_link_without_the_required_client_certificate(pki: Pki, make_broker: Any) -> None:
    broker = make_broker(tls=tls_broker_context(pki, "required"))
    link = AsyncConnection("127.0.0.1", broker.port, "replica-2", TIMEOUT_S, security("SSL", pki))
    with pytest.raises(Unreachable):
        broker_request(link)
    assert broker.seen == []


def test_broker_link_renews_a_limited_session(
    make_broker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    monkeypatch.setattr(core, "time", clock.module())
    broker = make_broker(session_lifetime_ms=10_000)
    link = AsyncConnection(
        "127.0.0.1",
        broker.port,
        "replica-2",
        TIMEOUT_S,
        security(
            "SASL_PLAINTEXT",
            **{
                "sasl.mechanism": "PLAIN",
                "sasl.username": "alice",
                "sasl.password": "alice-secret",
            },
        ),
    )
    broker_request(link, times=3, clock=clock, advance_s=9.0)
    keys = [key for key, _ in broker.seen]
    assert keys == [
        HANDSHAKE,
        AUTHENTICATE,
        METADATA,
        HANDSHAKE,
        AUTHENTICATE,
        METADATA,
        HANDSHAKE,
        AUTHENTICATE,
        METADATA,
    ]
    assert broker.principals == ["alice"] * 3
