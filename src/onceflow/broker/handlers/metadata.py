"""Metadata: brokers, topics and partitions; auto-creates topics as Kafka does.

Alone, the broker lists itself and its own logs; on a cluster, every live broker and each
partition's leader, replicas and ISR as ZooKeeper last told this broker.
"""

from __future__ import annotations

import datetime
from typing import Any

from onceflow.broker.handlers.base import RequestContext
from onceflow.broker.topics import INTERNAL_TOPICS
from onceflow.errors import ErrorCode, KafkaError

# Kafka's "authorized operations not requested" value.
_NO_OPERATIONS = -(2**31)


async def handle_metadata(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    version = ctx.api_version
    if request.topics is None or (version == 0 and not request.topics):
        requested = broker.topic_names()
        auto_create = False
    else:
        requested = [t.name for t in request.topics]
        auto_create = version < 4 or bool(request.allow_auto_topic_creation)
    topics = [await _describe_topic(ctx, name, auto_create) for name in requested]
    nodes = tuple(
        ctx.entity("MetadataResponseBroker", node_id=node, host=host, port=port, rack=None)
        for node, host, port in broker.nodes()
    )
    return ctx.response(
        throttle_time=datetime.timedelta(0),
        brokers=nodes,
        cluster_id=broker.cluster_id,
        controller_id=broker.controller_id(),
        topics=tuple(topics),
        cluster_authorized_operations=_NO_OPERATIONS,
    )


async def _describe_topic(ctx: RequestContext, name: str, auto_create: bool) -> Any:
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
        topic_authorized_operations=_NO_OPERATIONS,
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
