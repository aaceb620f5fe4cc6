"""TLS contexts from Kafka's PEM settings: real handshakes over loopback with the test PKI,
and every misconfiguration refused with the config key named and no secret shown."""

from __future__ import annotations

import socket
import ssl
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.certs import KEY_PASSWORD, Pki, make_pki

from onceflow.security.tls import TlsConfigError, TlsSettings, client_context, server_context

TIMEOUT_S = 10.0


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def broker_settings(pki: Pki, client_auth: str = "none", **extra: Any) -> TlsSettings:
    return TlsSettings(
        keystore_location=str(pki.broker.keystore),
        truststore_location=str(pki.ca),
        client_auth=client_auth,
        **extra,
    )


def client_settings(pki: Pki, name: str | None = None, **extra: Any) -> TlsSettings:
    if name is not None:
        extra["keystore_location"] = str(pki.clients[name].keystore)
    extra.setdefault("truststore_location", str(pki.ca))
    return TlsSettings(**extra)


@dataclass
class Outcome:
    client_error: BaseException | None = None
    server_error: BaseException | None = None
    peer: Any = None  # the client certificate the server saw (getpeercert())
    version: str | None = None

    @property
    def ok(self) -> bool:
        return self.client_error is None and self.server_error is None


def exchange(
    server: ssl.SSLContext, client: ssl.SSLContext, server_hostname: str = "localhost"
) -> Outcome:
    """One handshake and one ping-pong over loopback. With TLS 1.3 a refused client
    certificate reaches the client only at its first read, hence the round trip."""
    outcome = Outcome()
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(TIMEOUT_S)

    def serve() -> None:
        try:
            raw, _ = listener.accept()
            raw.settimeout(TIMEOUT_S)
            with server.wrap_socket(raw, server_side=True) as conn:
                outcome.peer = conn.getpeercert()
                if conn.recv(4) == b"ping":
                    conn.sendall(b"pong")
        except (OSError, ssl.SSLError) as exc:
            outcome.server_error = exc

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        raw = socket.create_connection(listener.getsockname()[:2], timeout=TIMEOUT_S)
        with client.wrap_socket(raw, server_hostname=server_hostname) as conn:
            outcome.version = conn.version()
            conn.sendall(b"ping")
            if conn.recv(4) != b"pong":
                raise ConnectionError("closed by the server")
    except (OSError, ssl.SSLError) as exc:
        outcome.client_error = exc
    finally:
        thread.join(TIMEOUT_S)
        listener.close()
    return outcome


def subject_cn(peer: Any) -> str:
    return str(next(v for rdn in peer["subject"] for k, v in rdn if k == "commonName"))


# ---- handshakes ------------------------------------------------------------------------


def test_mutual_tls_with_client_auth_required(pki: Pki) -> None:
    outcome = exchange(
        server_context(broker_settings(pki, "required")),
        client_context(client_settings(pki, "alice")),
    )
    assert outcome.ok, outcome
    assert subject_cn(outcome.peer) == "alice"


def test_client_auth_required_refuses_a_client_without_certificate(pki: Pki) -> None:
    outcome = exchange(
        server_context(broker_settings(pki, "required")), client_context(client_settings(pki))
    )
    assert outcome.server_error is not None
    assert outcome.client_error is not None


def test_client_auth_required_refuses_a_certificate_from_an_untrusted_ca(pki: Pki) -> None:
    mallory = pki.issue("mallory", "CN=mallory,O=Elsewhere", trusted=False)
    client = client_context(client_settings(pki, keystore_location=str(mallory.keystore)))
    outcome = exchange(server_context(broker_settings(pki, "required")), client)
    assert isinstance(outcome.server_error, ssl.SSLError)
    assert "certificate" in str(outcome.server_error).lower()
    assert outcome.client_error is not None


def test_client_auth_requested_accepts_clients_with_and_without_certificate(pki: Pki) -> None:
    server = server_context(broker_settings(pki, "requested"))
    anonymous = exchange(server, client_context(client_settings(pki)))
    assert anonymous.ok, anonymous
    assert not anonymous.peer
    bob = exchange(server, client_context(client_settings(pki, "bob")))
    assert bob.ok, bob
    assert subject_cn(bob.peer) == "bob"


def test_client_auth_none_does_not_ask_for_the_certificate(pki: Pki) -> None:
    outcome = exchange(
        server_context(broker_settings(pki, "none")), client_context(client_settings(pki, "alice"))
    )
    assert outcome.ok, outcome
    assert not outcome.peer


