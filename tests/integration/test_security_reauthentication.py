"""KIP-368: with connections.max.reauth.ms, a SASL session ends. librdkafka re-authenticates
on the same connection before it does and goes on without a break; a connection that
sends a request after its session ended is closed (the client reconnects and logs in
again), so a revoked password or a deleted user stops working within that time."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, Producer

from tests.helpers.clients import QUIET_LOGGER
from tests.helpers.secure import SecureBroker, add_scram_user, allow, start_secure_broker

LIFETIME_MS = 1500
ALICE = ("alice", "alice-secret")


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    broker = start_secure_broker(
        tmp_path_factory.mktemp("reauth"), {"connections.max.reauth.ms": str(LIFETIME_MS)}
    )
    try:
        add_scram_user(broker, *ALICE)
        allow(broker, "User:alice", "TOPIC", "alice-", ("ALL",), "PREFIXED")
        yield broker
    finally:
        broker.process.stop()
        errors = broker.process.internal_errors()
        assert not errors, "\n".join(errors[:3])


def test_librdkafka_re_authenticates_and_keeps_producing(secure: SecureBroker) -> None:
    mark = len(secure.process.log)
    errors: list[KafkaError] = []
    producer = Producer(
        {
            **secure.confluent("SASL_SSL", *ALICE),
            "enable.idempotence": True,
            "error_cb": errors.append,
            "logger": QUIET_LOGGER,
        }
    )
    failed: list[KafkaError] = []
    sent = 0
    deadline = time.monotonic() + 3 * LIFETIME_MS / 1000
    while time.monotonic() < deadline:  # several session lifetimes, never idle
        producer.produce(
            "alice-reauth",
            str(sent).encode(),
            on_delivery=lambda err, _m: failed.append(err) if err else None,
        )
        sent += 1
        producer.poll(0.05)
    assert producer.flush(30) == 0
    assert not failed and not errors, (failed, errors)
    assert "SASL session expired" not in secure.process.log[mark:]


def test_a_client_that_does_not_re_authenticate_is_disconnected_at_expiry(
    secure: SecureBroker,
) -> None:
    """aiokafka does not implement KIP-368: its connection is closed at its first request
    after the session ended; it reconnects, logs in again and the record is delivered."""
    import asyncio

    from aiokafka import AIOKafkaProducer

    mark = len(secure.process.log)

    async def run() -> None:
        producer = AIOKafkaProducer(**secure.aiokafka("SASL_SSL", *ALICE))
        await producer.start()
        try:
            await producer.send_and_wait("alice-expiry", b"before")
            await asyncio.sleep(2 * LIFETIME_MS / 1000)
            await asyncio.wait_for(producer.send_and_wait("alice-expiry", b"after"), 30)
        finally:
            await producer.stop()

    asyncio.run(run())
    assert secure.logged("SASL session expired", since=mark)
