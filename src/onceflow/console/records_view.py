"""The record browser: a page of one partition's records from an offset or a time,
read_committed or read_uncommitted, key and value shown as text, JSON or hex."""

from __future__ import annotations

import json
import time
from typing import Any

from confluent_kafka import KafkaException, TopicPartition

from onceflow.client.librdkafka import describe_kafka_error
from onceflow.console.clients import BadRequest, ClusterUnavailable, KafkaClients

__all__ = ["FORMATS", "ISOLATION_LEVELS", "MAX_RECORDS", "browse", "render"]

FORMATS = ("text", "json", "hex")
ISOLATION_LEVELS = ("read_committed", "read_uncommitted")
MAX_RECORDS = 500
POLL_S = 0.05


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
    """The first offset at or after a time (-1 when nothing is that recent)."""
    try:
        (found,) = consumer.offsets_for_times(
            [TopicPartition(tp.topic, tp.partition, timestamp_ms)], timeout=clients.timeout_s
        )
    except KafkaException as exc:
        raise ClusterUnavailable(describe_kafka_error(exc)) from None
    return int(found.offset)


def browse(
    clients: KafkaClients,
    topic: str,
    partition: int,
    *,
    isolation: str,
    offset: int | None,
    timestamp_ms: int | None,
    from_end: bool = False,
    limit: int,
    fmt: str,
) -> dict[str, Any]:
    """Up to `limit` records from a time, else an offset, else the last `limit` offsets
    before the end (`from_end`), else the earliest offset; never past the end (the LSO
    read_committed, the high watermark read_uncommitted), so what it returns is final.

    `next` is where to go on from: the follow mode asks again with offset=next and
    appends what comes. Everything below the end is decided (below the LSO every
    transaction has ended), so records skipped over (aborted, markers) never come back.
    """
    if isolation not in ISOLATION_LEVELS or fmt not in FORMATS:
        raise BadRequest(f"isolation must be one of {ISOLATION_LEVELS}, format one of {FORMATS}")
    if not 1 <= limit <= MAX_RECORDS:
        raise BadRequest(f"limit must be 1-{MAX_RECORDS}")
    if offset is not None and offset < 0:
        raise BadRequest("offset must not be negative")
    offsets = clients.partition_offsets(topic, partition)
    end = offsets.end(isolation)
    if offset is not None:
        start = max(offset, offsets.earliest)
    elif from_end:
        start = max(offsets.earliest, end - limit)
    else:
        start = offsets.earliest
    records: list[Any] = []
    next_offset = start
    if timestamp_ms is not None or start < end:  # else nothing to read: no consumer
        consumer = clients.consumer(isolation)
        try:
            tp = TopicPartition(topic, partition)
            if timestamp_ms is not None:
                found = _start(clients, consumer, tp, timestamp_ms)
                start = next_offset = found if found >= 0 else offsets.high_watermark
            if start < end:
                records, next_offset = _read(
                    clients, consumer, TopicPartition(topic, partition, start), end, limit
                )
        except KafkaException as exc:  # from assign() or position(): the cluster's answer
            raise ClusterUnavailable(describe_kafka_error(exc)) from None
        finally:
            consumer.close()
    return {
        "topic": topic,
        "partition": partition,
        "isolation": isolation,
        "start": start,
        "end": end,
        "next": next_offset,
        "more": next_offset < end,
        "earliest": offsets.earliest,
        "lso": offsets.lso,
        "high_watermark": offsets.high_watermark,
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


def _read(
    clients: KafkaClients, consumer: Any, tp: TopicPartition, end: int, limit: int
) -> tuple[list[Any], int]:
    """Records from tp.offset up to `end` (exclusive: the HWM or the LSO), at most `limit`,
    and the offset after the last one looked at: `end` once the consumer got there (past
    any trailing aborted records and transaction markers, which it never returns)."""
    consumer.assign([tp])
    out: list[Any] = []
    position = tp.offset
    deadline = time.monotonic() + clients.timeout_s
    while len(out) < limit and time.monotonic() < deadline:
        # At most end - position records are left: ask for no more, so that consume()
        # returns when they are there instead of waiting out its timeout for others.
        want = max(1, min(limit - len(out), end - position))
        for m in consumer.consume(num_messages=want, timeout=POLL_S):
            if m.error() is not None:
                raise ClusterUnavailable(m.error().str())
            if m.offset() < end:
                out.append(m)
        (now,) = consumer.position([TopicPartition(tp.topic, tp.partition)])
        if now.offset >= 0:  # librdkafka has no position (-1001) before its first fetch
            position = now.offset
        if position >= end or (out and out[-1].offset() >= end - 1):
            position = end
            break
    if out:
        position = max(position, out[-1].offset() + 1)
    return out, min(position, end)
