"""DeleteRecords: move partitions' log start offsets forward, as Kafka's KafkaApis and
ReplicaManager.deleteRecords do.

Each topic needs DELETE (TOPIC_AUTHORIZATION_FAILED on its partitions, checked first, so a
topic one may not delete is never said not to exist), then UNKNOWN_TOPIC_OR_PARTITION. On
the leader: an internal topic answers INVALID_TOPIC_EXCEPTION, a topic without the delete
cleanup policy POLICY_VIOLATION, an offset past the high watermark (or negative, but -1,
which means the high watermark) OFFSET_OUT_OF_RANGE. A moved log start offset is in the
log-start-offset checkpoint before the answer, written once per request (KAFKA_STORAGE_ERROR
if it cannot be).

Each answer carries the partition's low watermark: alone, its log start offset; on a
cluster, the lowest log start offset over the replicas on live brokers, which the request
waits for to reach the requested offset (Kafka's DelayedDeleteRecords) until its timeout,
answering REQUEST_TIMED_OUT for the partitions whose followers have not moved theirs.
"""

from __future__ import annotations

import asyncio
import datetime
from dataclasses import dataclass
from typing import Any

from onceflow.broker.handlers import authz
from onceflow.broker.handlers.base import Handler, RequestContext
from onceflow.broker.topics import INTERNAL_TOPICS
from onceflow.errors import ErrorCode, KafkaError
from onceflow.protocol.api_versions import ApiKey
from onceflow.security.acl import AclOperation, ResourceType

HIGH_WATERMARK = -1  # DeleteRecordsRequest.HIGH_WATERMARK
INVALID_LOW_WATERMARK = -1
_ONE_MS = datetime.timedelta(milliseconds=1)

Key = tuple[str, int]


@dataclass(slots=True)
class _Result:
    low_watermark: int
    error: ErrorCode
    wait: asyncio.Future[int] | None = None  # until the low watermark reaches the offset


async def handle_delete_records(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    denied = authz.denied(
        ctx, AclOperation.DELETE, ResourceType.TOPIC, (t.name for t in request.topics)
    )
    results: dict[Key, _Result] = {}
    with broker.logs.log_start_batch():  # one checkpoint write for the whole request
        for topic in request.topics:
            for p in topic.partitions:
                key = (topic.name, int(p.partition_index))
                if topic.name in denied:
                    error = ErrorCode.topic_authorization_failed
                    results[key] = _Result(INVALID_LOW_WATERMARK, error)
                elif not broker.has_partition(*key):
                    error = ErrorCode.unknown_topic_or_partition
                    results[key] = _Result(INVALID_LOW_WATERMARK, error)
                else:
                    results[key] = _delete_on_leader(ctx, key, int(p.offset))
    logs = broker.logs
    if logs.log_start_checkpoint_failing and not logs.checkpoint_log_start_offsets():
        # Moved, but a restart could bring the records back: not a success.
        for result in results.values():
            if result.error is ErrorCode.none:
                _cancel(result)
                result.low_watermark = INVALID_LOW_WATERMARK
                result.error = ErrorCode.kafka_storage_error
    waits = [r.wait for r in results.values() if r.wait is not None]
    if waits:
        await _wait_all(waits, int(request.timeout // _ONE_MS))
    for result in results.values():
        if result.wait is not None:
            _settle(result, result.wait)
    topics: dict[str, list[Any]] = {}
    for (name, index), result in results.items():
        topics.setdefault(name, []).append(
            ctx.entity(
                "DeleteRecordsPartitionResult",
                partition_index=index,
                low_watermark=result.low_watermark,
                error_code=result.error,
            )
        )
    return ctx.response(
        throttle_time=datetime.timedelta(0),
        topics=tuple(
            ctx.entity("DeleteRecordsTopicResult", name=name, partitions=tuple(partitions))
            for name, partitions in topics.items()
        ),
    )


def _delete_on_leader(ctx: RequestContext, key: Key, offset: int) -> _Result:
    """Kafka's Partition.deleteRecordsOnLeader, and the wait for the replicas to follow."""
    broker = ctx.broker
    topic, index = key
    try:
        if topic in INTERNAL_TOPICS:
            raise KafkaError(
                ErrorCode.invalid_topic_exception,
                f"Cannot delete records of internal topic {topic}",
            )
        plog = broker.leader_log(topic, index)
        plog.check_online()
        if not plog.config.cleanup_delete:
            raise KafkaError(
                ErrorCode.policy_violation,
                f"Records of partition {plog.name} can not be deleted due to the configured policy",
            )
        target = plog.high_watermark if offset == HIGH_WATERMARK else offset
        if target < 0:
            raise KafkaError(
                ErrorCode.offset_out_of_range, f"The offset {target} for {plog.name} is not valid"
            )
        plog.increment_log_start_offset(target)
        broker.writes.log_start_moved(plog)
    except KafkaError as exc:
        return _Result(INVALID_LOW_WATERMARK, exc.code)
    partition = broker.replicated(plog)
    if partition is None:
        return _Result(plog.log_start_offset, ErrorCode.none)
    alive = broker.topology.alive_brokers()
    return _Result(
        partition.low_watermark(alive), ErrorCode.none, partition.wait_low_watermark(target, alive)
    )


async def _wait_all(waits: list[asyncio.Future[int]], timeout_ms: int) -> None:
    pending = [w for w in waits if not w.done()]
    if pending and timeout_ms > 0:
        await asyncio.wait(pending, timeout=timeout_ms / 1000)


def _cancel(result: _Result) -> None:
    if result.wait is not None:
        result.wait.cancel()
        result.wait = None


def _settle(result: _Result, wait: asyncio.Future[int]) -> None:
    """The partition's answer once the wait is over: the low watermark it reached, the
    error that ended it (the leader moved), or REQUEST_TIMED_OUT with the one it had."""
    if not wait.done():
        wait.cancel()
        result.error = ErrorCode.request_timed_out
        return
    exc = wait.exception()
    if exc is None:
        result.low_watermark = wait.result()
        return
    result.low_watermark = INVALID_LOW_WATERMARK
    result.error = exc.code if isinstance(exc, KafkaError) else ErrorCode.unknown_server_error


HANDLERS: dict[int, Handler] = {
    ApiKey.DELETE_RECORDS: handle_delete_records,
}
