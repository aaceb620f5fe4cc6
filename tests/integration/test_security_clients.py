"""confluent-kafka, kafka-python and aiokafka on a secured broker: SCRAM over SASL_SSL and
mutual TLS, each with ACLs limited to what the client needs; exactly-once (a transaction
and a read_committed read) through the secured path; ACLs and credentials survive a
restart; a wrong password or an untrusted certificate gets nothing while the broker goes
on serving everyone else."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from tests.helpers.clients import QUIET_LOGGER, kafka_python_subscribe
from tests.helpers.secure import (
    SecureBroker,
    add_scram_user,
    allow,
    start_secure_broker,
)

ALICE = ("alice", "alice-secret")
CERT_ALICE = "User:CN=alice,OU=eng,O=Onceflow"
TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    broker = start_secure_broker(tmp_path_factory.mktemp("secure"))
    try:
        add_scram_user(broker, *ALICE)
        for principal in ("User:alice", CERT_ALICE):
            # What a transactional copier needs, and nothing more.
            topic_ops = ("WRITE", "READ", "DESCRIBE", "CREATE")
            allow(broker, principal, "TOPIC", "alice-", topic_ops, "PREFIXED")
            allow(broker, principal, "GROUP", "alice-", ("READ",), "PREFIXED")
            txn_ops = ("WRITE", "DESCRIBE")
            allow(broker, principal, "TRANSACTIONAL_ID", "alice-", txn_ops, "PREFIXED")
        yield broker
    finally:
        broker.process.stop()
        errors = broker.process.internal_errors()
        assert not errors, "\n".join(errors[:3])


def _unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


def _confluent_round_trip(conf: dict[str, Any], topic: str) -> list[bytes]:
    """A transaction of three records, then a read_committed read of them."""
    producer = Producer({**conf, "transactional.id": _unique("alice-txn-"), "logger": QUIET_LOGGER})
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, f"v{i}".encode())
    producer.commit_transaction(TIMEOUT_S)
    consumer = Consumer(
        {
            **conf,
            "group.id": _unique("alice-group-"),
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "logger": QUIET_LOGGER,
        }
    )
    try:
        consumer.subscribe([topic])
        values: list[bytes] = []
        for _ in range(300):
            msg = consumer.poll(0.1)
            if msg is None:
                if len(values) >= 3:
                    break
                continue
            assert msg.error() is None, msg.error()
            values.append(msg.value())
        consumer.commit(asynchronous=False)
        return values
    finally:
        consumer.close()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_confluent_kafka_over_sasl_ssl_with_scram(secure: SecureBroker, mechanism: str) -> None:
    conf = secure.confluent("SASL_SSL", *ALICE, mechanism=mechanism)
    assert _confluent_round_trip(conf, _unique("alice-t-")) == [b"v0", b"v1", b"v2"]


def test_confluent_kafka_over_mutual_tls(secure: SecureBroker) -> None:
    conf = secure.confluent("SSL", cert="alice")
    assert _confluent_round_trip(conf, _unique("alice-t-")) == [b"v0", b"v1", b"v2"]


@pytest.mark.parametrize(
    ("listener", "auth"),
    [("SASL_SSL", {"user": "alice", "password": "alice-secret"}), ("SSL", {"cert": "alice"})],
)
def test_kafka_python_produces_and_consumes(
    secure: SecureBroker, listener: str, auth: dict[str, str]
) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    conf = secure.kafka_python(listener, mechanism="SCRAM-SHA-512", **auth)
    topic = _unique("alice-kp-")
    producer = KafkaProducer(**conf, enable_idempotence=True, acks="all")
    try:
        for i in range(3):
            producer.send(topic, f"v{i}".encode()).get(timeout=TIMEOUT_S)
    finally:
        producer.close()
    consumer = KafkaConsumer(
        **conf,
        group_id=_unique("alice-kp-group-"),
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        consumer_timeout_ms=10_000,
    )
    try:
        kafka_python_subscribe(consumer, [topic])
        values = [m.value for m in consumer][:3]
        consumer.commit()
    finally:
        consumer.close()
    assert values == [b"v0", b"v1", b"v2"]


@pytest.mark.parametrize(
    ("listener", "auth"),
    [("SASL_SSL", {"user": "alice", "password": "alice-secret"}), ("SSL", {"cert": "alice"})],
)
def test_aiokafka_transaction_and_read_committed(
    secure: SecureBroker, listener: str, auth: dict[str, str]
) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic = _unique("alice-aio-")

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(
            **secure.aiokafka(listener, **auth), transactional_id=_unique("alice-aio-txn-")
        )
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(3):
                    await producer.send_and_wait(topic, f"v{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic,
            **secure.aiokafka(listener, **auth),
            group_id=_unique("alice-aio-group-"),
            auto_offset_reset="earliest",
            isolation_level="read_committed",
        )
        await consumer.start()
        try:
            values: list[bytes] = []
            while len(values) < 3:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=500), TIMEOUT_S)
                values += [m.value for ms in batch.values() for m in ms if m.value is not None]
            await consumer.commit()
            return values
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == [b"v0", b"v1", b"v2"]


def _produce_error(conf: dict[str, Any], topic: str) -> KafkaError:
    """The error a producer ends with (authentication or authorization)."""
    errors: list[KafkaError] = []
    producer = Producer(
        {
            **conf,
            "message.timeout.ms": 8000,
            "error_cb": errors.append,
            "logger": QUIET_LOGGER,
        }
    )
    reports: list[KafkaError | None] = []
    producer.produce(topic, b"x", on_delivery=lambda err, _msg: reports.append(err))
    producer.flush(15)
    assert reports and reports[0] is not None, "the record was delivered"
    return errors[0] if errors else reports[0]


def test_a_wrong_password_gets_nothing_and_others_are_still_served(secure: SecureBroker) -> None:
    error = _produce_error(
        secure.confluent("SASL_SSL", "alice", "not-her-password"), _unique("alice-t-")
    )
    assert error.code() == KafkaError._AUTHENTICATION, error
    assert "Authentication failed" in error.str()
    assert secure.logged("Failed authentication of User:alice")
    # The broker goes on serving a client with the right password.
    conf = secure.confluent("SASL_SSL", *ALICE)
    assert _confluent_round_trip(conf, _unique("alice-t-")) == [b"v0", b"v1", b"v2"]


def test_an_unknown_user_and_an_unenabled_mechanism_are_refused(secure: SecureBroker) -> None:
    error = _produce_error(secure.confluent("SASL_SSL", "mallory", "guess"), "alice-x")
    assert error.code() == KafkaError._AUTHENTICATION
    # OAUTHBEARER is not among sasl.enabled.mechanisms.
    conf = {**secure.confluent("SASL_PLAINTEXT", "x", "y"), "sasl.mechanism": "OAUTHBEARER"}
    conf.pop("sasl.username"), conf.pop("sasl.password")
    conf["enable.sasl.oauthbearer.unsecure.jwt"] = True
    error = _produce_error(conf, "alice-x")
    assert error.code() in (KafkaError._AUTHENTICATION, KafkaError._TRANSPORT), error
    assert secure.logged("Failed authentication")


def test_a_client_with_an_untrusted_certificate_is_refused(
    secure: SecureBroker, tmp_path: Path
) -> None:
    from tests.helpers.certs import make_pki

    stranger = make_pki(tmp_path / "other")  # a CA the broker does not trust
    identity = stranger.clients["alice"]
    conf = {
        **secure.confluent("SSL"),
        "ssl.certificate.location": str(identity.cert),
        "ssl.key.location": str(identity.key),
    }
    error = _produce_error(conf, "alice-x")
    assert error.code() in (KafkaError._SSL, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)
    assert secure.logged("SSL handshake failed")


def test_a_client_that_does_not_trust_the_broker_fails_cleanly(
    secure: SecureBroker, tmp_path: Path
) -> None:
    from tests.helpers.certs import make_pki

    stranger = make_pki(tmp_path / "other")
    conf = {**secure.confluent("SASL_SSL", *ALICE), "ssl.ca.location": str(stranger.ca)}
    error = _produce_error(conf, "alice-x")
    assert error.code() in (KafkaError._SSL, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)


def test_acls_and_credentials_survive_a_restart(tmp_path: Path) -> None:
    broker = start_secure_broker(tmp_path)
    try:
        add_scram_user(broker, "carol", "carol-secret")
        allow(broker, "User:carol", "TOPIC", "carol-t", ("WRITE", "READ", "DESCRIBE", "CREATE"))
        allow(broker, "User:carol", "GROUP", "carol-", ("READ",), "PREFIXED")
        allow(broker, "User:carol", "TRANSACTIONAL_ID", "carol-", ("WRITE",), "PREFIXED")
        broker.process.restart(kill=True)  # kill -9: what was acknowledged is on disk
        conf = broker.confluent("SASL_SSL", "carol", "carol-secret", mechanism="SCRAM-SHA-512")
        producer = Producer({**conf, "transactional.id": "carol-1", "logger": QUIET_LOGGER})
        producer.init_transactions(TIMEOUT_S)
        producer.begin_transaction()
        producer.produce("carol-t", b"after restart")
        producer.commit_transaction(TIMEOUT_S)
        with pytest.raises(KafkaException) as denied:
            other = Producer({**conf, "transactional.id": "dave-1", "logger": QUIET_LOGGER})
            other.init_transactions(TIMEOUT_S)
        assert denied.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    finally:
        broker.process.stop()
