"""Metadata: brokers, topics and partitions; auto-creates topics as Kafka does.

Alone, the broker lists itself and its own logs; on a cluster, every live broker and each
partition's leader, epoch, replicas, ISR and offline replicas as ZooKeeper last told this
broker. From v10 each topic carries its id; from v12 topics may be asked for by id (v10-11
refuse ids and null names with INVALID_REQUEST, as Kafka does), an unknown id answering
UNKNOWN_TOPIC_ID. v13's top-level error code is always NONE here (KIP-1102's
REBOOTSTRAP_REQUIRED is for proxies).

Authorization is Kafka's: asked for every topic, the answer leaves out those the principal
may not DESCRIBE; a named one it may not describe answers TOPIC_AUTHORIZATION_FAILED
without saying whether it exists (by id, the id is no secret and is answered); auto-creating
one needs CREATE on the cluster or on the topic. The authorized-operations fields (v8+, the
cluster's v8-10 only) are filled when the client asks for them. The topics are answered in
Kafka's order: unknown ids, described topics, those refused CREATE, those refused DESCRIBE.
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from onceflow.broker.handlers import authz
from onceflow.broker.handlers.base import RequestContext
from onceflow.broker.topics import INTERNAL_TOPICS, validate_topic_name
from onceflow.errors import ErrorCode, KafkaError
from onceflow.security.acl import CLUSTER_NAME, AclOperation, ResourceType

# Kafka's "authorized operations not requested" value.
_NO_OPERATIONS = -(2**31)
_FIRST_TOPIC_IDS = 10  # topic ids in the answer
_FIRST_LOOKUP_BY_ID = 12
_LAST_CLUSTER_OPERATIONS = 10


async def handle_metadata(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    version = ctx.api_version
    every_topic = request.topics is None or (version == 0 and not request.topics)
    if not every_topic and version >= _FIRST_TOPIC_IDS and _bad_topic_keys(version, request):
        return _invalid_request(ctx, request)
    ids = [] if every_topic or version < _FIRST_LOOKUP_BY_ID else _asked_ids(request)
    unknown_ids: list[uuid.UUID] = []
    auto_create = False
    if every_topic:
        requested = broker.topic_names()
    elif ids:  # any id given: the topics are those ids, names are ignored (as Kafka)
        found = {i: broker.topic_name_by_id(i) for i in ids}
        requested = [name for name in found.values() if name is not None]
        unknown_ids = [i for i, name in found.items() if name is None]
    else:
        requested = list(dict.fromkeys(t.name for t in request.topics))
        auto_create = (version < 4 or bool(request.allow_auto_topic_creation)) and (
            broker.config.auto_create_topics_enable
        )
    hidden = authz.denied(
        ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, requested, quiet=every_topic
    )
    create_denied: frozenset[str] = frozenset()
    if auto_create:
        missing = [
            n for n in requested if n not in hidden and broker.topic_partition_count(n) is None
        ]
        create_denied = authz.create_denied(ctx, missing) if missing else frozenset()
    operations = version >= 8 and bool(request.include_topic_authorized_operations)
    topics = [_unknown_id(ctx, i) for i in unknown_ids]
    for name in requested:
        if name not in hidden and name not in create_denied:
            topics.append(await _describe_topic(ctx, name, auto_create, operations))
    for name in requested:
        if name in create_denied:
            topics.append(_refused(ctx, name, None, internal=name in INTERNAL_TOPICS))
    if not every_topic:  # listing everything, a topic it may not describe is left out
        for name in requested:
            if name in hidden:
                topic_id = broker.topic_id(name) if ids else None
                topics.append(_refused(ctx, None if ids else name, topic_id, internal=False))
    racks = broker.racks()
    nodes = tuple(
        ctx.entity(
            "MetadataResponseBroker", node_id=node, host=host, port=port, rack=racks.get(node)
        )
        for node, host, port in broker.nodes(ctx.session.listener)
    )
    return ctx.response(
        throttle_time=datetime.timedelta(0),
        brokers=nodes,
        cluster_id=broker.cluster_id,
        controller_id=broker.controller_id(),
        topics=tuple(topics),
        cluster_authorized_operations=_cluster_operations(ctx, request),
        error_code=ErrorCode.none,
    )


def _bad_topic_keys(version: int, request: Any) -> bool:
    """Kafka refuses a null name before v12, where names are the only key, and a topic
    with neither a name nor an id at any version (it would describe nothing)."""
    for topic in request.topics:
        if topic.topic_id is not None and version < _FIRST_LOOKUP_BY_ID:
            return True
        if topic.name is None and (topic.topic_id is None or version < _FIRST_LOOKUP_BY_ID):
            return True
    return False


def _asked_ids(request: Any) -> list[uuid.UUID]:
    """The ids asked for, once each (kio reads Kafka's zero id as None)."""
    return list(dict.fromkeys(t.topic_id for t in request.topics if t.topic_id is not None))


def _invalid_request(ctx: RequestContext, request: Any) -> Any:
    """Kafka's MetadataRequest.getErrorResponse: every topic asked for with the error, its
    name ('' for none) and id, and no brokers."""
    topics = tuple(
        ctx.entity(
            "MetadataResponseTopic",
            error_code=ErrorCode.invalid_request,
            name=t.name if t.name is not None else "",
            topic_id=t.topic_id,
            is_internal=False,
            partitions=(),
            topic_authorized_operations=_NO_OPERATIONS,
        )
        for t in request.topics
    )
    return ctx.response(
        throttle_time=datetime.timedelta(0),
        brokers=(),
        cluster_id=None,
        controller_id=-1,
        topics=topics,
        cluster_authorized_operations=_NO_OPERATIONS,
        error_code=ErrorCode.none,
    )


def _cluster_operations(ctx: RequestContext, request: Any) -> int:
    """v8-v10: what the principal may do on the cluster, 0 if it may not even DESCRIBE it."""
    version = ctx.api_version
    if not 8 <= version <= _LAST_CLUSTER_OPERATIONS:
        return _NO_OPERATIONS
    if not request.include_cluster_authorized_operations:
        return _NO_OPERATIONS
    if not authz.cluster_authorized(ctx, AclOperation.DESCRIBE):
        return 0
    return authz.authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)


