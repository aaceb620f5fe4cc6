"""A broker with every kind of listener, and client settings for each of them.

    PLAINTEXT        anonymous (ACLs give it nothing)
    SSL              mutual TLS: the principal is the client certificate's subject
    SASL_SSL         PLAIN (the admin, from the listener's JAAS config) and SCRAM users
    SASL_PLAINTEXT   the same mechanisms without TLS

ACLs are on (Kafka's StandardAuthorizer class name) with `User:admin` a super user. The
client settings come in each client's own dialect: confluent-kafka's (librdkafka) keys,
kafka-python's and aiokafka's keyword arguments.
"""

from __future__ import annotations

import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers.broker import BrokerProcess, free_port
from tests.helpers.certs import Pki, make_pki

ADMIN = ("admin", "admin-secret")
LISTENERS = ("PLAINTEXT", "SSL", "SASL_SSL", "SASL_PLAINTEXT")


@dataclass
class SecureBroker:
    process: BrokerProcess
    pki: Pki
    ports: dict[str, int] = field(default_factory=dict)

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def logged(self, text: str, since: int = 0, timeout: float = 10.0) -> bool:
        """Whether the broker logs `text` (after character `since`) within `timeout`: an
        audit line can land just after the client saw its connection closed."""
        deadline = time.monotonic() + timeout
        while True:
            if text in self.process.log[since:]:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)

    # ---- confluent-kafka (librdkafka) ---------------------------------------------------

    def confluent(
        self,
        listener: str,
        user: str | None = None,
        password: str | None = None,
        mechanism: str = "SCRAM-SHA-256",
        cert: str | None = None,
    ) -> dict[str, Any]:
        """Settings for a client on `listener`: SASL as user/password, or (SSL) the client
        certificate of `cert` (a name in the PKI)."""
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap(listener),
            "security.protocol": listener,
        }
        if listener in ("SSL", "SASL_SSL"):
            conf["ssl.ca.location"] = str(self.pki.ca)
        if cert is not None:
            identity = self.pki.clients[cert]
            conf["ssl.certificate.location"] = str(identity.cert)
            conf["ssl.key.location"] = str(identity.key)
            if identity.key_password:
                conf["ssl.key.password"] = identity.key_password
        if listener.startswith("SASL"):
            conf.update(
                {"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}
            )
        return conf

    # ---- kafka-python and aiokafka ------------------------------------------------------

    def kafka_python(
        self,
        listener: str,
        user: str | None = None,
        password: str | None = None,
        mechanism: str = "SCRAM-SHA-256",
        cert: str | None = None,
    ) -> dict[str, Any]:
        conf: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap(listener),
            "security_protocol": listener,
        }
        if listener in ("SSL", "SASL_SSL"):
            conf["ssl_cafile"] = str(self.pki.ca)
        if cert is not None:
            identity = self.pki.clients[cert]
            conf["ssl_certfile"] = str(identity.cert)
            conf["ssl_keyfile"] = str(identity.key)
            if identity.key_password:
                conf["ssl_password"] = identity.key_password
        if listener.startswith("SASL"):
            conf.update(
                {
                    "sasl_mechanism": mechanism,
                    "sasl_plain_username": user,
                    "sasl_plain_password": password,
                }
            )
        return conf

    def aiokafka(
        self,
        listener: str,
        user: str | None = None,
        password: str | None = None,
        mechanism: str = "SCRAM-SHA-256",
        cert: str | None = None,
    ) -> dict[str, Any]:
        conf: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap(listener),
            "security_protocol": listener,
        }
        if listener in ("SSL", "SASL_SSL"):
            context = ssl.create_default_context(cafile=str(self.pki.ca))
            if cert is not None:
                identity = self.pki.clients[cert]
                context.load_cert_chain(
                    str(identity.cert), str(identity.key), identity.key_password
                )
            conf["ssl_context"] = context
        if listener.startswith("SASL"):
            conf.update(
                {
                    "sasl_mechanism": mechanism,
                    "sasl_plain_username": user,
                    "sasl_plain_password": password,
                }
            )
        return conf


def secure_overrides(pki: Pki, ports: dict[str, int]) -> dict[str, str]:
    user, password = ADMIN
    return {
        "listeners": ",".join(f"{name}://127.0.0.1:{ports[name]}" for name in LISTENERS),
        "ssl.keystore.location": str(pki.broker.keystore),
        "ssl.truststore.location": str(pki.ca),
        "listener.name.ssl.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        **{
            f"listener.name.{name.lower()}.plain.sasl.jaas.config": (
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                f'username="{user}" password="{password}" user_{user}="{password}";'
            )
            for name in ("SASL_SSL", "SASL_PLAINTEXT")
        },
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": f"User:{user}",
    }


def start_secure_broker(directory: Path, extra: dict[str, str] | None = None) -> SecureBroker:
    pki = make_pki(directory / "pki")
    ports = {name: free_port() for name in LISTENERS}
    overrides = {**secure_overrides(pki, ports), **(extra or {})}
    process = BrokerProcess(directory / "data", overrides, port=ports["PLAINTEXT"])
    process.start()
    return SecureBroker(process, pki, ports)


# ---- users and ACLs, set up through the admin API as an operator would -------------------


def admin(broker: SecureBroker) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient(broker.confluent("SASL_SSL", *ADMIN, mechanism="PLAIN"))


def add_scram_user(broker: SecureBroker, user: str, password: str) -> None:
    """Credentials for both SCRAM mechanisms, as `onceflow users` or kafka-configs.sh add them."""
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    upserts = [
        UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, 4096), password.encode())
        for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)
    ]
    client = admin(broker)  # kept alive until its futures are done
    for future in client.alter_user_scram_credentials(upserts).values():
        future.result(timeout=30)


def allow(
    broker: SecureBroker,
    principal: str,
    resource: str,
    name: str,
    operations: tuple[str, ...],
    pattern: str = "LITERAL",
    permission: str = "ALLOW",
) -> None:
    """Add ACLs: `principal` may (or with DENY, may not) do `operations` on the resource."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    bindings = [
        AclBinding(
            ResourceType[resource],
            name,
            ResourcePatternType[pattern],
            principal,
            "*",
            AclOperation[operation],
            AclPermissionType[permission],
        )
        for operation in operations
    ]
    client = admin(broker)
    for future in client.create_acls(bindings).values():
        future.result(timeout=30)
