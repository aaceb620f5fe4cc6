"""TxnShareAcknowledge (Onceflow's own API 32001): a share consumer's acknowledgements made
part of a producer's transaction (protocol/txn_share_acknowledge.py has the wire form).

Sent to the leader of the share-partitions. The broker adds the share-partitions'
`__share_group_state` partitions to the transaction (as AddOffsetsToTxn adds a group's
`__consumer_offsets` partition), then writes each partition's acknowledgements there as
the producer's transactional record. The transaction's COMMIT marker makes them take
effect; its ABORT marker releases the records for another delivery. Until then they stay
acquired, whatever their lock. The transaction's coordinator must be on this broker
(always so on a single broker); elsewhere the answer is NOT_COORDINATOR.

Authorization: WRITE on the transactional id and READ on the group, as a transactional
offset commit needs; READ on each topic.
"""

from __future__ import annotations

import datetime
from collections.abc import Awaitable
from typing import Any

from onceflow.broker.handlers.base import Handler, RequestContext
from onceflow.broker.handlers.share_groups import share_coordinator
from onceflow.broker.topics import SHARE_STATE_TOPIC
from onceflow.coordinator.share.coordinator import AckBatch
from onceflow.coordinator.share.records import ShareKey
from onceflow.errors import ErrorCode, KafkaError
from onceflow.protocol.api_versions import ApiKey
from onceflow.security.acl import AclOperation, ResourceType

TXN_KEY = 1


async def handle_txn_share_acknowledge(ctx: RequestContext, request: Any) -> Any:
    tid = request.transactional_id
    if not ctx.authorized(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
        return _failed(ctx, request, ErrorCode.transactional_id_authorization_failed)
    if not ctx.authorized(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return _failed(ctx, request, ErrorCode.group_authorization_failed)
    if not ctx.broker.coordinator_available(TXN_KEY, tid):
        return _failed(ctx, request, ErrorCode.not_coordinator)
    coordinator = share_coordinator(ctx)
    codes: dict[tuple[Any, int], ErrorCode] = {}
    wanted: list[tuple[Any, int, ShareKey, list[AckBatch]]] = []
    for topic in request.topics:
        name = ctx.broker.topic_name_by_id(topic.topic_id)
        for p in topic.partitions:
            where = (topic.topic_id, p.partition_index)
            if name is None:
                codes[where] = ErrorCode.unknown_topic_id
            elif not ctx.authorized(AclOperation.READ, ResourceType.TOPIC, name):
                codes[where] = ErrorCode.topic_authorization_failed
            elif not _leads(ctx, name, p.partition_index):
                codes[where] = ErrorCode.not_leader_or_follower
            else:
                key = ShareKey(request.group_id, topic.topic_id, p.partition_index)
                batches: list[AckBatch] = [
                    (b.first_offset, b.last_offset, tuple(b.acknowledge_types))
                    for b in p.acknowledgement_batches
                ]
                wanted.append((topic.topic_id, p.partition_index, key, batches))
    state_partitions = sorted({coordinator.store.partition_for(k) for _, _, k, _ in wanted})
    if state_partitions:
        error = await ctx.broker.txn_coordinator.add_partitions(
            tid,
            request.producer_id,
            request.producer_epoch,
            [(SHARE_STATE_TOPIC, p) for p in state_partitions],
        )
        if error is not ErrorCode.none:
            return _failed(ctx, request, error)
    pending: list[tuple[tuple[Any, int], Awaitable[int]]] = []
    for topic_id, partition, key, batches in wanted:
        try:
            error, written = coordinator.txn_acknowledge(
                key,
                request.member_id,
                batches,
                tid,
                request.producer_id,
                request.producer_epoch,
            )
        except KafkaError as exc:
            error, written = exc.code, None
        codes[(topic_id, partition)] = error
        if written is not None:
            pending.append(((topic_id, partition), written))
    for where, written in pending:
        try:
            await written
        except KafkaError as exc:
            codes[where] = exc.code
    return _answer(ctx, codes)


def _leads(ctx: RequestContext, topic: str, partition: int) -> bool:
    try:
        ctx.broker.leader_log(topic, partition)
    except KafkaError:
        return False
    return True


def _failed(ctx: RequestContext, request: Any, error: ErrorCode) -> Any:
    return _answer(
        ctx, {(t.topic_id, p.partition_index): error for t in request.topics for p in t.partitions}
    )


def _answer(ctx: RequestContext, codes: dict[tuple[Any, int], ErrorCode]) -> Any:
    by_topic: dict[Any, list[Any]] = {}
    for (topic_id, partition), code in codes.items():
        by_topic.setdefault(topic_id, []).append(
            ctx.entity("PartitionData", partition_index=partition, error_code=code)
        )
    return ctx.response(
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        responses=tuple(
            ctx.entity("TopicResponse", topic_id=tid, partitions=tuple(parts))
            for tid, parts in by_topic.items()
        ),
    )


HANDLERS: dict[int, Handler] = {ApiKey.TXN_SHARE_ACKNOWLEDGE: handle_txn_share_acknowledge}
