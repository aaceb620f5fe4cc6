"""Metadata: brokers, topics and partitions; auto-creates topics as Kafka does.

Alone, the broker lists itself and its own logs; on a cluster, every live broker and each
partition's leader, replicas and ISR as ZooKeeper last told this broker.

Authorization is Kafka's: asked for every topic, the answer leaves out those the principal
may not DESCRIBE; a named one it may not describe answers TOPIC_AUTHORIZATION_FAILED
without saying whether it exists; auto-creating one needs CREATE on the cluster or on the
topic. The v8 authorized-operations fields are filled when the client asks for them.
"""

from __future__ import annotations

import datetime
from typing import Any

from onceflow.broker.handlers import authz
from onceflow.broker.handlers.base import RequestContext
from onceflow.broker.topics import INTERNAL_TOPICS
from onceflow.errors import ErrorCode, KafkaError
from onceflow.security.acl import CLUSTER_NAME, AclOperation, ResourceType

# Kafka's "authorized operations not requested" value.
_NO_OPERATIONS = -(2**31)


async def handle_metadata(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    version = ctx.api_version
    every_topic = request.topics is None or (version == 0 and not request.topics)
    if every_topic:
        requested = broker.topic_names()
        auto_create = False
    else:
        requested = [t.name for t in request.topics]
        auto_create = version < 4 or bool(request.allow_auto_topic_creation)
    hidden = authz.denied(
        ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, requested, quiet=every_topic
    )
    create_denied: frozenset[str] = frozenset()
    if auto_create and broker.config.auto_create_topics_enable:
        missing = [
            n for n in requested if n not in hidden and broker.topic_partition_count(n) is None
        ]
        create_denied = authz.create_denied(ctx, missing) if missing else frozenset()
    operations = version >= 8 and bool(request.include_topic_authorized_operations)
    topics = []
    for name in requested:
        if name in hidden:
            if not every_topic:  # listing everything, the topic is simply left out
                topics.append(_refused(ctx, name, internal=False))
        elif name in create_denied:
            topics.append(_refused(ctx, name, internal=name in INTERNAL_TOPICS))
        else:
            topics.append(await _describe_topic(ctx, name, auto_create, operations))
    nodes = tuple(
        ctx.entity("MetadataResponseBroker", node_id=node, host=host, port=port, rack=None)
        for node, host, port in broker.nodes(ctx.session.listener)
    )
    return ctx.response(
        throttle_time=datetime.timedelta(0),
        brokers=nodes,
        cluster_id=broker.cluster_id,
        controller_id=broker.controller_id(),
        topics=tuple(topics),
        cluster_authorized_operations=_cluster_operations(ctx, request),
    )


def _cluster_operations(ctx: RequestContext, request: Any) -> int:
    """v8-v10: what the principal may do on the cluster, 0 if it may not even DESCRIBE it."""
    if ctx.api_version < 8 or not request.include_cluster_authorized_operations:
        return _NO_OPERATIONS
    if not authz.cluster_authorized(ctx, AclOperation.DESCRIBE):
        return 0
    return authz.authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)


def _refused(ctx: RequestContext, name: str, *, internal: bool) -> Any:
    return ctx.entity(
        "MetadataResponseTopic",
        error_code=ErrorCode.topic_authorization_failed,
        name=name,
        is_internal=internal,
        partitions=(),
        topic_authorized_operations=_NO_OPERATIONS,
    )


async def _describe_topic(
    ctx: RequestContext, name: str, auto_create: bool, operations: bool
) -> Any:
    broker = ctx.broker
    count = broker.topic_partition_count(name)
    error = ErrorCode.none
    if count is None and auto_create:
        try:
            await broker.auto_create_topic(name)
        except KafkaError as exc:
            error = exc.code
        count = broker.topic_partition_count(name)
    if count is None and error is ErrorCode.none:
        error = ErrorCode.unknown_topic_or_partition
    partitions = ()
    if count is not None:
        partitions = tuple(_describe_partition(ctx, name, p) for p in range(count))
    return ctx.entity(
        "MetadataResponseTopic",
        error_code=error,
        name=name,
        is_internal=name in INTERNAL_TOPICS,
        partitions=partitions,
        topic_authorized_operations=authz.authorized_operations(ctx, ResourceType.TOPIC, name)
        if operations
        else _NO_OPERATIONS,
    )


def _describe_partition(ctx: RequestContext, topic: str, partition: int) -> Any:
    view = ctx.broker.partition_view(topic, partition)
    return ctx.entity(
        "MetadataResponsePartition",
        error_code=view.error,
        partition_index=partition,
        leader_id=view.leader,
        leader_epoch=view.leader_epoch,
        replica_nodes=view.replicas,
        isr_nodes=view.isr,
        offline_replicas=view.offline,
    )
