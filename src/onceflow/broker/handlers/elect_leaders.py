"""ElectLeaders (KIP-460): an operator gives leadership back to the preferred replicas, or
lets a leaderless partition be led by a replica outside its ISR (unclean, losing what only
the old ISR had).

The topology decides and waits (on a cluster the controller writes the new leaders; alone,
no election is ever needed). Needs ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED,
top level (v1+) and for every partition asked, as Kafka answers. Asked for every partition
(null topic_partitions), the answer leaves out those that needed no election, as Kafka's.
v0 has no election type: preferred.
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

_TYPES = (0, 1)  # PREFERRED, UNCLEAN


async def handle_elect_leaders(ctx: RequestContext, request: Any) -> Any:
    election_type = int(getattr(request, "election_type", 0))
    wanted = None
    if request.topic_partitions is not None:
        wanted = [(t.topic, int(p)) for t in request.topic_partitions for p in t.partitions]
    refusal = None
    if not authz.cluster_authorized(ctx, AclOperation.ALTER):
        refusal = ErrorCode.cluster_authorization_failed
    elif election_type not in _TYPES:
        refusal = ErrorCode.invalid_request
    if refusal is not None:
        return _response(ctx, refusal, {tp: (refusal, None) for tp in wanted or ()})
    timeout_ms = int(request.timeout.total_seconds() * 1000)
    results = await ctx.broker.topology.elect_leaders(election_type, wanted, timeout_ms)
    if wanted is None:
        results = {tp: r for tp, r in results.items() if r[0] != ErrorCode.election_not_needed}
    return _response(ctx, ErrorCode.none, results)


def _response(
    ctx: RequestContext, error: ErrorCode, results: dict[tuple[str, int], ElectionResult]
) -> Any:
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), (code, message) in results.items():
        by_topic.setdefault(topic, []).append(
            ctx.entity(
                "PartitionResult", partition_id=partition, error_code=code, error_message=message
            )
        )
    return ctx.response(
        throttle_time=datetime.timedelta(0),
        error_code=error,
        replica_election_results=tuple(
            ctx.entity("ReplicaElectionResult", topic=topic, partition_result=tuple(parts))
            for topic, parts in by_topic.items()
        ),
    )


HANDLERS: dict[int, Handler] = {ApiKey.ELECT_LEADERS: handle_elect_leaders}
