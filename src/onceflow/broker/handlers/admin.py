"""CreateTopics, CreatePartitions and DescribeConfigs (DeleteTopics: topic_deletion.py).

Authorization is Kafka's, checked per topic after a repeated name and before any other
check: CreateTopics needs CREATE on the cluster or on the topic,
CreatePartitions ALTER on the topic; DescribeConfigs needs DESCRIBE_CONFIGS on the topic,
or on the cluster for a broker's configs.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from onceflow.broker.handlers import authz, client_quotas, topic_deletion
from onceflow.broker.handlers.base import Handler, RequestContext
from onceflow.broker.topics import CreatedTopic
from onceflow.config import (
    ConfigError,
    describe_broker_config,
    describe_default_broker_config,
    describe_topic_config,
)
from onceflow.errors import ErrorCode, KafkaError
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.topic_ids import ZERO_UUID
from onceflow.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from onceflow.broker.services import BrokerServices

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
_TOPIC_DENIED = "Authorization failed."  # Kafka's words for CreateTopics
_CONFIGS_VERSION = 5  # CreateTopics answers with the created topic's configs from v5


async def handle_create_topics(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    denied = authz.create_denied(ctx, (t.name for t in request.topics))
    # v5+ answers a created topic's configs only to who may describe them (asked quietly,
    # as Kafka does); others get TOPIC_AUTHORIZATION_FAILED in topic_config_error_code.
    undescribable = authz.denied(
        ctx,
        AclOperation.DESCRIBE_CONFIGS,
        ResourceType.TOPIC,
        (t.name for t in request.topics),
        quiet=True,
    )
    results = []
    seen: set[str] = set()
    for topic in request.topics:
        try:
            if topic.name in seen:
                raise KafkaError(ErrorCode.invalid_request, f"topic '{topic.name}' given twice")
            seen.add(topic.name)
            if topic.name in denied:
                raise KafkaError(ErrorCode.topic_authorization_failed, _TOPIC_DENIED)
            client_quotas.check_mutation(ctx)
            configs, created = await _create_topic(broker, topic, bool(request.validate_only))
            if not request.validate_only:
                client_quotas.record_mutation(ctx, created.partitions)
        except KafkaError as exc:
            results.append(
                ctx.entity(
                    "CreatableTopicResult",
                    name=topic.name,
                    topic_id=ZERO_UUID,
                    error_code=exc.code,
                    error_message=exc.message,
                    configs=(),
                )
            )
            continue
        results.append(_created_result(ctx, topic.name, configs, created, undescribable))
    return ctx.response(throttle_time=datetime.timedelta(0), topics=tuple(results))


async def _create_topic(
    broker: BrokerServices, topic: Any, validate_only: bool
) -> tuple[dict[str, str], CreatedTopic]:
    """Checks in Kafka's order, then creates the topic unless `validate_only`."""
    assignment = _explicit_assignment(broker, topic)
    partitions = (
        broker.config.num_partitions if topic.num_partitions == -1 else topic.num_partitions
    )
    if any(c.value is None for c in topic.configs):
        raise KafkaError(ErrorCode.invalid_config, "null config values are not allowed")
    configs: dict[str, str] = {c.name: c.value for c in topic.configs}
    broker.log_config(configs)  # raises INVALID_CONFIG before anything is created
    if broker.topic_partition_count(topic.name) is not None:
        raise KafkaError(ErrorCode.topic_already_exists, f"topic '{topic.name}' already exists")
    created = await broker.create_topic(
        topic.name,
        partitions,
        configs,
        topic.replication_factor,
        assignment,
        validate_only=validate_only,
    )
    return configs, created


def _created_result(
    ctx: RequestContext,
    name: str,
    configs: dict[str, str],
    created: CreatedTopic,
    undescribable: frozenset[str],
) -> Any:
    """A created topic's result: v5+ adds its effective configs, partition count and
    replication factor, as DescribeConfigs would list them (sensitive values hidden), to a
    principal that may describe them; others get TOPIC_AUTHORIZATION_FAILED for them."""
    described = name not in undescribable
    broker = ctx.broker
    entries = []
    if described and ctx.api_version >= _CONFIGS_VERSION:
        entries = describe_topic_config(
            broker.config.topic_config(configs), configs, broker=broker.config
        )
    return ctx.entity(
        "CreatableTopicResult",
        name=name,
        topic_id=created.topic_id,
        error_code=ErrorCode.none,
        error_message=None,
        num_partitions=created.partitions if described else -1,
        replication_factor=created.replication_factor if described else -1,
        topic_config_error_code=(
            ErrorCode.none if described else ErrorCode.topic_authorization_failed
        ),
        configs=tuple(
            ctx.entity(
                "CreatableTopicConfigs",
                name=e.name,
                value=None if e.is_sensitive else e.value,
                read_only=e.read_only,
                config_source=int(e.source),
                is_sensitive=e.is_sensitive,
            )
            for e in entries
        ),
    )


def _explicit_assignment(broker: BrokerServices, topic: Any) -> dict[int, list[int]] | None:
    """CreateTopics' manual assignment, checked as Kafka checks it."""
    if not topic.assignments:
        return None
    if topic.num_partitions != -1 or topic.replication_factor != -1:
        raise KafkaError(
            ErrorCode.invalid_request,
            "with a replica assignment, num_partitions and replication_factor must be -1",
        )
    live = {node for node, _, _ in broker.nodes()}
    assignment: dict[int, list[int]] = {}
    for entry in topic.assignments:
        replicas = [int(b) for b in entry.broker_ids]
        if not replicas or len(set(replicas)) != len(replicas):
            raise KafkaError(
                ErrorCode.invalid_replica_assignment,
                f"partition {entry.partition_index}: replicas {replicas} are empty or repeat",
            )
        unknown = sorted(set(replicas) - live)
        if unknown:
            raise KafkaError(
                ErrorCode.invalid_replica_assignment,
                f"partition {entry.partition_index}: unknown brokers {unknown}",
            )
        assignment[int(entry.partition_index)] = replicas
    if sorted(assignment) != list(range(len(assignment))):
        raise KafkaError(
            ErrorCode.invalid_replica_assignment, "partitions must be numbered from 0 without gaps"
        )
    if len({len(r) for r in assignment.values()}) != 1:
        raise KafkaError(
            ErrorCode.invalid_replica_assignment, "every partition needs the same replica count"
        )
    return assignment


