"""`--command-config`: Java client properties translated to librdkafka's, and the option on
every client command."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from tests.helpers.certs import KEY_PASSWORD, make_pki
from tests.helpers.clients import QUIET_LOGGER

from onceflow.cli.main import build_parser
from onceflow.client.errors import ConfigError
from onceflow.client.librdkafka import librdkafka_properties
from onceflow.client.properties import jaas_credentials, read_command_config

PLAIN = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice"'
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule required"


def test_java_sasl_ssl_file_becomes_librdkafka_settings(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    props = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.jaas.config": f'{SCRAM} username="alice" password="a;b\\"c";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca),
        "ssl.enabled.protocols": "TLSv1.3,TLSv1.2",
        "ssl.endpoint.identification.algorithm": "",
    }
    assert librdkafka_properties(props) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "alice",
        "sasl.password": 'a;b"c',
        "ssl.ca.location": str(pki.ca),
        "ssl.endpoint.identification.algorithm": "none",
    }


def test_pem_keystore_loads_in_librdkafka(tmp_path: Path) -> None:
    """One PEM file with the (encrypted) key and the chain serves as both of librdkafka's
    files: librdkafka builds its TLS context, and reads them, when the client is made."""
    pki = make_pki(tmp_path)
    identity = pki.broker_encrypted
    config = librdkafka_properties(
        {
            "security.protocol": "SSL",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(identity.keystore),
            "ssl.key.password": KEY_PASSWORD,
            "ssl.truststore.location": str(pki.ca),  # no type: PEM by its content
        }
    )
    assert config["ssl.certificate.location"] == config["ssl.key.location"]
    Producer({"bootstrap.servers": "127.0.0.1:1", "logger": QUIET_LOGGER, **config}).flush(0)
    config["ssl.key.password"] = "wrong"
    with pytest.raises(KafkaException, match=r"(?i)key|ssl"):
        Producer({"bootstrap.servers": "127.0.0.1:1", "logger": QUIET_LOGGER, **config})


def test_inline_pem_and_librdkafka_names_pass_through() -> None:
    config = librdkafka_properties(
        {
            "ssl.keystore.certificate.chain": "CHAIN",
            "ssl.keystore.key": "KEY",
            "ssl.truststore.certificates": "CA",
            "sasl.jaas.config": f'{PLAIN} password="secret";',
            "sasl.password": "secret",
            "ssl.ca.location": "/etc/ca.pem",
            "enable.ssl.certificate.verification": "false",
        }
    )
    assert config == {
        "ssl.certificate.pem": "CHAIN",
        "ssl.key.pem": "KEY",
        "ssl.ca.pem": "CA",
        "sasl.username": "alice",
        "sasl.password": "secret",
        "ssl.ca.location": "/etc/ca.pem",
        "enable.ssl.certificate.verification": "false",
    }


def test_both_names_for_one_setting_must_agree() -> None:
    props = {"sasl.jaas.config": f'{PLAIN} password="pw-first";', "sasl.password": "pw-second"}
    with pytest.raises(ConfigError, match=r"sasl\.password conflicts") as caught:
        librdkafka_properties(props)
    assert "pw-" not in str(caught.value)


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"ssl.keystore.type": "JKS", "ssl.keystore.location": "x.jks"}, "JKS.*use PEM"),
        ({"ssl.truststore.type": "PKCS12", "ssl.truststore.location": "t.p12"}, "use PEM"),
        ({"ssl.keystore.location": "BINARY"}, "JKS or PKCS12.*use PEM"),
        ({"ssl.keystore.location": "/no/such/file"}, "cannot read"),
        ({"ssl.truststore.type": "PEM", "ssl.truststore.password": "x"}, "only PEM"),
    ],
)
def test_keystores_other_than_pem_are_refused(
    tmp_path: Path, props: dict[str, str], message: str
) -> None:
    binary = tmp_path / "store.jks"
    binary.write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02")
    props = {k: str(binary) if v == "BINARY" else v for k, v in props.items()}
    with pytest.raises(ConfigError, match=message):
        librdkafka_properties(props)


@pytest.mark.parametrize(
    ("jaas", "message"),
    [
        ("com.sun.security.auth.module.Krb5LoginModule required;", "not supported"),
        (f'{SCRAM} username="alice";', "username and password"),
        (f"{SCRAM} username=", "sasl.jaas.config"),
    ],
)
def test_jaas_configs_that_cannot_be_translated(jaas: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        jaas_credentials(jaas)


def test_jaas_errors_never_show_the_password() -> None:
    with pytest.raises(ConfigError) as caught:
        jaas_credentials(f'{SCRAM} password="s3cret" username')
    assert "s3cret" not in str(caught.value)


def test_read_command_config_trims_values_and_reports_a_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text("security.protocol = SASL_PLAINTEXT  \n# comment\nsasl.mechanism:PLAIN\n")
    assert read_command_config(str(path)) == {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
    }
    assert read_command_config(None) == {}
    with pytest.raises(ConfigError, match="cannot read"):
        read_command_config(str(tmp_path / "missing"))


@pytest.mark.parametrize(
    "argv",
    [
        ["topics", "list"],
        ["topics", "create", "t"],
        ["produce", "t"],
        ["consume", "t"],
        ["transactions", "list"],
        ["transactions", "abort", "--topic", "t", "--partition", "0"],
        ["acls", "--list"],
        ["users", "list"],
        ["console"],
        ["bench"],
    ],
)
def test_every_client_command_takes_command_config(argv: list[str]) -> None:
    args = build_parser().parse_args([*argv, "--command-config", "client.properties"])
    assert args.command_config == "client.properties"
