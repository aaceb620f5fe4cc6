"""ListOffsets: an offset per partition by timestamp, as Kafka's ReplicaManager.fetchOffset
and Partition.fetchOffsetForTimestamp answer it (there is no tiered storage here).

- LATEST (-1): the last offset a client may read (the LSO read_committed, else the high
  watermark; the log end for a follower or a debugging replica id), with the leader epoch.
- EARLIEST (-2), and EARLIEST_LOCAL (-4, v8+): the log start offset, with the epoch of the
  first leader-epoch entry when that entry starts there (else -1).
- MAX_TIMESTAMP (-3, v7+): the first record with the largest timestamp, and its batch's
  epoch. LATEST_TIERED (-5, v9+): -1 (nothing is tiered), epoch -1.
- A time: the first record at or after it, with its batch's epoch.
- Any other negative time, or one newer than the request's version: UNSUPPORTED_VERSION
  for that partition; a partition named twice: INVALID_REQUEST, answered once.
An answer beyond what the client may read is offset -1 and timestamp -1. A leader whose high
watermark has not yet reached the start of its epoch (just elected) answers LATEST, and a
time whose record lies beyond the high watermark, with OFFSET_NOT_AVAILABLE (v5+;
LEADER_NOT_AVAILABLE before). v10's timeout_ms bounds remote-storage lookups: none here.

Each topic needs DESCRIBE (Kafka's rule, whoever asks); without it its partitions answer
TOPIC_AUTHORIZATION_FAILED, after the others as Kafka lists them.
"""

from __future__ import annotations

import datetime
from collections import Counter
from typing import Any

from onceflow.broker.handlers import authz
from onceflow.broker.handlers.base import RequestContext
from onceflow.broker.handlers.fetch import check_leader_epoch
from onceflow.errors import ErrorCode, KafkaError
from onceflow.replication.partition import Role
from onceflow.security.acl import AclOperation, ResourceType
from onceflow.storage.leader_epoch import EpochEntry
from onceflow.storage.partition_log import PartitionLog

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5
READ_COMMITTED = 1
CONSUMER = -1  # the replica id of a client
DEBUGGING = -2  # a tool's replica id: any replica may answer
# The first version that may ask for each special timestamp (Kafka's
# timestampMinSupportedVersion).
_SPECIAL_SINCE = {LATEST: 1, EARLIEST: 1, MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9}
_OFFSET_NOT_AVAILABLE_SINCE = 5

# error, offset, timestamp, leader epoch
_Answer = tuple[ErrorCode, int, int, int]


def _error(code: ErrorCode) -> _Answer:
    return code, -1, -1, -1


_NOTHING = _error(ErrorCode.none)


