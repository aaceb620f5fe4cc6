"""What the console tests put on the broker, through the Kafka protocol."""

from __future__ import annotations

import dataclasses
import time

from confluent_kafka import IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import OffsetSpec

from onceflow.errors import ErrorCode
from onceflow.records.builder import build_batch
from tests.helpers.clients import QUIET_LOGGER, admin_client
from tests.helpers.wire import RawConnection, produce_request

HANGING_PRODUCER_ID = 4_000_000_000  # far above any id the broker hands out
MINUTE_MS = 60_000
OP_TIMEOUT_S = 30.0


def end_offset(bootstrap: str, topic: str, partition: int, committed: bool) -> int:
    """ListOffsets latest: the LSO with `committed`, else the high watermark."""
    level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    admin = admin_client(bootstrap)  # must outlive the future
    futures = admin.list_offsets(
        {TopicPartition(topic, partition): OffsetSpec.latest()},
        isolation_level=level,
        request_timeout=OP_TIMEOUT_S,
    )
    (future,) = futures.values()
    return int(future.result(timeout=OP_TIMEOUT_S).offset)


def produce_hanging_transaction(bootstrap: str, topic: str, age_ms: int) -> None:
    """A transactional batch at offset 0 whose transaction no coordinator will ever end,
    written the way hanging transactions happened before KIP-890: a raw produce, accepted
    because the broker's partition verification is off."""
    batch = build_batch(
        [(b"h", b"hanging-1", ()), (b"h", b"hanging-2", ())],
        timestamp_ms=int(time.time() * 1000) - age_ms,
        producer_id=HANGING_PRODUCER_ID,
        producer_epoch=0,
        base_sequence=0,
        transactional=True,
    )
    request = dataclasses.replace(
        produce_request(topic, {0: batch}), transactional_id="ghost-of-a-producer"
    )
    with RawConnection(bootstrap) as conn:
        response = conn.call(request)
    (partition,) = response.responses[0].partition_responses
    assert partition.error_code == ErrorCode.none, partition
    assert partition.base_offset == 0


def produce_plain(bootstrap: str, topic: str, partition: int, values: list[bytes]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "logger": QUIET_LOGGER, "log_level": 0})
    for value in values:
        p.produce(topic, value, partition=partition)
    assert p.flush(OP_TIMEOUT_S) == 0