def test_a_client_that_does_not_trust_the_broker_fails(pki: Pki) -> None:
    client = client_context(client_settings(pki, truststore_location=str(pki.untrusted_ca)))
    outcome = exchange(server_context(broker_settings(pki)), client)
    assert isinstance(outcome.client_error, ssl.SSLCertVerificationError)


def test_host_name_is_checked_unless_endpoint_identification_is_off(pki: Pki) -> None:
    server = server_context(broker_settings(pki))
    assert exchange(server, client_context(client_settings(pki)), "127.0.0.1").ok
    wrong = exchange(server, client_context(client_settings(pki)), "broker.example")
    assert isinstance(wrong.client_error, ssl.SSLCertVerificationError)
    assert "broker.example" in str(wrong.client_error)
    unchecked = client_context(client_settings(pki, endpoint_identification=""))
    assert exchange(server, unchecked, "broker.example").ok


def test_encrypted_key_with_its_password(pki: Pki) -> None:
    settings = TlsSettings(
        keystore_location=str(pki.broker_encrypted.keystore), key_password=KEY_PASSWORD
    )
    assert exchange(server_context(settings), client_context(client_settings(pki))).ok


def test_librdkafka_style_separate_certificate_and_key_files(pki: Pki) -> None:
    alice = pki.clients["alice"]
    client = TlsSettings(
        certificate_location=str(alice.cert),
        key_location=str(alice.key),
        truststore_location=str(pki.ca),
    )
    outcome = exchange(server_context(broker_settings(pki, "required")), client_context(client))
    assert outcome.ok, outcome
    assert subject_cn(outcome.peer) == "alice"


