"""share.auto.offset.reset=by_duration:<ISO-8601 duration> (Kafka 4.2): a share group that
starts with no state starts at the first record of the last <duration>, found by timestamp
as ListOffsets finds it; records older than that are never delivered. A value that is not a
duration is refused with Kafka's INVALID_CONFIG."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from tests.helpers.broker import BrokerProcess
from tests.helpers.share import create_topic, set_group_configs, share_consumer

HOUR_MS = 3_600_000


def test_by_duration_starts_at_the_records_of_that_time(broker: BrokerProcess) -> None:
    topic, group = f"t-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic)
    now = int(time.time() * 1000)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(5):  # three and two hours old
        p.produce(topic, f"old-{i}".encode(), partition=0, timestamp=now - (3 - i // 3) * HOUR_MS)
    for i in range(5):  # in the last half hour
        p.produce(topic, f"new-{i}".encode(), partition=0, timestamp=now - 30 * 60_000 + i)
    assert p.flush(30) == 0
    set_group_configs(broker.bootstrap, group, {"share.auto.offset.reset": "by_duration:PT1H"})
    c = share_consumer(broker.bootstrap, group, topic)
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < 5 and time.monotonic() < deadline:
        got.extend(m.value() for m in c.poll(0.5) if m.error() is None)
    c.close()
    assert sorted(got) == [f"new-{i}".encode() for i in range(5)]


def test_a_duration_that_is_not_one_is_refused(broker: BrokerProcess) -> None:
    with pytest.raises(KafkaException) as raised:
        set_group_configs(broker.bootstrap, "g", {"share.auto.offset.reset": "by_duration:1h"})
    assert raised.value.args[0].code() == KafkaError.INVALID_CONFIG
