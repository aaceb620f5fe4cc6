"""ReadShareGroupState and WriteShareGroupState (v0): the share coordinator's side of
Kafka's persister, asked by the broker leading a share-partition's topic partition when
another broker leads its `__share_group_state` partition; and Onceflow's
TxnWriteShareGroupState, the transactional acknowledgement's hop. Brokers only:
CLUSTER_ACTION on the cluster, as Kafka requires. A read shows records tied to an open
transaction as Acquired: the leader holds them until they are not."""

from __future__ import annotations

import datetime
from typing import Any

from onceflow.broker.handlers import authz
from onceflow.broker.handlers.base import Handler, RequestContext
from onceflow.broker.handlers.share_groups import share_coordinator
from onceflow.coordinator.share.partition import StateBatch
from onceflow.coordinator.share.records import ShareKey, ShareSnapshot
from onceflow.coordinator.share.state import RecordState
from onceflow.errors import ErrorCode, KafkaError
from onceflow.protocol.api_versions import ApiKey
from onceflow.security.acl import AclOperation


async def handle_read_share_group_state(ctx: RequestContext, request: Any) -> Any:
    allowed = authz.cluster_authorized(ctx, AclOperation.CLUSTER_ACTION)
    store = share_coordinator(ctx).store
    results = []
    for t in request.topics:
        rows = []
        for p in t.partitions:
            fields: dict[str, Any] = dict(
                partition=p.partition, state_epoch=-1, start_offset=-1, state_batches=()
            )
            if not allowed:
                fields["error_code"] = ErrorCode.cluster_authorization_failed
            else:
                try:
                    key = ShareKey(request.group_id, t.topic_id, p.partition)
                    snapshot = store.read_with_pending(key)
                except KafkaError as exc:
                    fields["error_code"] = exc.code
                else:
                    if snapshot is None:  # as Kafka: no error, an uninitialized state
                        fields.update(error_code=ErrorCode.none, state_epoch=0)
                    else:
                        fields.update(
                            error_code=ErrorCode.none,
                            state_epoch=snapshot.state_epoch,
                            start_offset=snapshot.start_offset,
                            state_batches=tuple(
                                ctx.entity(
                                    "StateBatch",
                                    first_offset=b.first,
                                    last_offset=b.last,
                                    delivery_state=int(b.state),
                                    delivery_count=b.delivery_count,
                                )
                                for b in snapshot.batches
                            ),
                        )
            rows.append(ctx.entity("PartitionResult", **fields))
        results.append(ctx.entity("ReadStateResult", topic_id=t.topic_id, partitions=tuple(rows)))
    return ctx.response(results=tuple(results))


async def handle_write_share_group_state(ctx: RequestContext, request: Any) -> Any:
    allowed = authz.cluster_authorized(ctx, AclOperation.CLUSTER_ACTION)
    coordinator = share_coordinator(ctx)
    now = ctx.broker.clock.now_ms()
    results = []
    for t in request.topics:
        rows = []
        for p in t.partitions:
            code = ErrorCode.none if allowed else ErrorCode.cluster_authorization_failed
            if allowed:
                snapshot = ShareSnapshot(
                    p.state_epoch,
                    p.start_offset,
                    tuple(
                        StateBatch(
                            b.first_offset,
                            b.last_offset,
                            RecordState(b.delivery_state),
                            b.delivery_count,
                        )
                        for b in p.state_batches
                    ),
                )
                try:
                    await coordinator.store.write(
                        ShareKey(request.group_id, t.topic_id, p.partition), snapshot, now
                    )
                except (KafkaError, ValueError) as exc:
                    code = exc.code if isinstance(exc, KafkaError) else ErrorCode.invalid_request
            rows.append(ctx.entity("PartitionResult", partition=p.partition, error_code=code))
        results.append(ctx.entity("WriteStateResult", topic_id=t.topic_id, partitions=tuple(rows)))
    return ctx.response(results=tuple(results))


async def handle_txn_write_share_group_state(ctx: RequestContext, request: Any) -> Any:
    """Onceflow's TxnWriteShareGroupState: a transactional acknowledgement appended here as
    its producer's record (the share-partition's leader added this partition to the
    transaction first; the append is verified with its coordinator, KIP-890)."""
    if not authz.cluster_authorized(ctx, AclOperation.CLUSTER_ACTION):
        return ctx.response(
            throttle_time=datetime.timedelta(0),
            error_code=ErrorCode.cluster_authorization_failed,
            results=(),
        )
    store = share_coordinator(ctx).store
    now = ctx.broker.clock.now_ms()
    results = []
    for t in request.topics:
        rows = []
        for p in t.partitions:
            key = ShareKey(request.group_id, t.topic_id, p.partition)
            code = ErrorCode.none
            try:
                ranges = tuple(
                    (r.first_offset, r.last_offset, RecordState(r.delivery_state)) for r in p.ranges
                )
                await store.write_txn_update(
                    key,
                    ranges,
                    request.transactional_id,
                    request.producer_id,
                    request.producer_epoch,
                    now,
                )
            except KafkaError as exc:
                code = exc.code
            except ValueError:
                code = ErrorCode.invalid_request
            rows.append(ctx.entity("PartitionResult", partition=p.partition, error_code=code))
        results.append(ctx.entity("TopicResult", topic_id=t.topic_id, partitions=tuple(rows)))
    return ctx.response(
        throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, results=tuple(results)
    )


HANDLERS: dict[int, Handler] = {
    ApiKey.READ_SHARE_GROUP_STATE: handle_read_share_group_state,
    ApiKey.WRITE_SHARE_GROUP_STATE: handle_write_share_group_state,
    ApiKey.TXN_WRITE_SHARE_GROUP_STATE: handle_txn_write_share_group_state,
}
