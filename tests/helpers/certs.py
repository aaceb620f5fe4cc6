"""A throwaway PKI for TLS tests, made with `cryptography`: a CA, a broker certificate for
loopback, client certificates with chosen subjects, an encrypted-key variant, and a second
CA nobody trusts.

Every file is PEM in the layout Kafka's `ssl.keystore.type=PEM` expects: PKCS#8 private
keys (encrypted with `ssl.key.password` when one is set) and certificate chains leaf first.
EC P-256 keys keep a whole PKI under a few milliseconds.

    pki = make_pki(tmp_path)
    pki.ca                      # ssl.truststore.location / ssl.ca.location
    pki.broker.keystore         # ssl.keystore.location (key + chain in one file)
    pki.clients["alice"].cert   # ssl.certificate.location, .key for ssl.key.location
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

__all__ = [
    "BROKER_SUBJECT",
    "DEFAULT_CLIENTS",
    "KEY_PASSWORD",
    "Identity",
    "Pki",
    "make_pki",
]

#: The password of every encrypted test key (`ssl.key.password`).
KEY_PASSWORD = "key-secret"
BROKER_SUBJECT = "CN=localhost,OU=brokers,O=Onceflow"
#: Client name -> subject (RFC 4514, most significant RDN last, as Kafka prints it).
DEFAULT_CLIENTS: Mapping[str, str] = {
    "alice": "CN=alice,OU=eng,O=Onceflow",
    "bob": "CN=bob,OU=ops,O=Onceflow",
}
LOOPBACK_DNS = ("localhost",)
LOOPBACK_IPS = ("127.0.0.1", "::1")
_VALIDITY = datetime.timedelta(days=30)
_BOTH_ENDS = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
_SKEW = datetime.timedelta(days=1)  # not_before in the past: clocks of a CI box drift


@dataclass(frozen=True)
class Identity:
    """One certificate and its key, as files."""

    subject: str
    cert: Path  # the leaf certificate alone
    key: Path  # its PKCS#8 private key, encrypted when key_password is set
    keystore: Path  # key, then leaf and CA certificate: a whole PEM keystore
    key_password: str | None = None

    @property
    def chain(self) -> Path:
        """Leaf then CA certificate (ssl.certificate.location with the chain)."""
        return self.keystore.with_suffix(".chain.pem")


@dataclass(frozen=True)
class _Authority:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey = field(repr=False)
    path: Path


@dataclass(frozen=True)
class Pki:
    directory: Path
    ca: Path  # the trusted CA's certificate: every truststore
    untrusted_ca: Path  # a second CA that nothing here trusts
    broker: Identity  # SAN DNS localhost, IP 127.0.0.1 and ::1
    broker_encrypted: Identity  # the same names, its key encrypted with KEY_PASSWORD
    clients: dict[str, Identity]
    _trusted: _Authority = field(repr=False)
    _untrusted: _Authority = field(repr=False)

    def issue(
        self,
        name: str,
        subject: str,
        *,
        dns: Iterable[str] = (),
        ips: Iterable[str] = (),
        key_password: str | None = None,
        trusted: bool = True,
    ) -> Identity:
        """A further certificate (e.g. a client signed by the untrusted CA, or a broker
        certificate for a name the test does not connect to), written as `name`*.pem."""
        authority = self._trusted if trusted else self._untrusted
        return _issue(authority, self.directory, name, subject, dns, ips, key_password)


def make_pki(directory: Path, clients: Mapping[str, str] = DEFAULT_CLIENTS) -> Pki:
    """Write a CA, a broker identity, one identity per client and an untrusted CA."""
    directory.mkdir(parents=True, exist_ok=True)
    trusted = _authority(directory / "ca.pem", "CN=Onceflow Test CA,O=Onceflow")
    untrusted = _authority(directory / "untrusted-ca.pem", "CN=Untrusted Test CA,O=Elsewhere")
    broker = _issue(trusted, directory, "broker", BROKER_SUBJECT, LOOPBACK_DNS, LOOPBACK_IPS)
    encrypted = _issue(
        trusted,
        directory,
        "broker-encrypted",
        BROKER_SUBJECT,
        LOOPBACK_DNS,
        LOOPBACK_IPS,
        KEY_PASSWORD,
    )
    issued = {name: _issue(trusted, directory, name, subject) for name, subject in clients.items()}
    return Pki(
        directory=directory,
        ca=trusted.path,
        untrusted_ca=untrusted.path,
        broker=broker,
        broker_encrypted=encrypted,
        clients=issued,
        _trusted=trusted,
        _untrusted=untrusted,
    )


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _authority(path: Path, subject: str) -> _Authority:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name.from_rfc4514_string(subject)
    public = key.public_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now() - _SKEW)
        .not_valid_after(_now() + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )
    path.write_bytes(_pem(cert))
    return _Authority(cert, key, path)


def _issue(
    authority: _Authority,
    directory: Path,
    name: str,
    subject: str,
    dns: Iterable[str] = (),
    ips: Iterable[str] = (),
    key_password: str | None = None,
) -> Identity:
    key = ec.generate_private_key(ec.SECP256R1())
    public = key.public_key()
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name.from_rfc4514_string(subject))
        .issuer_name(authority.cert.subject)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now() - _SKEW)
        .not_valid_after(_now() + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=True,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(authority.key.public_key()),
            critical=False,
        )
    )
    names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(authority.key, hashes.SHA256())
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(key_password.encode())
        if key_password is not None
        else serialization.NoEncryption()
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )
    chain_pem = _pem(cert) + _pem(authority.cert)
    identity = Identity(
        subject=subject,
        cert=directory / f"{name}.pem",
        key=directory / f"{name}.key.pem",
        keystore=directory / f"{name}.keystore.pem",
        key_password=key_password,
    )
    identity.cert.write_bytes(_pem(cert))
    identity.key.write_bytes(key_pem)
    identity.keystore.write_bytes(key_pem + chain_pem)
    identity.chain.write_bytes(chain_pem)
    for path in (identity.key, identity.keystore):
        path.chmod(0o600)
    return identity
