"""A client's security settings from Kafka client properties, in either dialect.

The same `--command-config` file feeds confluent-kafka (librdkafka) and Onceflow's own
clients, and users write it with Java's names or librdkafka's, so both are read:

    security.protocol                      PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL
    ssl.truststore.location (type PEM)     ssl.ca.location (file, hashed directory, probe)
    ssl.truststore.certificates            ssl.ca.pem
    ssl.keystore.location (type PEM)       ssl.certificate.location + ssl.key.location
    ssl.keystore.certificate.chain + .key  ssl.certificate.pem + ssl.key.pem
    ssl.key.password                       the private key's password, in both dialects
    ssl.endpoint.identification.algorithm  https (default) or ''/none
    sasl.mechanism                         sasl.mechanisms
    sasl.jaas.config (username, password)  sasl.username, sasl.password

Stores must be PEM. `ssl.keystore.password` and `ssl.truststore.password` protect JKS or
PKCS#12 stores (librdkafka: PKCS#12 only); Kafka refuses them with PEM, and so does this.
Other keys are ignored: they are for librdkafka or the JVM.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from pathlib import Path

from onceflow.security.jaas import LOGIN_MODULES, parse_jaas_config
from onceflow.security.sasl_client import MECHANISMS, SaslClient
from onceflow.security.tls import DEFAULT_PROTOCOLS, TlsSettings, client_context

__all__ = ["SECURITY_PROTOCOLS", "ClientConfigError", "ClientSecurity"]

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_PEM_SNIFF_BYTES = 64 * 1024
_LIST_SEPARATORS = re.compile(r"[,:\s]+")


class ClientConfigError(ValueError):
    """A client property with a value that cannot work; `key` names it."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key


class ClientSecurity:
    """How a client reaches a listener: TLS settings for SSL and SASL_SSL, a mechanism and
    credentials for SASL_*. Build one per configuration and share it between connections:
    the TLS context is made once, a SaslClient per connection."""

    def __init__(
        self,
        protocol: str = "PLAINTEXT",
        tls: TlsSettings | None = None,
        mechanism: str | None = None,
        username: str | None = None,
        password: str | None = None,
    ) -> None:
        self.protocol = protocol.strip().upper()
        if self.protocol not in SECURITY_PROTOCOLS:
            raise ClientConfigError(
                "security.protocol",
                f"{protocol!r} is not one of {', '.join(SECURITY_PROTOCOLS)}",
            )
        self.tls = (tls or TlsSettings()) if self.uses_tls else None
        self.mechanism: str | None = None
        self.username: str | None = None
        self._password: str | None = None
        if self.uses_sasl:
            self.mechanism = _mechanism(mechanism)
            if not username or password is None:
                raise ClientConfigError(
                    "sasl.jaas.config",
                    f"{self.protocol} needs a username and a password: set sasl.jaas.config "
                    "(username=... password=...) or sasl.username and sasl.password",
                )
            self.username, self._password = username, password
        self._context: ssl.SSLContext | None = None

    def __repr__(self) -> str:
        user = f", {self.mechanism} as {self.username!r}" if self.uses_sasl else ""
        return f"ClientSecurity({self.protocol}{user})"

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> ClientSecurity:
        """Read client properties (Java's or librdkafka's names); unknown keys are ignored.
        Raises ValueError (ClientConfigError, TlsConfigError) naming the key at fault."""
        protocol = props.get("security.protocol", "").strip() or "PLAINTEXT"
        upper = protocol.upper()
        tls = _tls_settings(props) if upper in ("SSL", "SASL_SSL") else None
        mechanism = username = password = None
        if upper.startswith("SASL_"):
            mechanism = _pick(props, "sasl.mechanism", "sasl.mechanisms")
            username, password = _credentials(props)
        return cls(protocol, tls, mechanism, username, password)

    def identity(self) -> tuple[object, ...]:
        """Equal for equal settings: connections made with one serve the other."""
        return (self.protocol, self.tls, self.mechanism, self.username, self._password)

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def ssl_context(self) -> ssl.SSLContext | None:
        """The client TLS context (made on first use, then shared), or None without TLS.
        Raises TlsConfigError when a file or password does not work."""
        if self.tls is None:
            return None
        if self._context is None:
            self._context = client_context(self.tls)
        return self._context

    def sasl_client(self) -> SaslClient | None:
        """A fresh exchange for one connection (or one re-authentication), or None."""
        if self.mechanism is None or self.username is None or self._password is None:
            return None
        return SaslClient(self.mechanism, self.username, self._password)


# ---- TLS -------------------------------------------------------------------------------


