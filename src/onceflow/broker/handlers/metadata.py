"""Metadata: brokers, topics and partitions; auto-creates topics as Kafka does."""

from __future__ import annotations

import datetime
from typing import Any

from onceflow.broker.handlers.base import RequestContext
from onceflow.errors import ErrorCode, KafkaError

# Kafka's "authorized operations not requested" value.
_NO_OPERATIONS = -(2**31)


async def handle_metadata(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    version = ctx.api_version
    if request.topics is None or (version == 0 and not request.topics):
        names = sorted(t for t in broker.logs.topics if not broker.logs.topics[t].internal)
        names += sorted(t for t in broker.logs.topics if broker.logs.topics[t].internal)
        requested: list[str] = names
        auto_create = False
    else:
        requested = [t.name for t in request.topics]
        auto_create = version < 4 or bool(request.allow_auto_topic_creation)
    topics = [_describe_topic(ctx, name, auto_create) for name in requested]
    node = ctx.entity(
        "MetadataResponseBroker",
        node_id=broker.node_id,
        host=broker.advertised_host,
        port=broker.advertised_port,
        rack=None,
    )
    return ctx.response(
        throttle_time=datetime.timedelta(0),
        brokers=(node,),
        cluster_id=broker.cluster_id,
        controller_id=broker.node_id,
        topics=tuple(topics),
        cluster_authorized_operations=_NO_OPERATIONS,
    )


def _describe_topic(ctx: RequestContext, name: str, auto_create: bool) -> Any:
    broker = ctx.broker
    info = broker.logs.topics.get(name)
    error = ErrorCode.none
    if info is None and auto_create:
        try:
            info = broker.auto_create_topic(name)
        except KafkaError as exc:
            error = exc.code
    if info is None and error is ErrorCode.none:
        error = ErrorCode.unknown_topic_or_partition
    partitions = ()
    if info is not None:
        partitions = tuple(_describe_partition(ctx, name, p) for p in range(info.partitions))
    return ctx.entity(
        "MetadataResponseTopic",
        error_code=error,
        name=name,
        is_internal=bool(info and info.internal),
        partitions=partitions,
        topic_authorized_operations=_NO_OPERATIONS,
    )


def _describe_partition(ctx: RequestContext, topic: str, partition: int) -> Any:
    """Kafka's view of a partition whose only replica is offline (its log failed): no
    leader, LEADER_NOT_AVAILABLE, the replica listed as offline."""
    node = ctx.broker.node_id
    plog = ctx.broker.logs.get(topic, partition)
    offline = plog is not None and plog.offline is not None
    return ctx.entity(
        "MetadataResponsePartition",
        error_code=ErrorCode.leader_not_available if offline else ErrorCode.none,
        partition_index=partition,
        leader_id=-1 if offline else node,
        leader_epoch=0,
        replica_nodes=(node,),
        isr_nodes=() if offline else (node,),
        offline_replicas=(node,) if offline else (),
    )
