"""Client quotas enforced on real clients (confluent-kafka): a producer over its
producer_byte_rate converges to it and hears throttle_time_ms (librdkafka's throttle
callback) while a producer of another client id keeps its latency; a consumer over its
consumer_byte_rate likewise; the metrics show both budgets.

The broker measures over 4 windows of 1 s (quota.window.num=4) so a test converges in
seconds; the rates are asserted within a loose band around the quota, the feature itself.
"""

from __future__ import annotations

import time
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer

from onceflow.client.cluster import Cluster
from onceflow.client.quota_admin import alter_client_quotas
from tests.helpers.broker import BrokerProcess, free_port
from tests.helpers.clients import create_topic, topic_name

QUOTA = 200_000  # bytes per second
RUN_S = 16.0
SETTLE_S = 4.0  # the first windows allow a burst of (windows - 1) x quota
METRICS_PORT = free_port()


def _set(broker: BrokerProcess, entity: tuple[tuple[str, str | None], ...], **quota: int) -> None:
    with Cluster(broker.bootstrap, 20.0) as cluster:
        assert alter_client_quotas(cluster.bootstrap, {entity: quota}) == {entity: None}


def _rate(samples: list[tuple[float, int]], start: float, end: float) -> float:
    return sum(size for at, size in samples if start <= at < end) / (end - start)


@pytest.mark.broker_overrides({"quota.window.num": "4"})
def test_a_producer_over_its_rate_is_throttled_and_another_is_not(broker: BrokerProcess) -> None:
    topic = topic_name()
    create_topic(broker.bootstrap, topic, 1)
    _set(broker, (("client-id", "noisy"),), producer_byte_rate=QUOTA)
    delivered: list[tuple[float, int]] = []
    throttles: list[float] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is None:
            delivered.append((time.monotonic(), len(msg.value())))  # type: ignore[attr-defined]

    noisy = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "client.id": "noisy",
            "linger.ms": 5,
            "batch.size": 65536,
            "queue.buffering.max.kbytes": 2048,
            "throttle_cb": lambda event: throttles.append(event.throttle_time),
        }
    )
    quiet_throttles: list[float] = []
    quiet = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "client.id": "quiet",
            "throttle_cb": lambda event: quiet_throttles.append(event.throttle_time),
        }
    )
    quiet_latencies: list[float] = []
    payload = b"x" * 1000
    start = time.monotonic()
    next_quiet = start
    while time.monotonic() - start < RUN_S:
        try:
            noisy.produce(topic, payload, on_delivery=on_delivery)
        except BufferError:
            noisy.poll(0.02)
        noisy.poll(0)
        if time.monotonic() >= next_quiet:  # the other client: one record, timed
            sent = time.monotonic()
            quiet.produce(topic, b"q")
            assert quiet.flush(10) == 0
            quiet_latencies.append(time.monotonic() - sent)
            next_quiet = sent + 1.0
    rate = _rate(delivered, start + SETTLE_S, start + RUN_S)
    noisy.purge()
    noisy.flush(5)
    assert 0.5 * QUOTA <= rate <= 1.5 * QUOTA, f"{rate:.0f} B/s against a quota of {QUOTA}"
    assert any(t > 0 for t in throttles), "librdkafka heard no throttle_time_ms"
    # The other client id was never throttled, and its records were answered well within
    # the throttle times the noisy one got (seconds).
    quiet.poll(0)
    assert not any(t > 0 for t in quiet_throttles)
    median = sorted(quiet_latencies)[len(quiet_latencies) // 2]
    assert median < 0.5 * max(throttles), (quiet_latencies, max(throttles))


@pytest.mark.broker_overrides(
    {"quota.window.num": "4", "onceflow.metrics.listener": f"127.0.0.1:{METRICS_PORT}"}
)
def test_a_consumer_over_its_rate_is_throttled(broker: BrokerProcess) -> None:
    topic = topic_name()
    create_topic(broker.bootstrap, topic, 1)
    loader = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20, "batch.size": 32768})
    payload = b"y" * 1000
    for _ in range(8000):  # 8 MB: more than the consumer may read in the test
        loader.produce(topic, payload)
        loader.poll(0)
    assert loader.flush(60) == 0
    _set(broker, (("user", None), ("client-id", None)), consumer_byte_rate=QUOTA)
    throttles: list[float] = []
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": topic,
            "client.id": "reader",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "throttle_cb": lambda event: throttles.append(event.throttle_time),
            "fetch.wait.max.ms": 100,
            "max.partition.fetch.bytes": 65536,  # fine-grained: the rate converges smoothly
        }
    )
    consumer.subscribe([topic])
    received: list[tuple[float, int]] = []
    start = time.monotonic()
    try:
        while time.monotonic() - start < RUN_S:
            for message in consumer.consume(500, 0.2):
                if message.error() is None:
                    received.append((time.monotonic(), len(message.value() or b"")))
    finally:
        consumer.close()
    rate = _rate(received, start + SETTLE_S, start + RUN_S)
    assert 0.5 * QUOTA <= rate <= 1.5 * QUOTA, f"{rate:.0f} B/s against a quota of {QUOTA}"
    assert any(t > 0 for t in throttles), "librdkafka heard no throttle_time_ms"
    with urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=10) as page:
        text = page.read().decode()
    labels = 'client_id="reader",quota_type="Fetch",user="ANONYMOUS"'
    assert f"onceflow_client_quota_byte_rate{{{labels}}}" in text
    assert f"onceflow_client_quota_limit{{{labels}}} 200000.0" in text
    throttled = [
        line for line in text.splitlines()
        if line.startswith(f"onceflow_client_quota_throttle_time_ms_total{{{labels}}}")
    ]  # fmt: skip
    assert throttled and float(throttled[0].rsplit(" ", 1)[1]) > 0
