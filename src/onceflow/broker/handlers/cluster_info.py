"""DescribeCluster (KIP-700): the cluster id, the controller and every live broker, as an
admin client's describe_cluster() shows them.

As in Kafka, anyone may ask; only the cluster's authorized operations, when asked for,
depend on the principal (0 without DESCRIBE on the cluster). A broker serves the BROKER
endpoint type only (v1+): any other is UNSUPPORTED_ENDPOINT_TYPE with Kafka's empty answer.
v2's fenced brokers (KIP-1073) are KRaft's: here a broker is registered in ZooKeeper, and
listed, or is not, so none is ever fenced and include_fenced_brokers adds nobody.
"""

from __future__ import annotations

import datetime
from typing import Any

from onceflow.broker.handlers import authz
from onceflow.broker.handlers.base import Handler, RequestContext
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.security.acl import CLUSTER_NAME, AclOperation, ResourceType

_NO_OPERATIONS = -(2**31)
ENDPOINT_BROKERS = 1
_ENDPOINT_NAMES = {ENDPOINT_BROKERS: "BROKER", 2: "CONTROLLER"}


async def handle_describe_cluster(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    endpoint = getattr(request, "endpoint_type", ENDPOINT_BROKERS)
    if endpoint != ENDPOINT_BROKERS:
        # Kafka's AuthHelper.computeDescribeClusterResponse, its message's wording included.
        return ctx.response(
            throttle_time=datetime.timedelta(0),
            error_code=ErrorCode.unsupported_endpoint_type,
            error_message="The request was sent to an endpoint of type BROKER, but we wanted "
            f"an endpoint of type {_ENDPOINT_NAMES.get(endpoint, 'UNKNOWN')}",
            endpoint_type=ENDPOINT_BROKERS,
            cluster_id="",
            controller_id=-1,
            brokers=(),
            cluster_authorized_operations=_NO_OPERATIONS,
        )
    racks = ctx.broker.racks()
    brokers = tuple(
        ctx.entity(
            "DescribeClusterBroker",
            broker_id=node,
            host=host,
            port=port,
            rack=racks.get(node),
            is_fenced=False,
        )
        for node, host, port in broker.nodes(ctx.session.listener)
    )
    return ctx.response(
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=ENDPOINT_BROKERS,
        cluster_id=broker.cluster_id,
        controller_id=broker.controller_id(),
        brokers=brokers,
        cluster_authorized_operations=_cluster_operations(ctx, request),
    )


def _cluster_operations(ctx: RequestContext, request: Any) -> int:
    if not request.include_cluster_authorized_operations:
        return _NO_OPERATIONS
    if not authz.cluster_authorized(ctx, AclOperation.DESCRIBE):
        return 0
    return authz.authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)


HANDLERS: dict[int, Handler] = {ApiKey.DESCRIBE_CLUSTER: handle_describe_cluster}
