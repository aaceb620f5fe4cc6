"""Client security properties in Java's and librdkafka's dialects, and the client side of
SASL (PLAIN, SCRAM-SHA-256/512) against scramp's server."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import pytest
from scramp import ScramMechanism  # type: ignore[import-untyped]
from tests.helpers.certs import KEY_PASSWORD, Pki, make_pki

from onceflow.security.client_config import ClientConfigError, ClientSecurity
from onceflow.security.sasl_client import SaslClient, SaslClientError
from onceflow.security.tls import TlsConfigError

SCRAM_JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="alice" password="alice-secret";'
)
PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="bob" password="bob-secret";'
)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def config_error(props: dict[str, str]) -> ClientConfigError:
    with pytest.raises(ClientConfigError) as info:
        ClientSecurity.from_properties(props)
    return info.value


# ---- protocols -------------------------------------------------------------------------


def test_no_properties_mean_plaintext() -> None:
    security = ClientSecurity.from_properties({"bootstrap.servers": "x:9092", "acks": "all"})
    assert security.protocol == "PLAINTEXT"
    assert not security.uses_tls and not security.uses_sasl
    assert security.ssl_context() is None
    assert security.sasl_client() is None


@pytest.mark.parametrize(
    ("value", "tls", "sasl"),
    [("ssl", True, False), ("sasl_plaintext", False, True), ("SASL_SSL", True, True)],
)
def test_security_protocol_is_case_insensitive(value: str, tls: bool, sasl: bool) -> None:
    props = {"security.protocol": value, "sasl.mechanism": "PLAIN", "sasl.jaas.config": PLAIN_JAAS}
    security = ClientSecurity.from_properties(props)
    assert (security.uses_tls, security.uses_sasl) == (tls, sasl)


def test_unknown_security_protocol() -> None:
    error = config_error({"security.protocol": "KERBEROS"})
    assert error.key == "security.protocol"
    assert "SASL_SSL" in str(error)


# ---- TLS in both dialects --------------------------------------------------------------


def test_java_pem_keystore_and_truststore(pki: Pki) -> None:
    props = {
        "security.protocol": "SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.broker_encrypted.keystore),
        "ssl.key.password": KEY_PASSWORD,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca),
        "ssl.endpoint.identification.algorithm": "",
    }
    security = ClientSecurity.from_properties(props)
    assert security.tls is not None
    assert security.tls.keystore_location == str(pki.broker_encrypted.keystore)
    assert security.tls.endpoint_identification == ""
    context = security.ssl_context()
    assert isinstance(context, ssl.SSLContext)
    assert not context.check_hostname
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert security.ssl_context() is context  # made once, shared by connections


def test_librdkafka_names(pki: Pki) -> None:
    alice = pki.clients["alice"]
    props = {
        "security.protocol": "SSL",
        "ssl.ca.location": str(pki.ca),
        "ssl.certificate.location": str(alice.cert),
        "ssl.key.location": str(alice.key),
        "ssl.endpoint.identification.algorithm": "none",
        "enable.ssl.certificate.verification": "true",
    }
    security = ClientSecurity.from_properties(props)
    assert security.tls is not None
    assert security.tls.truststore_location == str(pki.ca)
    assert security.tls.certificate_location == str(alice.cert)
    assert security.tls.endpoint_identification == ""
    assert security.ssl_context() is not None


def test_pem_text_in_both_dialects(pki: Pki) -> None:
    alice = pki.clients["alice"]
    java = {
        "security.protocol": "SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.key": alice.key.read_text(),
        "ssl.keystore.certificate.chain": alice.chain.read_text(),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.certificates": pki.ca.read_text(),
    }
    native = {
        "security.protocol": "SSL",
        "ssl.key.pem": alice.key.read_text(),
        "ssl.certificate.pem": alice.chain.read_text(),
        "ssl.ca.pem": pki.ca.read_text(),
    }
    for props in (java, native):
        security = ClientSecurity.from_properties(props)
        assert security.tls is not None
        assert security.tls.keystore_key == alice.key.read_text().strip()
        assert security.tls.truststore_certificates == pki.ca.read_text().strip()
        assert security.ssl_context() is not None


def test_host_name_check_is_on_by_default(pki: Pki) -> None:
    security = ClientSecurity.from_properties(
        {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca)}
    )
    context = security.ssl_context()
    assert context is not None and context.check_hostname


def test_probe_and_no_truststore_use_the_system_cas() -> None:
    for props in ({}, {"ssl.ca.location": "probe"}):
        security = ClientSecurity.from_properties({"security.protocol": "SSL", **props})
        assert security.tls is not None and security.tls.truststore_location is None


def test_protocol_list_and_cipher_suites() -> None:
    security = ClientSecurity.from_properties(
        {
            "security.protocol": "SSL",
            "ssl.enabled.protocols": "TLSv1.3, TLSv1.2",
            "ssl.cipher.suites": "TLS_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        }
    )
    assert security.tls is not None
    assert security.tls.enabled_protocols == ("TLSv1.3", "TLSv1.2")
    assert security.tls.cipher_suites == (
        "TLS_AES_128_GCM_SHA256",
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    )
    with pytest.raises(TlsConfigError):
        ClientSecurity.from_properties(
            {"security.protocol": "SSL", "ssl.enabled.protocols": "TLSv1.1"}
        )


def test_tls_settings_are_ignored_without_tls(pki: Pki) -> None:
    security = ClientSecurity.from_properties(
        {"security.protocol": "PLAINTEXT", "ssl.keystore.type": "JKS"}
    )
    assert security.tls is None


@pytest.mark.parametrize("store", ["keystore", "truststore"])
def test_stores_must_be_pem(pki: Pki, tmp_path: Path, store: str) -> None:
    assert config_error({"security.protocol": "SSL", f"ssl.{store}.type": "JKS"}).key == (
        f"ssl.{store}.type"
    )
    binary = tmp_path / "store.p12"
    binary.write_bytes(b"\x30\x82\x0a\x00 not pem")
    error = config_error({"security.protocol": "SSL", f"ssl.{store}.location": str(binary)})
    assert error.key == f"ssl.{store}.location"
    assert "not a PEM file" in str(error)


def test_store_passwords_are_refused_with_pem(pki: Pki) -> None:
    props = {
        "security.protocol": "SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.broker.keystore),
        "ssl.keystore.password": "store-secret",
    }
    error = config_error(props)
    assert error.key == "ssl.keystore.password"
    assert "ssl.key.password" in str(error)
    assert "store-secret" not in str(error)
    error = config_error(
        {
            "security.protocol": "SSL",
            "ssl.truststore.location": str(pki.ca),
            "ssl.truststore.password": "x",
        }
    )
    assert error.key == "ssl.truststore.password"


def test_two_names_for_one_setting_must_agree(pki: Pki) -> None:
    props = {
        "security.protocol": "SSL",
        "ssl.truststore.location": str(pki.ca),
        "ssl.ca.location": str(pki.untrusted_ca),
    }
    assert config_error(props).key == "ssl.ca.location"
    props["ssl.ca.location"] = str(pki.ca)
    assert ClientSecurity.from_properties(props).tls is not None


def test_bad_tls_values(pki: Pki, tmp_path: Path) -> None:
    error = config_error(
        {"security.protocol": "SSL", "enable.ssl.certificate.verification": "maybe"}
    )
    assert error.key == "enable.ssl.certificate.verification"
    with pytest.raises(TlsConfigError) as info:
        ClientSecurity.from_properties(
            {"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "ldap"}
        )
    assert info.value.key == "ssl.endpoint.identification.algorithm"
    missing = ClientSecurity.from_properties(
        {"security.protocol": "SSL", "ssl.ca.location": str(tmp_path / "gone.pem")}
    )
    with pytest.raises(TlsConfigError) as info:
        missing.ssl_context()
    assert "gone.pem" in str(info.value)


def test_wrong_key_password_is_never_shown(pki: Pki) -> None:
    security = ClientSecurity.from_properties(
        {
            "security.protocol": "SSL",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(pki.broker_encrypted.keystore),
            "ssl.key.password": "not-the-password",
        }
    )
    with pytest.raises(TlsConfigError) as info:
        security.ssl_context()
    assert info.value.key == "ssl.key.password"
    assert "not-the-password" not in str(info.value)
    assert "not-the-password" not in repr(security)


# ---- SASL in both dialects -------------------------------------------------------------


def test_java_jaas_config() -> None:
    security = ClientSecurity.from_properties(
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "scram-sha-256",
            "sasl.jaas.config": SCRAM_JAAS,
        }
    )
    assert (security.mechanism, security.username) == ("SCRAM-SHA-256", "alice")
    client = security.sasl_client()
    assert client is not None and client.mechanism == "SCRAM-SHA-256"
    assert security.sasl_client() is not client  # one exchange per connection
    assert "alice-secret" not in repr(security)


def test_librdkafka_username_and_password() -> None:
    security = ClientSecurity.from_properties(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "PLAIN",
            "sasl.username": "bob",
            "sasl.password": "bob-secret",
        }
    )
    client = security.sasl_client()
    assert client is not None
    assert client.first() == b"\0bob\0bob-secret"


def test_both_dialects_must_name_the_same_credentials() -> None:
    props = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": SCRAM_JAAS,
        "sasl.username": "alice",
        "sasl.password": "alice-secret",
    }
    assert ClientSecurity.from_properties(props).username == "alice"
    assert config_error({**props, "sasl.username": "mallory"}).key == "sasl.username"
    error = config_error({**props, "sasl.password": "guess"})
    assert error.key == "sasl.password"
    assert "guess" not in str(error) and "alice-secret" not in str(error)


@pytest.mark.parametrize(
    ("props", "key", "words"),
    [
        ({"sasl.jaas.config": PLAIN_JAAS}, "sasl.mechanism", "GSSAPI"),
        ({"sasl.mechanism": "GSSAPI", "sasl.jaas.config": PLAIN_JAAS}, "sasl.mechanism", "GSSAPI"),
        ({"sasl.mechanism": "PLAIN"}, "sasl.jaas.config", "username"),
        ({"sasl.mechanism": "PLAIN", "sasl.username": "bob"}, "sasl.jaas.config", "password"),
        (
            {"sasl.mechanism": "PLAIN", "sasl.jaas.config": "PlainLoginModule required"},
            "sasl.jaas.config",
            "semi-colon",
        ),
        (
            {
                "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer."
                "OAuthBearerLoginModule required;",
            },
            "sasl.jaas.config",
            "not supported",
        ),
        (
            {
                "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule "
                'required username="bob";',
            },
            "sasl.jaas.config",
            "password",
        ),
    ],
)
def test_bad_sasl_settings(props: dict[str, str], key: str, words: str) -> None:
    error = config_error({"security.protocol": "SASL_SSL", **props})
    assert error.key == key
    assert words in str(error)


# ---- SaslClient ------------------------------------------------------------------------


def scram_server(mechanism: str, password: str, users: list[str] | None = None) -> Any:
    """scramp's server holding one credential; `users` records who asked for it."""
    m = ScramMechanism(mechanism)
    info = m.make_auth_info(password, iteration_count=4096)

    def lookup(username: str) -> Any:
        if users is not None:
            users.append(username)
        return info

    return m.make_server(lookup)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_exchange_completes_against_scramp_server(mechanism: str) -> None:
    users: list[str] = []
    client = SaslClient(mechanism, "alice", "alice-secret")
    server = scram_server(mechanism, "alice-secret", users)
    server.set_client_first(client.first().decode())
    final = client.step(server.get_server_first().encode())
    assert final is not None and not client.complete
    server.set_client_final(final.decode())  # raises unless the proof is right
    assert client.step(server.get_server_final().encode()) is None
    assert client.complete
    assert users == ["alice"]


