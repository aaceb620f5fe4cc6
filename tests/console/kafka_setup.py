"""What the console tests put on the broker, through the Kafka protocol."""

from __future__ import annotations

from confluent_kafka import Producer

from tests.helpers.clients import QUIET_LOGGER

MINUTE_MS = 60_000
OP_TIMEOUT_S = 30.0


def produce_plain(bootstrap: str, topic: str, partition: int, values: list[bytes]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "logger": QUIET_LOGGER, "log_level": 0})
    for value in values:
        p.produce(topic, value, partition=partition)
    assert p.flush(OP_TIMEOUT_S) == 0