async def handle_list_offsets(ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    denied = authz.denied(
        ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (t.name for t in request.topics)
    )
    allowed = [t for t in request.topics if t.name not in denied]
    named = Counter((t.name, p.partition_index) for t in allowed for p in t.partitions)
    answers: dict[str, dict[int, _Answer]] = {}
    for topic in allowed:
        partitions = answers.setdefault(topic.name, {})
        for p in topic.partitions:
            if named[(topic.name, p.partition_index)] > 1:
                partitions[p.partition_index] = _error(ErrorCode.invalid_request)
            elif p.timestamp < 0 and version < _SPECIAL_SINCE.get(p.timestamp, 1 << 15):
                partitions[p.partition_index] = _error(ErrorCode.unsupported_version)
            else:
                partitions[p.partition_index] = _lookup(ctx, request, topic.name, p)
    topics = [_topic(ctx, name, partitions) for name, partitions in answers.items()]
    for topic in request.topics:
        if topic.name in denied:
            refused = _error(ErrorCode.topic_authorization_failed)
            topics.append(
                _topic(ctx, topic.name, {p.partition_index: refused for p in topic.partitions})
            )
    return ctx.response(throttle_time=datetime.timedelta(0), topics=tuple(topics))


def _topic(ctx: RequestContext, name: str, partitions: dict[int, _Answer]) -> Any:
    return ctx.entity(
        "ListOffsetsTopicResponse",
        name=name,
        partitions=tuple(
            ctx.entity(
                "ListOffsetsPartitionResponse",
                partition_index=index,
                error_code=error,
                offset=offset,
                timestamp=timestamp,
                leader_epoch=epoch,
            )
            for index, (error, offset, timestamp, epoch) in partitions.items()
        ),
    )


def _lookup(ctx: RequestContext, request: Any, topic: str, p: Any) -> _Answer:
    """One partition's answer (Kafka's fetchOffsetForTimestamp on the leader's log)."""
    version = ctx.api_version
    replica = request.replica_id
    try:
        plog = _log(ctx, topic, p.partition_index, replica)
        check_leader_epoch(plog.leader_epoch, getattr(p, "current_leader_epoch", -1))
    except KafkaError as exc:
        return _error(exc.code)
    if plog.offline is not None:
        return _error(ErrorCode.kafka_storage_error)
    client = replica == CONSUMER
    if not client:
        limit = plog.log_end_offset
    elif version >= 2 and request.isolation_level == READ_COMMITTED:
        limit = plog.last_stable_offset
    else:
        limit = plog.high_watermark
    lagging = client and _high_watermark_lags(ctx, plog)
    not_available = _error(
        ErrorCode.offset_not_available
        if version >= _OFFSET_NOT_AVAILABLE_SINCE
        else ErrorCode.leader_not_available
    )
    timestamp = p.timestamp
    if timestamp == LATEST:
        return not_available if lagging else (ErrorCode.none, limit, -1, plog.leader_epoch)
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        first = plog.epochs.earliest_entry
        start = plog.log_start_offset
        return ErrorCode.none, start, -1, _epoch_or_none(first, start)
    if timestamp == LATEST_TIERED:
        return ErrorCode.none, -1, -1, -1
    found = _record_at(plog, timestamp)
    if found is None or found[0] >= limit:
        return not_available if lagging else _NOTHING
    offset, found_timestamp, epoch = found
    return ErrorCode.none, offset, found_timestamp, epoch


def _epoch_or_none(first: EpochEntry | None, start: int) -> int:
    """The first epoch entry's epoch when it starts at or below the log start, else -1."""
    return first.epoch if first is not None and first.start_offset <= start else -1


def _record_at(plog: PartitionLog, timestamp: int) -> tuple[int, int, int] | None:
    """(offset, timestamp, batch leader epoch) of MAX_TIMESTAMP's record or of the first
    record at or after a time."""
    if timestamp == MAX_TIMESTAMP:
        return plog.max_timestamp_record()
    by_time = plog.offset_for_timestamp(timestamp)
    if by_time is None:
        return None
    epoch = plog.epochs.epoch_for_offset(by_time[0])
    return by_time[0], by_time[1], -1 if epoch is None else epoch


def _log(ctx: RequestContext, topic: str, partition: int, replica: int) -> PartitionLog:
    """The leader's log; for the debugging replica id, this broker's replica of any role."""
    if replica == DEBUGGING:
        local = ctx.broker.logs.get(topic, partition)
        if local is not None:
            return local
    return ctx.broker.leader_log(topic, partition)


def _high_watermark_lags(ctx: RequestContext, plog: PartitionLog) -> bool:
    """A leader's high watermark below the start of its own epoch (Kafka's
    leaderEpochStartOffsetOpt > highWatermark): what it may serve is not known yet."""
    partition = ctx.broker.replicated(plog)
    if partition is None or partition.role is not Role.LEADER:
        return False
    latest = plog.epochs.latest_entry
    return (
        latest is not None
        and latest.epoch == plog.leader_epoch
        and latest.start_offset > plog.high_watermark
    )