def test_scram_wrong_password_fails_at_the_server_final_message() -> None:
    client = SaslClient("SCRAM-SHA-256", "alice", "wrong")
    server = scram_server("SCRAM-SHA-256", "alice-secret")
    server.set_client_first(client.first().decode())
    final = client.step(server.get_server_first().encode())
    assert final is not None
    with pytest.raises(Exception, match="client keys"):
        server.set_client_final(final.decode())
    with pytest.raises(SaslClientError, match="invalid-proof"):
        client.step(server.get_server_final().encode())
    assert not client.complete


def test_scram_server_must_prove_it_knows_the_credential() -> None:
    """A server that does not hold alice's credential cannot forge server-final: the
    exchange fails even though the server says nothing is wrong."""
    client = SaslClient("SCRAM-SHA-256", "alice", "alice-secret")
    impostor = scram_server("SCRAM-SHA-256", "alice-secret")
    impostor.set_client_first(client.first().decode())
    final = client.step(impostor.get_server_first().encode())
    assert final is not None
    forged = b"v=" + b"A" * 43 + b"="
    with pytest.raises(SaslClientError, match="did not prove"):
        client.step(forged)
    assert not client.complete


def test_scram_server_nonce_must_extend_the_client_nonce() -> None:
    client = SaslClient("SCRAM-SHA-512", "alice", "alice-secret")
    client.first()
    with pytest.raises(SaslClientError, match="nonce"):
        client.step(b"r=someone-elses-nonce,s=QSXCR+Q6sek8bf92,i=4096")


