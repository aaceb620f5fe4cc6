"""Requests below the versions the broker serves, as Kafka 4.x treats them: the connection
is closed with no response (ApiVersions alone is answered, with UNSUPPORTED_VERSION), and
the broker's log names each client once per API and version, not once per request.
"""

from __future__ import annotations

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from tests.helpers.broker import BrokerProcess
from tests.helpers.txn import wait_for
from tests.helpers.wire import RawConnection, request_frame

OFFSET_COMMIT, PRODUCE = 8, 0


def _closed_unanswered(b: BrokerProcess, api_key: int, version: int, client: str) -> bool:
    frame = request_frame(api_key, version, 11, b"\x00" * 32, flexible=False, client_id=client)
    with RawConnection(b.bootstrap) as conn:
        conn.send_bytes(frame)
        return conn.closed_by_peer()


def _warnings(b: BrokerProcess, since: int, *needles: str) -> list[str]:
    with open(b.log_path, "rb") as f:
        f.seek(since)
        text = f.read().decode(errors="replace")
    return [
        line
        for line in text.splitlines()
        if " WARNING " in line and all(needle in line for needle in needles)
    ]


def test_each_client_is_named_once_per_api_and_version(broker: BrokerProcess) -> None:
    mark = broker.log_size()
    # Sarama 1.22 commits offsets with OffsetCommit v1; Kafka 4.0 serves v2 and above.
    for _ in range(3):
        assert _closed_unanswered(broker, OFFSET_COMMIT, 1, "old-sarama")
    assert _closed_unanswered(broker, OFFSET_COMMIT, 1, "other-app")
    assert _closed_unanswered(broker, PRODUCE, 2, "old-sarama")
    wait_for(
        lambda: _warnings(broker, mark, "'old-sarama'", "Produce v2"),
        what="the broker's warning about Produce v2",
    )
    sarama = _warnings(broker, mark, "'old-sarama'", "OffsetCommit v1")
    assert len(sarama) == 1, sarama
    assert "127.0.0.1:" in sarama[0] and "minimum v2" in sarama[0]
    assert len(_warnings(broker, mark, "'other-app'", "OffsetCommit v1")) == 1
    assert len(_warnings(broker, mark, "'old-sarama'", "Produce v2")) == 1
    assert _warnings(broker, mark, "closing connection from") == []  # no line per request

    # ApiVersions is answered whatever its version, and the broker serves on.
    with RawConnection(broker.bootstrap) as conn:
        request = ApiVersionsRequest(client_software_name="x", client_software_version="1")
        assert conn.call(request).error_code.value == 0


def test_an_old_kafka_python_producer_is_named_once_however_often_it_retries(
    broker: BrokerProcess,
) -> None:
    """kafka-python told it speaks Kafka 0.10.1 sends Produce v2 (below Kafka 4.0's v3):
    every attempt finds its connection closed, as with Kafka 4."""
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    mark = broker.log_size()
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap,
        client_id="legacy-producer",
        api_version=(0, 10, 1),
        retries=5,
        retry_backoff_ms=50,
        reconnect_backoff_ms=50,
        request_timeout_ms=3000,
        max_block_ms=10_000,
    )
    try:
        future = producer.send("legacy", b"v")
        with pytest.raises(KafkaError):
            future.get(timeout=30)
    finally:
        producer.close(timeout=5)
    named = _warnings(broker, mark, "'legacy-producer'")
    assert len(named) == 1, named
    assert "Produce v2" in named[0] and "minimum v3" in named[0]
