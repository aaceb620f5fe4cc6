"""Security: the suite's 1 KiB produce and read_committed consume over SASL_SSL (SCRAM-SHA-256)
against PLAINTEXT on the same broker, and over SASL_SSL with ACLs on.

Two brokers run side by side, each with a PLAINTEXT and a SASL_SSL listener: "open" (no
authorizer) and "acls" (Kafka's StandardAuthorizer class name, the admin a super user, the
benchmark's user allowed by PREFIXED rules only). The TLS certificates are made at run time
with `cryptography` (a throwaway CA and a broker certificate for loopback); the admin logs
in with PLAIN from the listener's JAAS config and creates the SCRAM user through
`AdminClient.alter_user_scram_credentials`, as an operator would.
"""

from __future__ import annotations

import datetime
import ipaddress
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from benchmarks import disk
from benchmarks.common import OnceflowBroker, free_port
from onceflow.bench import KIB, consume, create_topic, produce

ADMIN = ("admin", "admin-secret")  # PLAIN, from the SASL_SSL listener's JAAS config
USER = ("bench", "bench-secret")  # SCRAM-SHA-256, created through the admin API
SCRAM_ITERATIONS = 4096  # Kafka's minimum
TOPIC_PREFIX = "security-"  # every topic of the section; the ACLs allow this prefix
GROUP = "bench"  # onceflow.bench.consume's group.id (assigned, never joined)
RUNS = ("plaintext", "sasl_ssl", "acls")  # produce runs of one group, rotated per group


@dataclass(frozen=True)
class Pki:
    ca: Path  # the CA certificate: the broker's truststore, the clients' ssl.ca.location
    keystore: Path  # the broker's PEM keystore: PKCS#8 key, then its certificate and the CA's


