"""TLS contexts from Kafka's PEM settings, for the broker's listeners and for clients.

Kafka's names and meanings: a keystore is one PEM file holding a PKCS#8 private key and its
certificate chain (`ssl.keystore.type=PEM`, `ssl.keystore.location`), or the same as PEM
text (`ssl.keystore.key`, `ssl.keystore.certificate.chain`); `ssl.key.password` decrypts
the key; a truststore is a PEM file or text of CA certificates. librdkafka's separate
`ssl.certificate.location` and `ssl.key.location` files are accepted too.

OpenSSL reports most loading problems as "PEM lib", so the PEM text is inspected first and
every failure becomes a `TlsConfigError` that names the config key and the problem, never a
password. Python loads key and chain only from files: PEM text is written to a private
temporary file that is removed as soon as OpenSSL has read it. TLS 1.2 is the floor always.
"""

from __future__ import annotations

import contextlib
import os
import re
import ssl
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "CLIENT_AUTH_MODES",
    "DEFAULT_PROTOCOLS",
    "TlsConfigError",
    "TlsSettings",
    "client_context",
    "server_context",
]

DEFAULT_PROTOCOLS = ("TLSv1.2", "TLSv1.3")
_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_REFUSED = frozenset({"SSLv2", "SSLv3", "TLS", "TLSv1", "TLSv1.0", "TLSv1.1"})
#: ssl.client.auth -> how the server treats a client's certificate.
CLIENT_AUTH_MODES = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}
_IDENTIFICATION = {"https": True, "": False}

# Kafka configs name cipher suites as Java (IANA) does; OpenSSL wants its own names. The
# TLS 1.2 AEAD suites, which are the ones worth enabling, are translated; other names go to
# OpenSSL as given. TLS 1.3 suites cannot be restricted from Python (OpenSSL enables all
# three), so they are accepted and only decide whether TLS 1.2 is left any suite at all.
_IANA_TO_OPENSSL = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256": "DHE-RSA-AES128-GCM-SHA256",
    "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384": "DHE-RSA-AES256-GCM-SHA384",
}
_TLS13_SUITES = frozenset(
    {
        "TLS_AES_128_GCM_SHA256",
        "TLS_AES_256_GCM_SHA384",
        "TLS_CHACHA20_POLY1305_SHA256",
        "TLS_AES_128_CCM_SHA256",
        "TLS_AES_128_CCM_8_SHA256",
    }
)

_CERTIFICATE = re.compile(rb"-----BEGIN (?:X509 |TRUSTED )?CERTIFICATE-----")
_PRIVATE_KEY = re.compile(rb"-----BEGIN (?:[A-Z]+ )*PRIVATE KEY-----")
_ENCRYPTED = re.compile(rb"-----BEGIN ENCRYPTED PRIVATE KEY-----|Proc-Type: 4,ENCRYPTED")


