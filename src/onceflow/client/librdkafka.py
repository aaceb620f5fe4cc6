"""confluent-kafka's side of the client settings: client properties (Java's names or
librdkafka's) as librdkafka's settings, and librdkafka's errors as text.

Most users already have a properties file written for Java clients, so Java's names are
translated here (a PEM truststore becomes `ssl.ca.location`, a PLAIN or SCRAM
`sasl.jaas.config` becomes `sasl.username`/`sasl.password`); librdkafka's own names pass
through untouched. Keystores and truststores must be PEM: librdkafka reads no JKS, and a
PKCS#12 file is refused too rather than half supported.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from onceflow.client.errors import ConfigError
from onceflow.client.properties import jaas_credentials

__all__ = ["describe_kafka_error", "librdkafka_properties"]

# Java client settings with no librdkafka counterpart, whose job the translation does or
# that only tune the JVM's TLS: dropped, since librdkafka refuses unknown names.
_JAVA_ONLY = frozenset(
    {
        "ssl.keystore.type",
        "ssl.keystore.password",
        "ssl.truststore.type",
        "ssl.truststore.password",
        "ssl.protocol",
        "ssl.enabled.protocols",
        "ssl.keymanager.algorithm",
        "ssl.trustmanager.algorithm",
        "ssl.secure.random.implementation",
        "sasl.jaas.config",
    }
)
_JAVA_STORES = ("ssl.keystore.", "ssl.truststore.")


def _is_pem(path: str) -> bool:
    try:
        with Path(path).open("rb") as file:
            return b"-----BEGIN " in file.read(64 * 1024)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None


def _check_pem(props: Mapping[str, str], store: str) -> str | None:
    """The PEM file of a keystore or truststore, if one is set; a clear error if not PEM."""
    if props.get(f"ssl.{store}.password"):
        raise ConfigError(
            f"ssl.{store}.password cannot be set: only PEM stores are read, as with "
            f"ssl.{store}.type=PEM (a private key's password is ssl.key.password)"
        )
    location = props.get(f"ssl.{store}.location") or None
    kind = props.get(f"ssl.{store}.type", "").upper()
    if kind not in ("", "PEM") or (location is not None and not kind and not _is_pem(location)):
        shown = kind or "JKS or PKCS12"
        raise ConfigError(
            f"ssl.{store}.type {shown} is not supported: use PEM (ssl.{store}.type=PEM with "
            f"a PEM ssl.{store}.location; convert with keytool -exportcert / openssl pkcs12)"
        )
    return location


_RENAMED = {
    "ssl.keystore.certificate.chain": "ssl.certificate.pem",
    "ssl.keystore.key": "ssl.key.pem",
    "ssl.truststore.certificates": "ssl.ca.pem",
}


def _translated(props: Mapping[str, str]) -> dict[str, str]:
    """librdkafka's settings for the Java names in `props`."""
    out: dict[str, str] = {}
    keystore = _check_pem(props, "keystore")
    if keystore is not None:
        # One PEM file holds the chain and the key; OpenSSL reads each from the same file.
        out["ssl.certificate.location"] = out["ssl.key.location"] = keystore
    truststore = _check_pem(props, "truststore")
    if truststore is not None:
        out["ssl.ca.location"] = truststore
    out.update({native: props[java] for java, native in _RENAMED.items() if props.get(java)})
    if props.get("sasl.jaas.config"):
        out["sasl.username"], out["sasl.password"] = jaas_credentials(props["sasl.jaas.config"])
    if props.get("ssl.endpoint.identification.algorithm") == "":
        out["ssl.endpoint.identification.algorithm"] = "none"  # Java's '' turns checking off
    return out


def librdkafka_properties(props: Mapping[str, str]) -> dict[str, str]:
    """librdkafka settings for client properties written with Java's or librdkafka's names.

    A file may mix both; a setting given under both names must agree (never shown: it may
    be a password). Other keys pass through for librdkafka, which refuses names it lacks.
    """
    out = {
        key: value
        for key, value in props.items()
        if key not in _JAVA_ONLY and key not in _RENAMED and not key.startswith(_JAVA_STORES)
    }
    for key, value in _translated(props).items():
        if key in out and out[key] != value and key != "ssl.endpoint.identification.algorithm":
            raise ConfigError(f"{key} conflicts with the Java setting for it: set one of them")
        out[key] = value
    return out


def describe_kafka_error(exc: BaseException) -> str:
    """The readable part of a confluent-kafka exception (its KafkaError's text)."""
    args = getattr(exc, "args", ())
    if args and hasattr(args[0], "str"):
        text = str(args[0].str())
        # A broker error without a message reads "(null)": Kafka's error name says more.
        return str(args[0].name()) if text in ("", "(null)") else text
    return str(exc)