def make_pki(directory: Path) -> Pki:
    """A throwaway CA and a broker certificate for 127.0.0.1 and localhost (EC P-256)."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name.from_rfc4514_string("CN=Onceflow Bench CA")
    ca = (
        _certificate(ca_name, ca_name, ca_key.public_key(), now)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    leaf = (
        _certificate(x509.Name.from_rfc4514_string("CN=localhost"), ca_name, key.public_key(), now)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    pki = Pki(ca=directory / "ca.pem", keystore=directory / "broker.keystore.pem")
    pki.ca.write_bytes(ca.public_bytes(pem))
    pki.keystore.write_bytes(key_pem + leaf.public_bytes(pem) + ca.public_bytes(pem))
    pki.keystore.chmod(0o600)
    return pki


def _certificate(
    subject: x509.Name, issuer: x509.Name, public: Any, now: datetime.datetime
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
    )


class SecureBroker:
    """A broker with a PLAINTEXT and a SASL_SSL listener (PLAIN and SCRAM-SHA-256), and the
    SCRAM user USER; with `acls`, the authorizer on and USER allowed by prefix only."""

    def __init__(self, acls: bool) -> None:
        plain, secure = free_port(), free_port()
        self.secure_port = secure
        self.broker = OnceflowBroker(start=False, port=plain)
        self.pki = make_pki(Path(self.broker.dir) / "pki")
        user, password = ADMIN
        self.broker.overrides = {
            "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_SSL://127.0.0.1:{secure}",
            "ssl.keystore.location": str(self.pki.keystore),
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": (
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                f'username="{user}" password="{password}" user_{user}="{password}";'
            ),
        }
        if acls:
            self.broker.overrides.update(
                {
                    "authorizer.class.name": (
                        "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
                    ),
                    "super.users": f"User:{user}",
                }
            )
        try:
            self.broker.start()
            self._add_user()
            if acls:
                self._allow_by_prefix()
        except BaseException:
            self.broker.close()
            raise

    @property
    def plaintext(self) -> str:
        return self.broker.bootstrap

    def sasl_ssl(self, user: tuple[str, str] = USER, mechanism: str = "SCRAM-SHA-256") -> Any:
        """Client settings (librdkafka's) for `user` on the SASL_SSL listener; the broker's
        certificate is checked against the CA, host name included."""
        return {
            "bootstrap.servers": f"127.0.0.1:{self.secure_port}",
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(self.pki.ca),
            "sasl.mechanism": mechanism,
            "sasl.username": user[0],
            "sasl.password": user[1],
        }

    @property
    def admin_config(self) -> Any:
        return self.sasl_ssl(ADMIN, "PLAIN")

    def _admin(self) -> AdminClient:
        return AdminClient({**self.admin_config, "log_level": 0})

    def _add_user(self) -> None:
        name, password = USER
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, SCRAM_ITERATIONS)
        admin = self._admin()  # kept alive until its futures are done
        upsert = UserScramCredentialUpsertion(name, info, password.encode())
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(timeout=30)

    def _allow_by_prefix(self) -> None:
        """What kafka-acls.sh --producer and --consumer grant, as PREFIXED rules."""
        principal = f"User:{USER[0]}"

        def allow(kind: ResourceType, name: str, operation: AclOperation) -> AclBinding:
            return AclBinding(
                kind,
                name,
                ResourcePatternType.PREFIXED,
                principal,
                "*",
                operation,
                AclPermissionType.ALLOW,
            )

        topic_ops = (AclOperation.WRITE, AclOperation.READ, AclOperation.DESCRIBE)
        bindings = [allow(ResourceType.TOPIC, TOPIC_PREFIX, op) for op in topic_ops]
        bindings.append(allow(ResourceType.GROUP, GROUP, AclOperation.READ))
        admin = self._admin()
        for future in admin.create_acls(bindings).values():
            future.result(timeout=30)

    def close(self) -> None:
        self.broker.close()


def security_runs(
    messages: int, groups: int, reads: int, settle_seconds: float
) -> dict[str, list[float]]:
    """Seconds per run, by run name: `groups` groups of three interleaved produce runs (the
    first of the three rotating per group, the disk rested before each group but the first),
    then `reads` rounds of interleaved read_committed consumes of the first group's topics."""
    open_broker, acls_broker = SecureBroker(acls=False), None
    try:
        acls_broker = SecureBroker(acls=True)
        endpoints: dict[str, Any] = {
            "plaintext": open_broker.plaintext,
            "sasl_ssl": open_broker.sasl_ssl(),
            "acls": acls_broker.sasl_ssl(),
        }
        admins = {
            "plaintext": open_broker.admin_config,
            "sasl_ssl": open_broker.admin_config,
            "acls": acls_broker.admin_config,
        }
        seconds: dict[str, list[float]] = {f"produce_{name}": [] for name in RUNS}
        for group in range(groups):
            if group:
                disk.settle(settle_seconds)
            for k in range(len(RUNS)):
                name = RUNS[(group + k) % len(RUNS)]
                topic = f"{TOPIC_PREFIX}{name}-{group}"
                create_topic(admins[name], topic)
                seconds[f"produce_{name}"].append(produce(endpoints[name], topic, messages, KIB))
            speeds = ", ".join(
                f"{name} {messages * KIB / 1e6 / seconds[f'produce_{name}'][-1]:.0f}"
                for name in RUNS
            )
            print(
                f"bench: security produce group {group + 1}: MB/s {speeds}",
                file=sys.stderr,
                flush=True,
            )
        # The plaintext and SASL_SSL consumers read the same log of the same broker.
        topics = {name: f"{TOPIC_PREFIX}{name}-0" for name in RUNS}
        topics["sasl_ssl"] = topics["plaintext"]
        for name in RUNS:
            seconds[f"consume_{name}"] = []
        for _ in range(reads):
            for name in RUNS:
                seconds[f"consume_{name}"].append(
                    consume(endpoints[name], topics[name], messages, "read_committed", warm_up=True)
                )
        return seconds
    finally:
        open_broker.close()
        if acls_broker is not None:
            acls_broker.close()


def figures(seconds: dict[str, list[float]], messages: int) -> dict[str, float]:
    """MB/s medians, and ratios as medians of each group's (or read round's) own ratio."""
    mb = messages * KIB / 1e6
    out: dict[str, float] = {}

    def ratio(kind: str, measured: str, reference: str) -> float:
        pairs = zip(seconds[f"{kind}_{reference}"], seconds[f"{kind}_{measured}"], strict=True)
        return statistics.median(ref / run for ref, run in pairs)

    for kind in ("produce", "consume"):
        for name in RUNS:
            out[f"security_{kind}_1024B_{name}_MBps"] = mb / statistics.median(
                seconds[f"{kind}_{name}"]
            )
        out[f"security_{kind}_1024B_sasl_ssl_ratio_to_plaintext"] = ratio(
            kind, "sasl_ssl", "plaintext"
        )
        out[f"security_{kind}_1024B_acls_ratio_to_plaintext"] = ratio(kind, "acls", "plaintext")
        out[f"security_{kind}_1024B_acls_ratio_to_sasl_ssl"] = ratio(kind, "acls", "sasl_ssl")
    return out
