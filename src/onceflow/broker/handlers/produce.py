"""Produce: validate each partition's batches, append them, answer per durability.

A bad batch fails only its own partition; the others in the request still succeed. With
acks=-1 in durable mode the response waits for the group commit that covers the append.
"""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from onceflow.broker.handlers.base import NO_RESPONSE, Deferred, RequestContext
from onceflow.broker.topics import INTERNAL_TOPICS
from onceflow.errors import ErrorCode, KafkaError
from onceflow.records.batch import BatchHeader, validate_produced_batches
from onceflow.records.record import decode_records


async def handle_produce(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    acks = request.acks
    waits: list[asyncio.Future[None]] = []
    topics = []
    for topic_data in request.topic_data:
        partitions = []
        for data in topic_data.partition_data:
            error = ErrorCode.none
            message = None
            base_offset = -1
            log_start = -1
            append_time: datetime.datetime | None = None
            try:
                if acks not in (0, 1, -1):
                    raise KafkaError(ErrorCode.invalid_required_acks, f"acks={acks}")
                # Only the coordinators write internal topics (Kafka's internalTopicsAllowed);
                # a client's record there could stop the next start from loading the log.
                if topic_data.name in INTERNAL_TOPICS:
                    raise KafkaError(
                        ErrorCode.invalid_topic_exception,
                        f"Cannot append to internal topic {topic_data.name}",
                    )
                plog = broker.log_for_produce(topic_data.name, data.index)
                records = data.records or b""
                headers = validate_produced_batches(records, plog.config.max_message_bytes)
                if len(headers) != 1:
                    # Kafka's rule for Produce v3+: one batch per partition, so a retried
                    # batch can never travel together with a new one.
                    raise KafkaError(
                        ErrorCode.invalid_record,
                        f"{len(headers)} record batches for one partition; exactly 1 is allowed",
                    )
                if plog.config.cleanup_compact:
                    require_keys(records, headers)
                if any(h.is_transactional for h in headers):
                    broker.verify_transactional(
                        request.transactional_id, headers[0], topic_data.name, data.index
                    )
                result = plog.append_batches(records, headers)
                base_offset, log_start = result.first_offset, result.log_start_offset
                if result.log_append_time >= 0:
                    append_time = datetime.datetime.fromtimestamp(
                        result.log_append_time / 1000, datetime.UTC
                    )
                broker.appended(plog)
                if acks == -1 and plog.config.durable:
                    waits.append(broker.flusher.durable(plog, result.last_offset))
            except KafkaError as exc:
                error, message = exc.code, exc.message
            partitions.append(
                ctx.entity(
                    "PartitionProduceResponse",
                    index=data.index,
                    error_code=error,
                    base_offset=base_offset,
                    log_append_time=append_time,  # None (-1): the producer's CreateTime
                    log_start_offset=log_start,
                    record_errors=(),
                    error_message=message,
                )
            )
        topics.append(
            ctx.entity(
                "TopicProduceResponse", name=topic_data.name, partition_responses=tuple(partitions)
            )
        )
    response = ctx.response(responses=tuple(topics), throttle_time=datetime.timedelta(0))
    if acks == 0:
        return NO_RESPONSE
    if not waits:
        return response
    return Deferred(waits, response)


def require_keys(records: bytes, headers: list[BatchHeader]) -> None:
    """Compacted topics keep the latest record per key, so a keyless record is refused.

    This is the only per-record check on the produce path, and only for compacted topics.
    """
    position = 0
    for header in headers:
        batch = memoryview(records)[position : position + header.size]
        if any(r.key is None for r in decode_records(batch, verify_crc=False)):
            raise KafkaError(
                ErrorCode.invalid_record, "compacted topic cannot accept a record without a key"
            )
        position += header.size
