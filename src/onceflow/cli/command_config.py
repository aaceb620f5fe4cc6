"""`--command-config FILE`: the client security properties every client command takes.

As with Kafka's tools, the file is a Java properties file (`security.protocol`, `ssl.*`,
`sasl.*`). Most users already have one written for Java clients, so Java's names are
translated to librdkafka's here (a PEM truststore becomes `ssl.ca.location`, a PLAIN or
SCRAM `sasl.jaas.config` becomes `sasl.username`/`sasl.password`); librdkafka's own names
pass through untouched. Keystores and truststores must be PEM: librdkafka reads no JKS,
and a PKCS#12 file is refused too rather than half supported.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path

from onceflow.cli.common import CliError
from onceflow.config import ConfigError, read_properties
from onceflow.security.client_config import ClientSecurity
from onceflow.security.jaas import PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE, parse_jaas_config

__all__ = [
    "add_command_config_option",
    "client_security",
    "jaas_credentials",
    "librdkafka_properties",
    "read_command_config",
    "security_properties",
    "wire_security",
]

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


def add_command_config_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--command-config",
        metavar="FILE",
        help="client security properties (security.protocol, ssl.*, sasl.*) as for "
        "Kafka's tools; Java's or librdkafka's names, PEM files only",
    )


def read_command_config(path: str | None) -> dict[str, str]:
    """The file's properties, values trimmed as Kafka trims them; {} without a file."""
    if path is None:
        return {}
    try:
        return {k: v.strip() for k, v in read_properties(path).items()}
    except ConfigError as exc:
        raise CliError(str(exc)) from None


def security_properties(args: argparse.Namespace) -> dict[str, str]:
    """librdkafka settings from the command's `--command-config` (none without it)."""
    return librdkafka_properties(read_command_config(getattr(args, "command_config", None)))


def wire_security(args: argparse.Namespace) -> ClientSecurity | None:
    """Security for Onceflow's own protocol client (kafka_wire), from `--command-config`."""
    path = getattr(args, "command_config", None)
    return client_security(read_command_config(path), path)


def client_security(props: Mapping[str, str], source: str | None) -> ClientSecurity | None:
    """`props` as kafka_wire's security (None without properties); errors name the file."""
    if not props:
        return None
    try:
        return ClientSecurity.from_properties(props)
    except ValueError as exc:  # names the key, never a password
        raise CliError(f"{source}: {exc}") from None


def jaas_credentials(jaas: str) -> tuple[str, str]:
    """The username and password of a PLAIN or SCRAM `sasl.jaas.config`."""
    try:
        entry = parse_jaas_config(jaas)
    except ValueError as exc:
        raise CliError(f"sasl.jaas.config: {exc}") from None
    if entry.login_module not in (PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE):
        raise CliError(
            f"sasl.jaas.config: {entry.login_module} is not supported; use PlainLoginModule "
            "or ScramLoginModule (or sasl.username and sasl.password)"
        )
    if entry.username is None or entry.password is None:
        raise CliError("sasl.jaas.config needs both username and password")
    return entry.username, entry.password


def _is_pem(path: str) -> bool:
    try:
        with Path(path).open("rb") as file:
            return b"-----BEGIN " in file.read(64 * 1024)
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from None


def _check_pem(props: Mapping[str, str], store: str) -> str | None:
    """The PEM file of a keystore or truststore, if one is set; a clear error if not PEM."""
    if props.get(f"ssl.{store}.password"):
        raise CliError(
            f"ssl.{store}.password cannot be set: only PEM stores are read, as with "
            f"ssl.{store}.type=PEM (a private key's password is ssl.key.password)"
        )
    location = props.get(f"ssl.{store}.location") or None
    kind = props.get(f"ssl.{store}.type", "").upper()
    if kind not in ("", "PEM") or (location is not None and not kind and not _is_pem(location)):
        shown = kind or "JKS or PKCS12"
        raise CliError(
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
            raise CliError(f"{key} conflicts with the Java setting for it: set one of them")
        out[key] = value
    return out