def test_pem_text_keystore_and_truststore(pki: Pki, monkeypatch: pytest.MonkeyPatch) -> None:
    scratch = Path(tempfile.mkdtemp())
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    modes: list[int] = []
    original: Callable[..., None] = ssl.SSLContext.load_cert_chain

    def spy(self: ssl.SSLContext, certfile: str, *args: Any, **kwargs: Any) -> None:
        modes.append(Path(certfile).stat().st_mode & 0o777)
        original(self, certfile, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_cert_chain", spy)
    key = pki.broker_encrypted.key.read_text()
    chain = pki.broker_encrypted.chain.read_text()
    server = TlsSettings(
        keystore_key=key,
        keystore_certificate_chain=chain,
        key_password=KEY_PASSWORD,
        truststore_certificates=pki.ca.read_text(),
        client_auth="required",
    )
    client = TlsSettings(
        keystore_key=pki.clients["alice"].key.read_text(),
        keystore_certificate_chain=pki.clients["alice"].chain.read_text(),
        truststore_certificates=pki.ca.read_text(),
    )
    outcome = exchange(server_context(server), client_context(client))
    assert outcome.ok, outcome
    assert subject_cn(outcome.peer) == "alice"
    assert modes == [0o600, 0o600]
    assert list(scratch.iterdir()) == []  # the key files are gone


# ---- protocols and ciphers -------------------------------------------------------------


@pytest.mark.parametrize("old", ["TLSv1.1", "TLSv1", "SSLv3"])
def test_protocols_below_tls_1_2_are_refused(old: str) -> None:
    with pytest.raises(TlsConfigError) as info:
        TlsSettings(enabled_protocols=("TLSv1.2", old))
    assert info.value.key == "ssl.enabled.protocols"
    assert old in str(info.value)


def test_tls_1_2_is_the_floor_and_versions_follow_the_enabled_list(pki: Pki) -> None:
    assert client_context(client_settings(pki)).minimum_version == ssl.TLSVersion.TLSv1_2
    only12 = client_context(client_settings(pki, enabled_protocols=("TLSv1.2",)))
    assert only12.maximum_version == ssl.TLSVersion.TLSv1_2
    only13 = server_context(broker_settings(pki, enabled_protocols=("TLSv1.3",)))
    assert exchange(only13, only12).client_error is not None
    outcome = exchange(server_context(broker_settings(pki)), only12)
    assert outcome.ok, outcome
    assert outcome.version == "TLSv1.2"


def test_java_cipher_suite_names_are_translated(pki: Pki) -> None:
    suite = "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"
    client = client_context(
        client_settings(pki, enabled_protocols=("TLSv1.2",), cipher_suites=(suite,))
    )
    tls12 = [c["name"] for c in client.get_ciphers() if c["protocol"] == "TLSv1.2"]
    assert tls12 == ["ECDHE-ECDSA-AES256-GCM-SHA384"]
    assert exchange(server_context(broker_settings(pki)), client).ok


def test_only_tls_1_3_suites_leave_tls_1_2_without_a_cipher(pki: Pki) -> None:
    settings = client_settings(pki, cipher_suites=("TLS_AES_128_GCM_SHA256",))
    assert client_context(settings).minimum_version == ssl.TLSVersion.TLSv1_3


def test_unknown_cipher_suites_are_refused(pki: Pki) -> None:
    with pytest.raises(TlsConfigError) as info:
        client_context(client_settings(pki, cipher_suites=("TLS_NO_SUCH_SUITE",)))
    assert info.value.key == "ssl.cipher.suites"


# ---- misconfiguration ------------------------------------------------------------------


def config_error(make: Callable[[], object]) -> TlsConfigError:
    with pytest.raises(TlsConfigError) as info:
        make()
    return info.value


def test_missing_files_name_the_key(pki: Pki, tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.pem")
    error = config_error(lambda: server_context(TlsSettings(keystore_location=missing)))
    assert error.key == "ssl.keystore.location"
    assert missing in str(error)
    error = config_error(lambda: client_context(TlsSettings(truststore_location=missing)))
    assert error.key == "ssl.truststore.location"


def test_a_listener_needs_a_keystore() -> None:
    assert config_error(lambda: server_context(TlsSettings())).key == "ssl.keystore.location"


def test_pem_without_certificate_or_key(pki: Pki) -> None:
    no_cert = config_error(
        lambda: server_context(TlsSettings(keystore_location=str(pki.broker.key)))
    )
    assert no_cert.key == "ssl.keystore.location"
    assert "no certificate" in str(no_cert)
    no_key = config_error(
        lambda: server_context(TlsSettings(keystore_location=str(pki.broker.cert)))
    )
    assert "no private key" in str(no_key)
    not_ca = config_error(
        lambda: client_context(TlsSettings(truststore_location=str(pki.broker.key)))
    )
    assert not_ca.key == "ssl.truststore.location"
    assert "no certificate" in str(not_ca)
    text = config_error(lambda: client_context(TlsSettings(truststore_certificates="junk")))
    assert text.key == "ssl.truststore.certificates"


def test_key_that_does_not_match_the_certificate(pki: Pki) -> None:
    settings = TlsSettings(
        certificate_location=str(pki.clients["alice"].cert),
        key_location=str(pki.clients["bob"].key),
    )
    error = config_error(lambda: client_context(settings))
    assert "does not match" in str(error)


def test_encrypted_key_without_or_with_a_wrong_password(pki: Pki) -> None:
    keystore = str(pki.broker_encrypted.keystore)
    missing = config_error(lambda: server_context(TlsSettings(keystore_location=keystore)))
    assert missing.key == "ssl.keystore.location"
    assert "ssl.key.password is not set" in str(missing)
    wrong = TlsSettings(keystore_location=keystore, key_password="hunter2-wrong")
    error = config_error(lambda: server_context(wrong))
    assert error.key == "ssl.key.password"
    assert "wrong password" in str(error)
    assert "hunter2" not in str(error)
    assert "hunter2" not in repr(wrong)
    text = TlsSettings(
        keystore_key=pki.broker_encrypted.key.read_text(),
        keystore_certificate_chain=pki.broker_encrypted.chain.read_text(),
        key_password="hunter2-wrong",
    )
    assert config_error(lambda: server_context(text)).key == "ssl.key.password"
    assert "PRIVATE KEY" not in repr(text)


@pytest.mark.parametrize(
    ("fields", "key"),
    [
        ({"client_auth": "sometimes"}, "ssl.client.auth"),
        ({"endpoint_identification": "ldap"}, "ssl.endpoint.identification.algorithm"),
        ({"enabled_protocols": ()}, "ssl.enabled.protocols"),
        ({"enabled_protocols": ("TLSv9",)}, "ssl.enabled.protocols"),
        ({"keystore_location": "a.pem", "keystore_key": "k"}, "ssl.keystore.key"),
        ({"keystore_key": "k"}, "ssl.keystore.certificate.chain"),
        ({"certificate_location": "c.pem"}, "ssl.key.location"),
        ({"key_location": "k.pem"}, "ssl.certificate.location"),
        (
            {"truststore_location": "a.pem", "truststore_certificates": "x"},
            "ssl.truststore.certificates",
        ),
    ],
)
def test_bad_values_name_their_key(fields: dict[str, Any], key: str) -> None:
    assert config_error(lambda: TlsSettings(**fields)).key == key


def test_values_are_case_insensitive() -> None:
    settings = TlsSettings(client_auth="REQUIRED", endpoint_identification="HTTPS")
    assert (settings.client_auth, settings.endpoint_identification) == ("required", "https")