async def handle_create_partitions(ctx: RequestContext, request: Any) -> Any:
    names = (t.name for t in request.topics)
    denied = authz.denied(ctx, AclOperation.ALTER, ResourceType.TOPIC, names)
    results = []
    seen: set[str] = set()
    for topic in request.topics:
        error, message = ErrorCode.none, None
        try:
            if topic.name in seen:
                raise KafkaError(ErrorCode.invalid_request, f"topic '{topic.name}' given twice")
            seen.add(topic.name)
            if topic.name in denied:
                raise KafkaError(
                    ErrorCode.topic_authorization_failed, "The topic authorization is failed."
                )
            assignments = None
            if topic.assignments is not None:
                assignments = [[int(b) for b in a.broker_ids] for a in topic.assignments]
            client_quotas.check_mutation(ctx)
            before = ctx.broker.topic_partition_count(topic.name) or 0
            await ctx.broker.create_partitions(
                topic.name, int(topic.count), assignments, bool(request.validate_only)
            )
            if not request.validate_only:
                client_quotas.record_mutation(ctx, int(topic.count) - before)
        except KafkaError as exc:
            error, message = exc.code, exc.message
        results.append(
            ctx.entity(
                "CreatePartitionsTopicResult",
                name=topic.name,
                error_code=error,
                error_message=message,
            )
        )
    return ctx.response(throttle_time=datetime.timedelta(0), results=tuple(results))


async def handle_describe_configs(ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    synonyms_wanted = version >= 1 and request.include_synonyms
    docs_wanted = version >= 3 and request.include_documentation
    results = []
    for resource in request.resources:
        error, message, entries = ErrorCode.none, None, []
        try:
            entries = _describe(ctx, resource)
        except KafkaError as exc:
            error, message = exc.code, exc.message
        wanted = resource.configuration_keys
        configs = tuple(
            ctx.entity(
                "DescribeConfigsResourceResult",
                name=e.name,
                value=e.value,
                read_only=e.read_only,
                is_default=e.is_default,
                config_source=int(e.source),
                is_sensitive=e.is_sensitive,
                synonyms=tuple(
                    ctx.entity(
                        "DescribeConfigsSynonym", name=s.name, value=s.value, source=int(s.source)
                    )
                    for s in e.synonyms
                )
                if synonyms_wanted
                else (),
                config_type=int(e.config_type),
                documentation=e.documentation if docs_wanted else None,
            )
            for e in entries
            if wanted is None or e.name in wanted
        )
        results.append(
            ctx.entity(
                "DescribeConfigsResult",
                error_code=error,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                configs=configs,
            )
        )
    return ctx.response(throttle_time=datetime.timedelta(0), results=tuple(results))


def _describe(ctx: RequestContext, resource: Any) -> list[Any]:
    _authorize_describe_configs(ctx, resource)
    broker = ctx.broker
    if resource.resource_type == RESOURCE_TOPIC:
        overrides = broker.topic_configs(resource.resource_name)
        if overrides is None:
            raise KafkaError(
                ErrorCode.unknown_topic_or_partition, f"no topic '{resource.resource_name}'"
            )
        try:
            topic = broker.config.topic_config(overrides)
        except ConfigError as exc:
            raise KafkaError(ErrorCode.invalid_config, str(exc)) from exc
        return list(describe_topic_config(topic, overrides, broker=broker.config))
    if resource.resource_type == RESOURCE_BROKER:
        if resource.resource_name not in ("", str(broker.node_id)):
            raise KafkaError(ErrorCode.invalid_request, f"no broker '{resource.resource_name}'")
        if not resource.resource_name:  # the cluster-wide default: what is set there
            return describe_default_broker_config(broker.config)
        return list(describe_broker_config(broker.config))
    raise KafkaError(
        ErrorCode.invalid_request, f"unsupported resource type {resource.resource_type}"
    )


def _authorize_describe_configs(ctx: RequestContext, resource: Any) -> None:
    """DESCRIBE_CONFIGS on the topic, or on the cluster for a broker (or its loggers)."""
    if resource.resource_type == RESOURCE_TOPIC:
        name = resource.resource_name
        if ctx.authorized(AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, name):
            return
        error = ErrorCode.topic_authorization_failed
    elif resource.resource_type in (RESOURCE_BROKER, RESOURCE_BROKER_LOGGER):
        if authz.cluster_authorized(ctx, AclOperation.DESCRIBE_CONFIGS):
            return
        error = ErrorCode.cluster_authorization_failed
    else:
        return  # refused as unsupported by _describe
    raise KafkaError(error, authz.DENIED_MESSAGES[error])


HANDLERS: dict[int, Handler] = {
    ApiKey.CREATE_TOPICS: handle_create_topics,
    ApiKey.DELETE_TOPICS: topic_deletion.handle_delete_topics,
    ApiKey.CREATE_PARTITIONS: handle_create_partitions,
    ApiKey.DESCRIBE_CONFIGS: handle_describe_configs,
}