def _unknown_id(ctx: RequestContext, topic_id: uuid.UUID) -> Any:
    return ctx.entity(
        "MetadataResponseTopic",
        error_code=ErrorCode.unknown_topic_id,
        name=None,
        topic_id=topic_id,
        is_internal=False,
        partitions=(),
        topic_authorized_operations=_NO_OPERATIONS,
    )


def _refused(
    ctx: RequestContext, name: str | None, topic_id: uuid.UUID | None, *, internal: bool
) -> Any:
    return ctx.entity(
        "MetadataResponseTopic",
        error_code=ErrorCode.topic_authorization_failed,
        name=name,
        topic_id=topic_id,
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
        error = _missing(name)
    partitions = ()
    if count is not None:
        partitions = tuple(_describe_partition(ctx, name, p) for p in range(count))
    return ctx.entity(
        "MetadataResponseTopic",
        error_code=error,
        name=name,
        topic_id=broker.topic_id(name),
        is_internal=name in INTERNAL_TOPICS,
        partitions=partitions,
        topic_authorized_operations=authz.authorized_operations(ctx, ResourceType.TOPIC, name)
        if operations
        else _NO_OPERATIONS,
    )


def _missing(name: str) -> ErrorCode:
    """A topic that does not exist: INVALID_TOPIC_EXCEPTION if its name is not legal."""
    try:
        validate_topic_name(name)
    except KafkaError as exc:
        return exc.code
    return ErrorCode.unknown_topic_or_partition


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
