"""ShareFetch and ShareAcknowledge (KIP-932): acquire records for a share-group member,
and take its acknowledgements.

A ShareFetch first applies the acknowledgements it carries, then acquires, per partition of
the member's share session this broker leads, what the share-partition lets it have:
records are read from the log in whole batches (up to the last stable offset under
`share.isolation.level=read_committed`, the high watermark otherwise) and the batches'
headers alone decide what is acquired, so no record is parsed. With nothing to acquire the
fetch waits, up to max_wait, for an append or for records released or unlocked.
Acknowledgements are answered only once `__share_group_state` holds them.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Any

from onceflow.broker.handlers import authz
from onceflow.broker.handlers.base import Handler, RequestContext
from onceflow.broker.handlers.share_groups import share_coordinator
from onceflow.coordinator.share.coordinator import AckBatch, ShareCoordinator
from onceflow.coordinator.share.partition import AcquiredRange, FetchedBatch
from onceflow.coordinator.share.records import ShareKey
from onceflow.coordinator.share.sessions import FINAL_EPOCH, OPEN_EPOCH, ShareSession
from onceflow.errors import ErrorCode, KafkaError
from onceflow.protocol.api_versions import ApiKey
from onceflow.records.batch import iter_batches
from onceflow.security.acl import AclOperation, ResourceType
from onceflow.storage.indexes import AbortedTxn
from onceflow.storage.partition_log import PartitionLog

NO_THROTTLE = datetime.timedelta(0)
_MAX_PARTITION_BYTES = 1 << 20  # one partition's share of a fetch, as Kafka's default
#: The share-partition's state cannot be read yet (its __share_group_state partition is
#: being created, loaded or moved): the fetch acquires nothing there and waits, as Kafka's
#: share fetch does while a share-partition initializes.
_STATE_NOT_READY = frozenset(
    {
        ErrorCode.coordinator_not_available,
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_load_in_progress,
    }
)


@dataclass(slots=True)
class _Result:
    error: ErrorCode = ErrorCode.none
    ack_error: ErrorCode | None = None  # None: no acknowledgement for this partition
    records: bytes | None = None
    acquired: list[AcquiredRange] = field(default_factory=list)
    message: str | None = None


Results = dict[tuple[Any, int], _Result]


def _top_error(ctx: RequestContext, error: ErrorCode, message: str | None = None) -> Any:
    fields: dict[str, Any] = dict(
        throttle_time=NO_THROTTLE,
        error_code=error,
        error_message=message,
        responses=(),
        node_endpoints=(),
        acquisition_lock_timeout=datetime.timedelta(0),
    )
    return ctx.response(**fields)


def _check_request(ctx: RequestContext, request: Any) -> tuple[ErrorCode, str | None] | None:
    if not request.group_id:
        return ErrorCode.invalid_group_id, "GroupId can't be empty."
    if not request.member_id:
        return ErrorCode.invalid_request, "MemberId can't be empty."
    if not ctx.authorized(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return ErrorCode.group_authorization_failed, None
    return None


async def handle_share_fetch(ctx: RequestContext, request: Any) -> Any:
    refused = _check_request(ctx, request)
    if refused is not None:
        return _top_error(ctx, *refused)
    epoch = request.share_session_epoch
    with_acks = any(p.acknowledgement_batches for t in request.topics for p in t.partitions)
    if epoch == OPEN_EPOCH and with_acks:
        return _top_error(
            ctx, ErrorCode.invalid_request, "Acknowledge data present on initial fetch request"
        )
    coordinator = share_coordinator(ctx)
    await coordinator.refresh_group_configs(request.group_id)
    added = [(t.topic_id, p.partition_index) for t in request.topics for p in t.partitions]
    forgotten = [(t.topic_id, p) for t in request.forgotten_topics_data for p in t.partitions]
    error, session = coordinator.sessions.advance(
        request.group_id, request.member_id, epoch, added, forgotten
    )
    if session is None:
        return _top_error(ctx, error)
    results: Results = {}
    await _acknowledge(ctx, coordinator, request, results)
    if epoch == FINAL_EPOCH:
        coordinator.sessions.close(request.group_id, request.member_id)
    elif not getattr(request, "is_renew_ack", False):  # KIP-1222: a renewal fetches nothing
        await _fetch(ctx, coordinator, request, session, results)
    return _response(ctx, coordinator, request.group_id, results, fetch=True)


async def handle_share_acknowledge(ctx: RequestContext, request: Any) -> Any:
    refused = _check_request(ctx, request)
    if refused is not None:
        return _top_error(ctx, *refused)
    coordinator = share_coordinator(ctx)
    epoch = request.share_session_epoch
    if epoch == OPEN_EPOCH:
        return _top_error(ctx, ErrorCode.invalid_share_session_epoch)
    error, session = coordinator.sessions.advance(request.group_id, request.member_id, epoch)
    if session is None:
        return _top_error(ctx, error)
    results: Results = {}
    await _acknowledge(ctx, coordinator, request, results)
    if epoch == FINAL_EPOCH:
        coordinator.sessions.close(request.group_id, request.member_id)
    return _response(ctx, coordinator, request.group_id, results, fetch=False)


async def _acknowledge(
    ctx: RequestContext, coordinator: ShareCoordinator, request: Any, results: Results
) -> None:
    pending: list[tuple[_Result, Awaitable[int]]] = []
    for topic in request.topics:
        name = ctx.broker.topic_name_by_id(topic.topic_id)
        for p in topic.partitions:
            if not p.acknowledgement_batches:
                continue
            result = results.setdefault((topic.topic_id, p.partition_index), _Result())
            if name is None:
                result.ack_error = ErrorCode.unknown_topic_id
                continue
            if not ctx.authorized(AclOperation.READ, ResourceType.TOPIC, name):
                result.ack_error = ErrorCode.topic_authorization_failed
                continue
            key = ShareKey(request.group_id, topic.topic_id, p.partition_index)
            batches: list[AckBatch] = [
                (b.first_offset, b.last_offset, tuple(b.acknowledge_types))
                for b in p.acknowledgement_batches
            ]
            try:
                result.ack_error, written = coordinator.acknowledge(key, request.member_id, batches)
            except KafkaError as exc:
                result.ack_error = exc.code
                continue
            if written is not None:
                pending.append((result, written))
    for result, written in pending:
        try:
            await written
        except KafkaError as exc:
            result.ack_error = exc.code


async def _fetch(
    ctx: RequestContext,
    coordinator: ShareCoordinator,
    request: Any,
    session: ShareSession,
    results: Results,
) -> None:
    broker = ctx.broker
    clock = broker.clock
    deadline = clock.monotonic_ms() + int(request.max_wait.total_seconds() * 1000)
    names = {tid: broker.topic_name_by_id(tid) for tid, _ in session.partitions}
    denied = authz.denied(
        ctx, AclOperation.READ, ResourceType.TOPIC, [n for n in names.values() if n is not None]
    )
    keys = [(names[tid], p) for tid, p in session.partitions if names[tid] is not None]
    mode = getattr(request, "share_acquire_mode", 0)
    while True:
        acquired = await _acquire_all(
            ctx, coordinator, request, session, names, denied, mode, results
        )
        remaining = deadline - clock.monotonic_ms()
        errors = any(r.error is not ErrorCode.none for r in results.values())
        if acquired or errors or remaining <= 0 or not keys:
            return
        waiter = broker.purgatory.watch(keys)  # type: ignore[arg-type]
        try:
            # Locks run out with no append to wake us: look again at least every 100 ms.
            await asyncio.wait_for(asyncio.shield(waiter), min(remaining, 100) / 1000)
        except TimeoutError:
            pass
        finally:
            broker.purgatory.forget(keys, waiter)  # type: ignore[arg-type]


async def _acquire_all(
    ctx: RequestContext,
    coordinator: ShareCoordinator,
    request: Any,
    session: ShareSession,
    names: dict[Any, str | None],
    denied: frozenset[str],
    mode: int,
    results: Results,
) -> int:
    budget_records = request.max_records if request.max_records > 0 else 500
    budget_bytes = getattr(request, "max_bytes", 2**31 - 1)
    total = 0
    for tid, partition in session.partitions:
        if budget_records <= 0 or budget_bytes <= 0:
            break
        name = names[tid]
        result = results.get((tid, partition))
        if name is None:
            results.setdefault((tid, partition), _Result()).error = ErrorCode.unknown_topic_id
            continue
        if name in denied:
            results.setdefault(
                (tid, partition), _Result()
            ).error = ErrorCode.topic_authorization_failed
            continue
        if result is not None and result.acquired:
            continue
        try:
            plog = ctx.broker.leader_log(name, partition)
            key = ShareKey(request.group_id, tid, partition)
            got, data = await _acquire_one(
                coordinator,
                key,
                name,
                plog,
                request.member_id,
                budget_records,
                min(budget_bytes, _MAX_PARTITION_BYTES),
                mode,
            )
        except KafkaError as exc:
            if exc.code not in _STATE_NOT_READY:
                results.setdefault((tid, partition), _Result()).error = exc.code
            continue  # the share coordinator is moving or loading: nothing yet, not an error
        if got:
            result = results.setdefault((tid, partition), _Result())
            result.acquired, result.records = got, data
            count = sum(r.last - r.first + 1 for r in got)
            budget_records -= count
            budget_bytes -= len(data or b"")
            total += count
    return total


async def _acquire_one(
    coordinator: ShareCoordinator,
    key: ShareKey,
    topic: str,
    plog: PartitionLog,
    member: str,
    max_records: int,
    max_bytes: int,
    mode: int,
) -> tuple[list[AcquiredRange], bytes | None]:
    held = await coordinator.held_partition(
        key, topic, plog.log_start_offset, plog.high_watermark, lambda ts: _offset_at(plog, ts)
    )
    settings = coordinator.group_configs.of(key.group_id)
    committed = settings.read_committed
    upper = plog.last_stable_offset if committed else plog.high_watermark
    offset = held.partition.next_fetch_offset()
    if offset >= upper:
        return [], None
    read = plog.read(offset, max_bytes, upper, True)
    if read.region is None:
        return [], None
    data = read.region.read()
    aborted: Sequence[AbortedTxn] = plog.aborted_transactions(offset, read) if committed else ()
    batches = [
        FetchedBatch(h.base_offset, h.last_offset, h.is_control or _aborted(h, aborted))
        for h in (b.header for b in iter_batches(data))
    ]
    got = coordinator.acquire(key, held, member, batches, max_records, mode)
    return got, (data if got else None)


def _aborted(header: Any, aborted: Sequence[AbortedTxn]) -> bool:
    if not aborted or not header.is_transactional:
        return False
    return any(
        a.producer_id == header.producer_id
        and a.first_offset <= header.base_offset <= a.last_offset
        for a in aborted
    )


def _response(
    ctx: RequestContext,
    coordinator: ShareCoordinator,
    group_id: str,
    results: Results,
    *,
    fetch: bool,
) -> Any:
    by_topic: dict[Any, list[Any]] = {}
    no_leader = ctx.entity("LeaderIdAndEpoch", leader_id=-1, leader_epoch=-1)
    for (tid, partition), r in results.items():
        fields: dict[str, Any] = dict(
            partition_index=partition,
            error_code=r.error if fetch else (r.ack_error or ErrorCode.none),
            error_message=r.message,
            current_leader=no_leader,
        )
        if fetch:
            fields.update(
                acknowledge_error_code=r.ack_error or ErrorCode.none,
                acknowledge_error_message=None,
                records=r.records or b"",  # not nullable in kio's schema
                acquired_records=tuple(
                    ctx.entity(
                        "AcquiredRecords",
                        first_offset=a.first,
                        last_offset=a.last,
                        delivery_count=a.delivery_count,
                    )
                    for a in r.acquired
                ),
            )
        by_topic.setdefault(tid, []).append(ctx.entity("PartitionData", **fields))
    topic_entity = "ShareFetchableTopicResponse" if fetch else "ShareAcknowledgeTopicResponse"
    lock = coordinator.group_configs.of(group_id).lock_duration_ms
    return ctx.response(
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        acquisition_lock_timeout=datetime.timedelta(milliseconds=lock),
        responses=tuple(
            ctx.entity(topic_entity, topic_id=tid, partitions=tuple(parts))
            for tid, parts in by_topic.items()
        ),
        node_endpoints=(),
    )


def _offset_at(plog: PartitionLog, timestamp: int) -> int | None:
    """share.auto.offset.reset=by_duration: the first offset at or after `timestamp`."""
    found = plog.offset_for_timestamp(timestamp)
    return None if found is None else found[0]


HANDLERS: dict[int, Handler] = {
    ApiKey.SHARE_FETCH: handle_share_fetch,
    ApiKey.SHARE_ACKNOWLEDGE: handle_share_acknowledge,
}
