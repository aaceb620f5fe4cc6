"""InitializeShareGroupState (v0), DeleteShareGroupState (v0) and ReadShareGroupStateSummary
(v0-1): the rest of Kafka's share coordinator API, served where the key's
`__share_group_state` partition is led (NOT_COORDINATOR elsewhere). Brokers only:
CLUSTER_ACTION, as Kafka requires.

Initialize writes a state with no records in flight at the given state epoch and start
offset (FENCED_STATE_EPOCH when a newer epoch is stored); Delete writes the key's
tombstone; the summary is the state epoch, the start offset (-1: no state, as Kafka says
it) and (v1, Kafka 4.2) how many offsets at or past the start offset are delivered for
good.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from onceflow.broker.handlers import authz
from onceflow.broker.handlers.base import Handler, RequestContext
from onceflow.broker.handlers.share_groups import share_coordinator
from onceflow.coordinator.share.records import ShareKey, ShareSnapshot
from onceflow.errors import ErrorCode, KafkaError
from onceflow.protocol.api_versions import ApiKey
from onceflow.security.acl import AclOperation

LEADER_EPOCH = 0  # the share-partition leader's epoch is not kept apart from the state


async def _each(
    ctx: RequestContext,
    request: Any,
    result_entity: str,
    serve: Callable[[ShareKey, Any], Any],
) -> Any:
    """Run `serve` on each partition (its result: the row's fields) and answer by topic."""
    allowed = authz.cluster_authorized(ctx, AclOperation.CLUSTER_ACTION)
    results = []
    for t in request.topics:
        rows = []
        for p in t.partitions:
            fields: dict[str, Any]
            if not allowed:
                fields = {"error_code": ErrorCode.cluster_authorization_failed}
            else:
                try:
                    fields = await serve(ShareKey(request.group_id, t.topic_id, p.partition), p)
                except KafkaError as exc:
                    fields = {"error_code": exc.code, "error_message": exc.message}
            rows.append(ctx.entity("PartitionResult", partition=p.partition, **fields))
        results.append(ctx.entity(result_entity, topic_id=t.topic_id, partitions=tuple(rows)))
    return ctx.response(results=tuple(results))


async def handle_initialize_share_group_state(ctx: RequestContext, request: Any) -> Any:
    store = share_coordinator(ctx).store
    now = ctx.broker.clock.now_ms()

    async def serve(key: ShareKey, p: Any) -> dict[str, Any]:
        stored = store.read(key)
        if stored is not None and stored.state_epoch > p.state_epoch:
            return {"error_code": ErrorCode.fenced_state_epoch}
        await store.write(key, ShareSnapshot(p.state_epoch, max(p.start_offset, 0), ()), now)
        return {"error_code": ErrorCode.none}

    return await _each(ctx, request, "InitializeStateResult", serve)


async def handle_delete_share_group_state(ctx: RequestContext, request: Any) -> Any:
    store = share_coordinator(ctx).store
    now = ctx.broker.clock.now_ms()

    async def serve(key: ShareKey, p: Any) -> dict[str, Any]:
        if store.read(key) is not None:
            await store.delete(key, now)
        return {"error_code": ErrorCode.none}

    return await _each(ctx, request, "DeleteStateResult", serve)


async def handle_read_share_group_state_summary(ctx: RequestContext, request: Any) -> Any:
    store = share_coordinator(ctx).store
    complete_count = ctx.api_version >= 1

    async def serve(key: ShareKey, p: Any) -> dict[str, Any]:
        snapshot = store.read(key)
        fields: dict[str, Any] = {"state_epoch": 0, "leader_epoch": -1, "start_offset": -1}
        if snapshot is None:  # as Kafka: no error, an uninitialized state (start offset -1)
            return {**fields, "error_code": ErrorCode.none}
        fields.update(
            error_code=ErrorCode.none,
            state_epoch=snapshot.state_epoch,
            leader_epoch=LEADER_EPOCH,
            start_offset=snapshot.start_offset,
        )
        if complete_count:
            fields["delivery_complete_count"] = sum(
                b.last - max(b.first, snapshot.start_offset) + 1
                for b in snapshot.batches
                if b.state.terminal and b.last >= snapshot.start_offset
            )
        return fields

    return await _each(ctx, request, "ReadStateSummaryResult", serve)


HANDLERS: dict[int, Handler] = {
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: handle_initialize_share_group_state,
    ApiKey.DELETE_SHARE_GROUP_STATE: handle_delete_share_group_state,
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: handle_read_share_group_state_summary,
}
