"""AlterPartitionReassignments and ListPartitionReassignments (KIP-455).

Alter starts, replaces or cancels (null replicas) each partition's reassignment and answers
once the change is written, not when it completes: the controller carries it out (see
`cluster/reassignment.py`), and List shows what is still going on. Alter needs ALTER on the
cluster, List DESCRIBE, else CLUSTER_AUTHORIZATION_FAILED at the top level, as Kafka
answers. Per partition, Kafka's codes: UNKNOWN_TOPIC_OR_PARTITION,
INVALID_REPLICA_ASSIGNMENT (empty, duplicate, negative or dead added replicas),
NO_REASSIGNMENT_IN_PROGRESS (a cancel with nothing to cancel), INVALID_REPLICATION_FACTOR
(v1's allowReplicationFactorChange false and the factor changed).
"""

from __future__ import annotations

import datetime
from typing import Any

from onceflow.broker.handlers import authz
from onceflow.broker.handlers.base import Handler, RequestContext
from onceflow.broker.topology.base import ElectionResult
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.security.acl import AclOperation


async def handle_alter_partition_reassignments(ctx: RequestContext, request: Any) -> Any:
    allow = bool(getattr(request, "allow_replication_factor_change", True))
    if not authz.cluster_authorized(ctx, AclOperation.ALTER):
        return _alter_response(ctx, ErrorCode.cluster_authorization_failed, {}, allow)
    requested: dict[tuple[str, int], tuple[int, ...] | None] = {}
    for topic in request.topics:
        for p in topic.partitions:
            replicas = None if p.replicas is None else tuple(int(r) for r in p.replicas)
            requested[(topic.name, int(p.partition_index))] = replicas
    results = await ctx.broker.topology.alter_partition_reassignments(requested, allow)
    return _alter_response(ctx, ErrorCode.none, results, allow)


def _alter_response(
    ctx: RequestContext,
    error: ErrorCode,
    results: dict[tuple[str, int], ElectionResult],
    allow_rf_change: bool,
) -> Any:
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), (code, message) in sorted(results.items()):
        by_topic.setdefault(topic, []).append(
            ctx.entity(
                "ReassignablePartitionResponse",
                partition_index=partition,
                error_code=code,
                error_message=message,
            )
        )
    return ctx.response(
        throttle_time=datetime.timedelta(0),
        allow_replication_factor_change=allow_rf_change,  # v1 echoes it (KIP-860)
        error_code=error,
        error_message=None,
        responses=tuple(
            ctx.entity("ReassignableTopicResponse", name=topic, partitions=tuple(parts))
            for topic, parts in by_topic.items()
        ),
    )


async def handle_list_partition_reassignments(ctx: RequestContext, request: Any) -> Any:
    if not authz.cluster_authorized(ctx, AclOperation.DESCRIBE):
        return ctx.response(
            throttle_time=datetime.timedelta(0),
            error_code=ErrorCode.cluster_authorization_failed,
            error_message=None,
            topics=(),
        )
    wanted = None
    if request.topics is not None:
        wanted = [(t.name, int(p)) for t in request.topics for p in t.partition_indexes]
    found = ctx.broker.topology.list_partition_reassignments(wanted)
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), (replicas, adding, removing) in sorted(found.items()):
        by_topic.setdefault(topic, []).append(
            ctx.entity(
                "OngoingPartitionReassignment",
                partition_index=partition,
                replicas=replicas,
                adding_replicas=adding,
                removing_replicas=removing,
            )
        )
    return ctx.response(
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        error_message=None,
        topics=tuple(
            ctx.entity("OngoingTopicReassignment", name=topic, partitions=tuple(parts))
            for topic, parts in by_topic.items()
        ),
    )


HANDLERS: dict[int, Handler] = {
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: handle_alter_partition_reassignments,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: handle_list_partition_reassignments,
}
