"""The record browser: a page of one partition's records from an offset or a time,
read_committed or read_uncommitted, key and value shown as text, JSON or hex."""

from __future__ import annotations

import json
import time
from typing import Any

from confluent_kafka import KafkaException, TopicPartition

from onceflow.cli.common import describe_kafka_error
from onceflow.console.clients import BadRequest, ClusterUnavailable, KafkaClients

__all__ = ["FORMATS", "ISOLATION_LEVELS", "MAX_RECORDS", "browse", "render"]

FORMATS = ("text", "json", "hex")
ISOLATION_LEVELS = ("read_committed", "read_uncommitted")
MAX_RECORDS = 500
POLL_S = 0.2


def render(data: bytes | None, fmt: str) -> str | None:
    """Bytes as the page shows them; JSON that does not parse falls back to text."""
    if data is None:
        return None
    if fmt == "hex":
        return data.hex(" ")
    text = data.decode("utf-8", errors="replace")
    if fmt == "json":
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            return text
    return text


def _start(clients: KafkaClients, consumer: Any, tp: TopicPartition, timestamp_ms: int) -> int:
    """The first offset at or after a time (the end when nothing is that recent)."""
    try:
        (found,) = consumer.offsets_for_times(
            [TopicPartition(tp.topic, tp.partition, timestamp_ms)], timeout=clients.timeout_s
        )
    except KafkaException as exc:
        raise ClusterUnavailable(describe_kafka_error(exc)) from None
    if found.offset >= 0:
        return int(found.offset)
    return clients.latest_offsets([(tp.topic, tp.partition)], committed=False)[
        (tp.topic, tp.partition)
    ]


def browse(
    clients: KafkaClients,
    topic: str,
    partition: int,
    *,
    isolation: str,
    offset: int | None,
    timestamp_ms: int | None,
    limit: int,
    fmt: str,
) -> dict[str, Any]:
    if isolation not in ISOLATION_LEVELS or fmt not in FORMATS:
        raise BadRequest(f"isolation must be one of {ISOLATION_LEVELS}, format one of {FORMATS}")
    if not 1 <= limit <= MAX_RECORDS:
        raise BadRequest(f"limit must be 1-{MAX_RECORDS}")
    key = (topic, partition)
    end = clients.latest_offsets([key], committed=isolation == "read_committed")[key]
    consumer = clients.consumer(isolation)
    try:
        tp = TopicPartition(topic, partition)
        if timestamp_ms is not None:
            start = _start(clients, consumer, tp, timestamp_ms)
        else:
            start = clients.earliest_offsets([key])[key] if offset is None else offset
        records = _read(clients, consumer, TopicPartition(topic, partition, start), end, limit)
    finally:
        consumer.close()
    return {
        "topic": topic,
        "partition": partition,
        "isolation": isolation,
        "start": start,
        "end": end,
        "records": [
            {
                "offset": m.offset(),
                "timestamp": m.timestamp()[1],
                "key": render(m.key(), fmt),
                "value": render(m.value(), fmt),
                "headers": [[k, render(v, fmt)] for k, v in (m.headers() or [])],
            }
            for m in records
        ],
    }


def _read(clients: KafkaClients, consumer: Any, tp: TopicPartition, end: int, limit: int) -> Any:
    """Records from tp.offset up to `end` (exclusive: the HWM or the LSO), at most `limit`."""
    if tp.offset >= end:
        return []
    consumer.assign([tp])
    out: list[Any] = []
    deadline = time.monotonic() + clients.timeout_s
    while len(out) < limit and time.monotonic() < deadline:
        for m in consumer.consume(num_messages=limit - len(out), timeout=POLL_S):
            if m.error() is not None:
                raise ClusterUnavailable(m.error().str())
            if m.offset() < end:
                out.append(m)
        (position,) = consumer.position([TopicPartition(tp.topic, tp.partition)])
        if position.offset >= end or (out and out[-1].offset() >= end - 1):
            break
    return out[:limit]
