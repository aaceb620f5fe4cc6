"""Bad input on secured listeners closes only the connection that sent it: malformed SASL
tokens, a SCRAM exchange with a wrong nonce, requests before authentication, a TLS
handshake of garbage, a plaintext client on a TLS port, and a TLS client without the
certificate the listener requires. After each, the broker serves a good client."""

from __future__ import annotations

import os
import socket
import ssl
from collections.abc import Iterator

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v8.request import MetadataRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from scramp import ScramClient  # type: ignore[import-untyped]

from onceflow.errors import ErrorCode
from tests.helpers.secure import ADMIN, SecureBroker, add_scram_user, start_secure_broker
from tests.helpers.wire import RawConnection

_METADATA = MetadataRequest(
    topics=None,
    allow_auto_topic_creation=False,
    include_cluster_authorized_operations=False,
    include_topic_authorized_operations=False,
)


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    broker = start_secure_broker(tmp_path_factory.mktemp("secure"))
    try:
        add_scram_user(broker, "alice", "alice-secret")
        yield broker
    finally:
        broker.process.stop()
        errors = broker.process.internal_errors()
        assert not errors, "\n".join(errors[:3])


def _tls(secure: SecureBroker) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(secure.pki.ca))


def _still_serving(secure: SecureBroker) -> None:
    """A good client authenticates and gets an answer."""
    with RawConnection(secure.bootstrap("SASL_PLAINTEXT")) as conn:
        handshake = conn.call(SaslHandshakeRequest(mechanism="PLAIN"))
        assert handshake.error_code == ErrorCode.none
        user, password = ADMIN
        token = f"\0{user}\0{password}".encode()
        answer = conn.call(SaslAuthenticateRequest(auth_bytes=token))
        assert answer.error_code == ErrorCode.none
        assert conn.call(_METADATA).brokers


def _authenticate(conn: RawConnection, token: bytes) -> object:
    return conn.call(SaslAuthenticateRequest(auth_bytes=token))


def test_a_request_before_authentication_closes_the_connection(secure: SecureBroker) -> None:
    with RawConnection(secure.bootstrap("SASL_PLAINTEXT")) as conn:
        assert conn.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
        conn.send_request(_METADATA)
        assert conn.closed_by_peer()
    _still_serving(secure)


@pytest.mark.parametrize(
    "token",
    [
        b"",
        b"\0",
        b"\0\0",
        b"alice",
        b"\0alice\0pw\0extra",
        b"\xff\xfe\0\xff\0\xff",
        os.urandom(300),
    ],
)
def test_malformed_plain_tokens_fail_and_close_only_that_connection(
    secure: SecureBroker, token: bytes
) -> None:
    with RawConnection(secure.bootstrap("SASL_PLAINTEXT")) as conn:
        assert conn.call(SaslHandshakeRequest(mechanism="PLAIN")).error_code == ErrorCode.none
        answer = _authenticate(conn, token)
        assert answer.error_code == ErrorCode.sasl_authentication_failed  # type: ignore[attr-defined]
        assert conn.closed_by_peer()
    _still_serving(secure)


def test_a_garbage_sasl_frame_closes_the_connection(secure: SecureBroker) -> None:
    with RawConnection(secure.bootstrap("SASL_PLAINTEXT")) as conn:
        assert conn.call(SaslHandshakeRequest(mechanism="SCRAM-SHA-256")).error_code == 0
        # A SaslAuthenticate frame whose body is cut short.
        conn.send_bytes(b"\x00\x00\x00\x0c\x00\x24\x00\x02\x00\x00\x00\x01\x00\x01\x00\x10")
        assert conn.closed_by_peer()
    _still_serving(secure)


def test_an_unsupported_mechanism_is_refused_with_the_enabled_ones(secure: SecureBroker) -> None:
    with RawConnection(secure.bootstrap("SASL_SSL"), tls=_tls(secure)) as conn:
        answer = conn.call(SaslHandshakeRequest(mechanism="GSSAPI"))
        assert answer.error_code == ErrorCode.unsupported_sasl_mechanism
        assert set(answer.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
        assert conn.closed_by_peer()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_a_scram_exchange_with_a_wrong_nonce_fails(secure: SecureBroker, mechanism: str) -> None:
    with RawConnection(secure.bootstrap("SASL_SSL"), tls=_tls(secure)) as conn:
        assert conn.call(SaslHandshakeRequest(mechanism=mechanism)).error_code == ErrorCode.none
        client = ScramClient([mechanism], "alice", "alice-secret")
        first = _authenticate(conn, client.get_client_first().encode())
        assert first.error_code == ErrorCode.none  # type: ignore[attr-defined]
        server_first = first.auth_bytes.decode()  # type: ignore[attr-defined]
        client.set_server_first(server_first)
        final = client.get_client_final()
        nonce = server_first.split("r=", 1)[1].split(",", 1)[0]
        tampered = final.replace(nonce, nonce[:-4] + "AAAA")
        assert tampered != final
        answer = _authenticate(conn, tampered.encode())
        assert answer.error_code == ErrorCode.sasl_authentication_failed  # type: ignore[attr-defined]
        assert conn.closed_by_peer()
    _still_serving(secure)


def test_the_right_scram_exchange_authenticates(secure: SecureBroker) -> None:
    """The raw exchange above is a real one: unaltered, it succeeds."""
    with RawConnection(secure.bootstrap("SASL_SSL"), tls=_tls(secure)) as conn:
        assert conn.call(SaslHandshakeRequest(mechanism="SCRAM-SHA-256")).error_code == 0
        client = ScramClient(["SCRAM-SHA-256"], "alice", "alice-secret")
        first = _authenticate(conn, client.get_client_first().encode())
        client.set_server_first(first.auth_bytes.decode())  # type: ignore[attr-defined]
        answer = _authenticate(conn, client.get_client_final().encode())
        assert answer.error_code == ErrorCode.none  # type: ignore[attr-defined]
        client.set_server_final(answer.auth_bytes.decode())  # type: ignore[attr-defined]
        assert conn.call(_METADATA).brokers


@pytest.mark.parametrize("listener", ["SSL", "SASL_SSL"])
def test_a_tls_handshake_of_garbage_closes_only_that_connection(
    secure: SecureBroker, listener: str
) -> None:
    with socket.create_connection(("127.0.0.1", secure.ports[listener]), timeout=10) as sock:
        sock.sendall(os.urandom(2048))
        sock.settimeout(10)
        try:
            while sock.recv(4096):
                pass  # an alert, perhaps, then EOF
        except ConnectionResetError:
            pass
    assert secure.logged("SSL handshake failed")
    _still_serving(secure)


def test_a_plaintext_client_on_a_tls_port_is_disconnected(secure: SecureBroker) -> None:
    with RawConnection(secure.bootstrap("SASL_SSL")) as conn:
        conn.send_request(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
        assert conn.closed_by_peer()
    _still_serving(secure)


def test_a_tls_client_without_the_required_certificate_is_refused(secure: SecureBroker) -> None:
    def connect_and_ask() -> None:
        with RawConnection(secure.bootstrap("SSL"), tls=_tls(secure)) as conn:
            # TLS 1.3 reports a missing client certificate only at the first read.
            conn.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"))

    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        connect_and_ask()
    _still_serving(secure)