def test_scram_garbage_from_the_server() -> None:
    client = SaslClient("SCRAM-SHA-256", "alice", "alice-secret")
    client.first()
    with pytest.raises(SaslClientError):
        client.step(b"\xff\xfe")


def test_plain_is_one_token_and_an_empty_answer() -> None:
    client = SaslClient("PLAIN", "bob", "bob-secret")
    assert client.first() == b"\0bob\0bob-secret"
    assert not client.complete
    assert client.step(b"") is None
    assert client.complete


def test_plain_refuses_a_server_token() -> None:
    client = SaslClient("PLAIN", "bob", "bob-secret")
    client.first()
    with pytest.raises(SaslClientError, match="unexpected"):
        client.step(b"challenge")


def test_calls_out_of_order_are_refused() -> None:
    client = SaslClient("SCRAM-SHA-256", "alice", "alice-secret")
    with pytest.raises(SaslClientError, match="step"):
        client.step(b"r=x")
    client.first()
    with pytest.raises(SaslClientError, match="first"):
        client.first()
    plain = SaslClient("PLAIN", "bob", "x")
    plain.first()
    plain.step(b"")
    with pytest.raises(SaslClientError, match="complete"):
        plain.step(b"")


@pytest.mark.parametrize(
    ("mechanism", "username", "password", "words"),
    [
        ("GSSAPI", "alice", "x", "not supported"),
        ("PLAIN", "", "x", "empty"),
        ("PLAIN", "al\0ice", "x", "NUL"),
    ],
)
def test_bad_client_credentials(mechanism: str, username: str, password: str, words: str) -> None:
    with pytest.raises(SaslClientError, match=words):
        SaslClient(mechanism, username, password)
