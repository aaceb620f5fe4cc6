"""Fetch: long polling completed by appends, with record bytes sent straight from files.

The response is encoded by kio entity by entity, but each partition's `records` field is
spliced in as a FileRegion, so record bytes never become Python objects on the way from the
segment file to the socket.
"""

from __future__ import annotations

import asyncio
import datetime
import struct
from dataclasses import dataclass
from typing import Any

from onceflow.broker.handlers.base import RawBody, RequestContext
from onceflow.errors import ErrorCode, KafkaError
from onceflow.protocol import codec
from onceflow.storage.partition_log import FileRegion

READ_UNCOMMITTED = 0
READ_COMMITTED = 1

_I32 = struct.Struct(">i")


@dataclass(slots=True)
class _PartitionRead:
    partition: int
    error: ErrorCode
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    region: FileRegion | None = None
    aborted: tuple[Any, ...] | None = None


async def handle_fetch(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    clock = broker.clock
    deadline = clock.monotonic_ms() + int(request.max_wait.total_seconds() * 1000)
    keys = [(t.topic, p.partition) for t in request.topics for p in t.partitions]
    while True:
        reads, total, failed = _read_all(ctx, request)
        remaining = deadline - clock.monotonic_ms()
        if total >= request.min_bytes or failed or remaining <= 0 or not keys:
            break
        waiter = broker.purgatory.watch(keys)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), remaining / 1000)
        except TimeoutError:
            pass
        finally:
            broker.purgatory.forget(keys, waiter)
    return RawBody(_encode(ctx, request, reads))


def _read_all(ctx: RequestContext, request: Any) -> tuple[list[list[_PartitionRead]], int, bool]:
    committed = ctx.api_version >= 4 and request.isolation_level == READ_COMMITTED
    limit = request.max_bytes if ctx.api_version >= 3 else 2**31 - 1
    min_one = True
    total = 0
    failed = False
    out: list[list[_PartitionRead]] = []
    for topic in request.topics:
        reads = []
        for p in topic.partitions:
            read = _read_partition(
                ctx, topic.topic, p, committed, min(limit, p.partition_max_bytes), min_one
            )
            if read.region is not None:
                limit = max(0, limit - read.region.size)
                total += read.region.size
                min_one = False
            failed = failed or read.error is not ErrorCode.none
            reads.append(read)
        out.append(reads)
    return out, total, failed


def _read_partition(
    ctx: RequestContext, topic: str, p: Any, committed: bool, max_bytes: int, min_one: bool
) -> _PartitionRead:
    plog = ctx.broker.logs.get(topic, p.partition)
    if plog is None:
        return _PartitionRead(p.partition, ErrorCode.unknown_topic_or_partition)
    lso = ctx.broker.last_stable_offset(plog)
    upper = lso if committed else plog.high_watermark
    try:
        result = plog.read(p.fetch_offset, max_bytes, upper, min_one)
    except KafkaError as exc:
        return _PartitionRead(p.partition, exc.code)
    aborted = (
        ctx.broker.aborted_transactions(plog, p.fetch_offset, result.region) if committed else None
    )
    return _PartitionRead(
        p.partition,
        ErrorCode.none,
        result.high_watermark,
        lso,
        result.log_start_offset,
        result.region,
        aborted,
    )


def _encode(ctx: RequestContext, request: Any, reads: list[list[_PartitionRead]]) -> list[Any]:
    version = ctx.api_version
    key = ctx.header.api_key
    top = ctx.response(
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        session_id=0,  # no fetch sessions: every fetch is a full fetch
        responses=(),
    )
    parts: list[Any] = [_strip_count(codec.encode_body(top)), _I32.pack(len(reads))]
    topic_cls = codec.nested(key, version, "FetchableTopicResponse")
    partition_cls = codec.nested(key, version, "PartitionData")
    aborted_cls = codec.nested(key, version, "AbortedTransaction")
    for topic, topic_reads in zip(request.topics, reads, strict=True):
        head = codec.build(topic_cls, topic=topic.topic, partitions=())
        parts.append(_strip_count(codec.encode_body(head)))
        parts.append(_I32.pack(len(topic_reads)))
        for read in topic_reads:
            aborted = None
            if read.aborted is not None:
                aborted = tuple(
                    codec.build(aborted_cls, producer_id=pid, first_offset=first)
                    for pid, first in read.aborted
                )
            entry = codec.build(
                partition_cls,
                partition_index=read.partition,
                error_code=read.error,
                high_watermark=read.high_watermark,
                last_stable_offset=read.last_stable_offset,
                log_start_offset=read.log_start_offset,
                aborted_transactions=aborted,
                preferred_read_replica=-1,
                records=b"",
            )
            encoded = codec.encode_body(entry)
            if read.region is None:
                parts.append(encoded)
            else:
                parts.append(_strip_count(encoded) + _I32.pack(read.region.size))
                parts.append(read.region)
    return parts


def _strip_count(encoded: bytes) -> bytes:
    """Drop the trailing int32 (an empty array's count or empty bytes' length) kio wrote."""
    return encoded[:-4]