class TlsConfigError(ValueError):
    """A TLS setting that cannot work; `key` is the Kafka config key at fault."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


@dataclass(frozen=True)
class TlsSettings:
    """One side's TLS settings, with Kafka's meanings; every field is optional."""

    keystore_location: str | None = None  # ssl.keystore.location (type PEM): key + chain
    keystore_certificate_chain: str | None = None  # ssl.keystore.certificate.chain (PEM)
    keystore_key: str | None = field(default=None, repr=False)  # ssl.keystore.key (PEM)
    key_password: str | None = field(default=None, repr=False)  # ssl.key.password
    certificate_location: str | None = None  # librdkafka's ssl.certificate.location
    key_location: str | None = None  # librdkafka's ssl.key.location
    truststore_location: str | None = None  # ssl.truststore.location: CA file or directory
    truststore_certificates: str | None = None  # ssl.truststore.certificates (PEM)
    client_auth: str = "none"  # ssl.client.auth: none | requested | required
    enabled_protocols: tuple[str, ...] = DEFAULT_PROTOCOLS  # ssl.enabled.protocols
    cipher_suites: tuple[str, ...] | None = None  # ssl.cipher.suites
    endpoint_identification: str = "https"  # ssl.endpoint.identification.algorithm
    verify_certificates: bool = True  # librdkafka's enable.ssl.certificate.verification

    def __post_init__(self) -> None:
        auth = self.client_auth.strip().lower()
        if auth not in CLIENT_AUTH_MODES:
            raise TlsConfigError(
                "ssl.client.auth", f"{self.client_auth!r} is not one of none, requested, required"
            )
        object.__setattr__(self, "client_auth", auth)
        algorithm = self.endpoint_identification.strip().lower()
        if algorithm not in _IDENTIFICATION:
            raise TlsConfigError(
                "ssl.endpoint.identification.algorithm",
                f"{self.endpoint_identification!r} is not supported: "
                "'https' checks the host name, '' does not",
            )
        object.__setattr__(self, "endpoint_identification", algorithm)
        _versions(self.enabled_protocols)  # refuse a bad list now, not at the first connection
        _one_source(
            ("ssl.keystore.location", self.keystore_location),
            ("ssl.keystore.key", self.keystore_key),
            ("ssl.certificate.location", self.certificate_location),
        )
        _both_or_neither(
            ("ssl.keystore.key", self.keystore_key),
            ("ssl.keystore.certificate.chain", self.keystore_certificate_chain),
        )
        _both_or_neither(
            ("ssl.certificate.location", self.certificate_location),
            ("ssl.key.location", self.key_location),
        )
        _one_source(
            ("ssl.truststore.location", self.truststore_location),
            ("ssl.truststore.certificates", self.truststore_certificates),
        )

    @property
    def has_keystore(self) -> bool:
        return bool(self.keystore_location or self.keystore_key or self.certificate_location)

    @property
    def has_truststore(self) -> bool:
        return bool(self.truststore_location or self.truststore_certificates)


def server_context(settings: TlsSettings) -> ssl.SSLContext:
    """A listener's context: its certificate, and the clients' certificates checked
    against the truststore as ssl.client.auth asks."""
    if not settings.has_keystore:
        raise TlsConfigError(
            "ssl.keystore.location",
            "a TLS listener needs a key and certificate: set ssl.keystore.location "
            "(ssl.keystore.type=PEM) or ssl.keystore.key and ssl.keystore.certificate.chain",
        )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _common(context, settings)
    _load_keystore(context, settings)
    context.verify_mode = CLIENT_AUTH_MODES[settings.client_auth]
    if settings.client_auth != "none":
        _load_truststore(context, settings, ssl.Purpose.CLIENT_AUTH)
    return context


def client_context(settings: TlsSettings) -> ssl.SSLContext:
    """A client's context: the broker's chain checked against the truststore (the system's
    CAs when none is set), its host name checked when endpoint identification is https,
    and the client's own certificate offered when a keystore is set."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _common(context, settings)
    if settings.verify_certificates:
        context.check_hostname = settings.endpoint_identification == "https"
        context.verify_mode = ssl.CERT_REQUIRED
        _load_truststore(context, settings, ssl.Purpose.SERVER_AUTH)
    else:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if settings.has_keystore:
        _load_keystore(context, settings)
    return context


# ---- versions and ciphers -------------------------------------------------------------


def _versions(protocols: tuple[str, ...]) -> list[ssl.TLSVersion]:
    if not protocols:
        raise TlsConfigError("ssl.enabled.protocols", "no protocol enabled")
    versions = []
    for name in protocols:
        if name in _REFUSED:
            raise TlsConfigError(
                "ssl.enabled.protocols", f"{name} is refused: only TLSv1.2 and TLSv1.3 are allowed"
            )
        if name not in _VERSIONS:
            raise TlsConfigError(
                "ssl.enabled.protocols", f"unknown protocol {name!r} (use TLSv1.2, TLSv1.3)"
            )
        versions.append(_VERSIONS[name])
    return versions


def _common(context: ssl.SSLContext, settings: TlsSettings) -> None:
    versions = _versions(settings.enabled_protocols)
    context.minimum_version = min(versions)
    context.maximum_version = max(versions)
    if settings.cipher_suites is None:
        return
    tls12 = [_IANA_TO_OPENSSL.get(n, n) for n in settings.cipher_suites if n not in _TLS13_SUITES]
    if not tls12:
        # Only TLS 1.3 suites listed: TLS 1.2 has none left, as with Java.
        if ssl.TLSVersion.TLSv1_3 not in versions:
            raise TlsConfigError(
                "ssl.cipher.suites", "only TLS 1.3 suites are listed but TLSv1.3 is not enabled"
            )
        context.minimum_version = ssl.TLSVersion.TLSv1_3
        return
    try:
        context.set_ciphers(":".join(tls12))
    except ssl.SSLError:
        raise TlsConfigError(
            "ssl.cipher.suites",
            f"none of {', '.join(settings.cipher_suites)} is a cipher suite OpenSSL offers",
        ) from None


# ---- keystore --------------------------------------------------------------------------


