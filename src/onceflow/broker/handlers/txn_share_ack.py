"""TxnShareAcknowledge (Onceflow's own API 32001): a share consumer's acknowledgements made
part of a producer's transaction (protocol/txn_share_acknowledge.py has the wire form).

Sent to the leader of the share-partitions. The broker adds the share-partitions'
`__share_group_state` partitions to the transaction (as AddOffsetsToTxn adds a group's
`__consumer_offsets` partition), then writes each partition's acknowledgements there as
the producer's transactional record. The transaction's COMMIT marker makes them take
effect; its ABORT marker releases the records for another delivery. Until then they stay
acquired, whatever their lock.

On a cluster the three parts may be on three brokers, as a TxnOffsetCommit's are: the
state partitions are added to the transaction at its coordinator (AddPartitionsToTxn, as
a broker sends it), the acknowledgement goes to the state partition's leader (the share
coordinator: TxnWriteShareGroupState), and the markers reach it there. This broker learns
the outcome by asking the share coordinator (ShareCoordinator.check_pending).

Authorization: WRITE on the transactional id and READ on the group, as a transactional
offset commit needs; READ on each topic.
"""

from __future__ import annotations

import datetime
from collections.abc import Awaitable
from typing import Any

from kio.index import load_payload_module
from kio.static.constants import EntityType

from onceflow.broker.handlers.base import Handler, RequestContext
from onceflow.broker.handlers.share_groups import share_coordinator
from onceflow.broker.topics import SHARE_STATE_TOPIC
from onceflow.coordinator.share.coordinator import AckBatch
from onceflow.coordinator.share.records import ShareKey
from onceflow.errors import ErrorCode, KafkaError
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import build, request_type
from onceflow.security.acl import AclOperation, ResourceType

TXN_KEY = 1
#: AddPartitionsToTxn as a broker sends it, v4 without verify_only: added to the
#: transaction as the producer's own AddPartitionsToTxn would (v5 would make a transaction
#: it starts a transaction version 2 one, ending with an epoch bump its client does not
#: expect).
ADD_VERSION = 4


async def handle_txn_share_acknowledge(ctx: RequestContext, request: Any) -> Any:
    tid = request.transactional_id
    if not ctx.authorized(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
        return _failed(ctx, request, ErrorCode.transactional_id_authorization_failed)
    if not ctx.authorized(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return _failed(ctx, request, ErrorCode.group_authorization_failed)
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
        error = await _add_to_transaction(
            ctx, request, [(SHARE_STATE_TOPIC, p) for p in state_partitions]
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


async def _add_to_transaction(
    ctx: RequestContext, request: Any, partitions: list[tuple[str, int]]
) -> ErrorCode:
    """Add the state partitions to the producer's transaction at its coordinator: here, or
    on its broker with AddPartitionsToTxn v4 without verify_only (as a broker asks)."""
    tid = request.transactional_id
    if ctx.broker.coordinator_available(TXN_KEY, tid):
        return await ctx.broker.txn_coordinator.add_partitions(
            tid, request.producer_id, request.producer_epoch, partitions
        )
    try:
        node = ctx.broker.coordinator_node(TXN_KEY, tid)
    except KafkaError as exc:
        return exc.code
    if node is None:
        return ErrorCode.coordinator_not_available
    module = load_payload_module(ApiKey.ADD_PARTITIONS_TO_TXN, ADD_VERSION, EntityType.request)
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    add = build(
        request_type(ApiKey.ADD_PARTITIONS_TO_TXN, ADD_VERSION),
        transactions=(
            build(
                module.AddPartitionsToTxnTransaction,
                transactional_id=tid,
                producer_id=request.producer_id,
                producer_epoch=request.producer_epoch,
                verify_only=False,
                topics=tuple(
                    build(module.AddPartitionsToTxnTopic, name=t, partitions=tuple(ps))
                    for t, ps in by_topic.items()
                ),
            ),
        ),
    )
    try:
        answer = await ctx.broker.topology.peers.share_state(
            node[0], ApiKey.ADD_PARTITIONS_TO_TXN, ADD_VERSION, add
        )
    except KafkaError:
        return ErrorCode.not_coordinator  # unreachable or gone: the client finds it again
    if answer.error_code != ErrorCode.none:
        return ErrorCode(answer.error_code)
    for result in answer.results_by_transaction:
        for topic_result in result.topic_results:
            for part in topic_result.results_by_partition:
                if part.partition_error_code != ErrorCode.none:
                    return ErrorCode(part.partition_error_code)
    return ErrorCode.none


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