def _tls_settings(props: Mapping[str, str]) -> TlsSettings:
    keystore = _pem_store(props, "keystore")
    truststore = _pem_store(props, "truststore")
    for store in ("keystore", "truststore"):
        if _value(props, f"ssl.{store}.password") is not None:
            hint = "; the private key's password is ssl.key.password" if store == "keystore" else ""
            raise ClientConfigError(
                f"ssl.{store}.password", f"cannot be set with a PEM {store}{hint}"
            )
    ca_location = _value(props, "ssl.ca.location")
    if ca_location == "probe":  # librdkafka: the system's CAs, as with no truststore at all
        ca_location = None
    return TlsSettings(
        keystore_location=keystore,
        keystore_certificate_chain=_pick(
            props, "ssl.keystore.certificate.chain", "ssl.certificate.pem"
        ),
        keystore_key=_pick(props, "ssl.keystore.key", "ssl.key.pem"),
        key_password=props.get("ssl.key.password") or None,
        certificate_location=_value(props, "ssl.certificate.location"),
        key_location=_value(props, "ssl.key.location"),
        truststore_location=_one_of(
            ("ssl.truststore.location", truststore), ("ssl.ca.location", ca_location)
        ),
        truststore_certificates=_pick(props, "ssl.truststore.certificates", "ssl.ca.pem"),
        enabled_protocols=_list(props, "ssl.enabled.protocols") or DEFAULT_PROTOCOLS,
        cipher_suites=_list(props, "ssl.cipher.suites"),
        endpoint_identification=_identification(props),
        verify_certificates=_boolean(props, "enable.ssl.certificate.verification", True),
    )


def _pem_store(props: Mapping[str, str], store: str) -> str | None:
    """A keystore or truststore location, refused unless PEM: by ssl.<store>.type, or,
    with no type given, by its content (librdkafka's ssl.keystore.location is PKCS#12)."""
    location = _value(props, f"ssl.{store}.location")
    kind = (_value(props, f"ssl.{store}.type") or "").upper()
    if kind and kind != "PEM":
        raise ClientConfigError(
            f"ssl.{store}.type", f"{kind} is not supported: use PEM (ssl.{store}.type=PEM)"
        )
    if location is not None and not kind and not _looks_pem(location):
        raise ClientConfigError(
            f"ssl.{store}.location",
            f"{location} is not a PEM file (JKS and PKCS#12 stores are not supported: "
            f"convert it to PEM and set ssl.{store}.type=PEM)",
        )
    return location


def _looks_pem(location: str) -> bool:
    """True unless the file exists and holds no PEM armour (a missing file is reported
    later, by the TLS layer, with the key that names it)."""
    try:
        with Path(location).open("rb") as f:
            return b"-----BEGIN " in f.read(_PEM_SNIFF_BYTES)
    except OSError:
        return True


def _identification(props: Mapping[str, str]) -> str:
    value = props.get("ssl.endpoint.identification.algorithm", "https").strip()
    return "" if value.lower() == "none" else value  # Java: ''; librdkafka: none


# ---- SASL ------------------------------------------------------------------------------


def _mechanism(mechanism: str | None) -> str:
    if mechanism is None:
        raise ClientConfigError(
            "sasl.mechanism",
            f"not set, and Kafka's default (GSSAPI) is not supported: use {', '.join(MECHANISMS)}",
        )
    upper = mechanism.strip().upper()
    if upper not in MECHANISMS:
        raise ClientConfigError(
            "sasl.mechanism", f"{mechanism} is not supported: use {', '.join(MECHANISMS)}"
        )
    return upper


def _credentials(props: Mapping[str, str]) -> tuple[str | None, str | None]:
    """sasl.username and sasl.password (librdkafka), or the options of a PLAIN or SCRAM
    sasl.jaas.config (Java). With both, they must agree. Messages never show a password."""
    username, password = _value(props, "sasl.username"), props.get("sasl.password")
    jaas = _value(props, "sasl.jaas.config")
    if jaas is None:
        return username, password
    try:
        entry = parse_jaas_config(jaas)
    except ValueError as exc:
        raise ClientConfigError("sasl.jaas.config", str(exc)) from None
    if entry.login_module not in set(LOGIN_MODULES.values()):
        raise ClientConfigError(
            "sasl.jaas.config",
            f"{entry.login_module} is not supported: use "
            f"{' or '.join(sorted(set(LOGIN_MODULES.values())))}",
        )
    if entry.username is None or entry.password is None:
        raise ClientConfigError("sasl.jaas.config", "needs both username and password options")
    if username is not None and username != entry.username:
        raise ClientConfigError("sasl.username", "names another user than sasl.jaas.config")
    if password is not None and password != entry.password:
        raise ClientConfigError("sasl.password", "differs from the password in sasl.jaas.config")
    return entry.username, entry.password


# ---- values ----------------------------------------------------------------------------


def _value(props: Mapping[str, str], key: str) -> str | None:
    """A property's trimmed value; None when absent or empty (as Kafka reads '')."""
    value = props.get(key, "").strip()
    return value or None


def _pick(props: Mapping[str, str], java: str, librdkafka: str) -> str | None:
    return _one_of((java, _value(props, java)), (librdkafka, _value(props, librdkafka)))


def _one_of(first: tuple[str, str | None], second: tuple[str, str | None]) -> str | None:
    """The value of whichever of two names for one setting is set; both only if equal."""
    if first[1] is not None and second[1] is not None and first[1] != second[1]:
        raise ClientConfigError(second[0], f"conflicts with {first[0]}: set one of them")
    return first[1] if first[1] is not None else second[1]


def _list(props: Mapping[str, str], key: str) -> tuple[str, ...] | None:
    value = _value(props, key)
    return None if value is None else tuple(n for n in _LIST_SEPARATORS.split(value) if n)


def _boolean(props: Mapping[str, str], key: str, default: bool) -> bool:
    value = (_value(props, key) or str(default)).lower()
    if value not in ("true", "false"):
        raise ClientConfigError(key, f"{value!r} is not true or false")
    return value == "true"