def _load_keystore(context: ssl.SSLContext, settings: TlsSettings) -> None:
    password = settings.key_password or ""  # never None: OpenSSL would prompt on a tty
    if settings.keystore_location is not None:
        key = "ssl.keystore.location"
        pem = _read(key, settings.keystore_location)
        _check_certificates(key, pem)
        _check_key(key, pem, settings.key_password)
        _load_chain(context, key, settings.keystore_location, None, password, pem)
    elif settings.certificate_location is not None:
        assert settings.key_location is not None  # checked by TlsSettings
        certs = _read("ssl.certificate.location", settings.certificate_location)
        key_pem = _read("ssl.key.location", settings.key_location)
        _check_certificates("ssl.certificate.location", certs)
        _check_key("ssl.key.location", key_pem, settings.key_password)
        _load_chain(
            context,
            "ssl.key.location",
            settings.certificate_location,
            settings.key_location,
            password,
            key_pem,
        )
    elif settings.keystore_key is not None:
        assert settings.keystore_certificate_chain is not None  # checked by TlsSettings
        key_pem = settings.keystore_key.encode()
        chain = settings.keystore_certificate_chain.encode()
        _check_certificates("ssl.keystore.certificate.chain", chain)
        _check_key("ssl.keystore.key", key_pem, settings.key_password)
        with _private_file(key_pem + b"\n" + chain) as path:
            _load_chain(context, "ssl.keystore.key", path, None, password, key_pem)


def _check_certificates(key: str, pem: bytes) -> None:
    if not _CERTIFICATE.search(pem):
        raise TlsConfigError(key, "no certificate in the PEM (-----BEGIN CERTIFICATE-----)")


def _check_key(key: str, pem: bytes, password: str | None) -> None:
    if not _PRIVATE_KEY.search(pem):
        raise TlsConfigError(key, "no private key in the PEM (-----BEGIN PRIVATE KEY-----)")
    if _ENCRYPTED.search(pem) and not password:
        raise TlsConfigError(key, "the private key is encrypted but ssl.key.password is not set")


def _load_chain(
    context: ssl.SSLContext,
    key: str,
    certfile: str,
    keyfile: str | None,
    password: str,
    key_pem: bytes,
) -> None:
    try:
        context.load_cert_chain(certfile, keyfile, password=password)
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise TlsConfigError(key, "the private key does not match the certificate") from None
        if _ENCRYPTED.search(key_pem):
            raise TlsConfigError(
                "ssl.key.password", f"cannot decrypt the private key of {key}: wrong password"
            ) from None
        raise TlsConfigError(key, f"cannot load the key and certificate: {_reason(exc)}") from None
    except OSError as exc:
        raise TlsConfigError(key, f"cannot read {certfile}: {exc.strerror or exc}") from None


# ---- truststore ------------------------------------------------------------------------


def _load_truststore(context: ssl.SSLContext, settings: TlsSettings, purpose: ssl.Purpose) -> None:
    key = "ssl.truststore.location"
    try:
        if settings.truststore_location is not None:
            location = settings.truststore_location
            if Path(location).is_dir():  # OpenSSL's hashed CA directory (librdkafka allows it)
                context.load_verify_locations(capath=location)
                return
            _check_certificates(key, _read(key, location))
            context.load_verify_locations(cafile=location)
        elif settings.truststore_certificates is not None:
            key = "ssl.truststore.certificates"
            _check_certificates(key, settings.truststore_certificates.encode())
            context.load_verify_locations(cadata=settings.truststore_certificates)
        else:
            context.load_default_certs(purpose)
    except ssl.SSLError as exc:
        raise TlsConfigError(key, f"cannot load the CA certificates: {_reason(exc)}") from None


# ---- files -----------------------------------------------------------------------------


def _read(key: str, location: str) -> bytes:
    try:
        return Path(location).read_bytes()
    except FileNotFoundError:
        raise TlsConfigError(key, f"no such file: {location}") from None
    except OSError as exc:
        raise TlsConfigError(key, f"cannot read {location}: {exc.strerror or exc}") from None


@contextlib.contextmanager
def _private_file(data: bytes) -> Iterator[str]:
    """A temporary file readable by this user only (mkstemp creates it 0600), removed on
    exit: the private key of a PEM-text keystore lives on disk only while OpenSSL reads it."""
    fd, path = tempfile.mkstemp(prefix="onceflow-keystore-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        yield path
    finally:
        os.unlink(path)


def _one_source(*options: tuple[str, str | None]) -> None:
    given = [name for name, value in options if value is not None]
    if len(given) > 1:
        raise TlsConfigError(given[1], f"set only one of {', '.join(given)}")


def _both_or_neither(first: tuple[str, str | None], second: tuple[str, str | None]) -> None:
    if (first[1] is None) != (second[1] is None):
        given, missing = (first, second) if second[1] is None else (second, first)
        raise TlsConfigError(missing[0], f"must be set together with {given[0]}")


def _reason(exc: ssl.SSLError) -> str:
    return str(exc.reason or exc.strerror or exc).replace("_", " ").lower()
