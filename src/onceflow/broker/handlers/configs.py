"""AlterConfigs (33) and IncrementalAlterConfigs (44): a topic's config overrides, and the
broker's dynamic configs (the defaults of the topic-level keys, for the cluster or for this
broker: see broker/dynamic_config.py).

Checks run in Kafka 4.1's order, each resource on its own: the shape of the resource (given
twice, a key given twice, a null value, an unknown operation or resource type:
INVALID_REQUEST), a broker resource's keys (a key that is not dynamic: INVALID_REQUEST, as
Kafka's DynamicBrokerConfig refuses it), then ALTER_CONFIGS on the topic or on the cluster,
then the topic's values (INVALID_CONFIG), then whether the topic exists
(UNKNOWN_TOPIC_OR_PARTITION). AlterConfigs replaces the whole set of a resource's overrides;
IncrementalAlterConfigs SETs, DELETEs, APPENDs to or SUBTRACTs from single keys. Log levels
(BROKER_LOGGER) are not configurable: they get Kafka's answer to an unknown resource type.
"""

from __future__ import annotations

import datetime
import re
from collections import Counter
from typing import Any

from onceflow.broker.handlers import authz
from onceflow.broker.handlers.admin import RESOURCE_BROKER, RESOURCE_TOPIC
from onceflow.broker.handlers.base import Handler, RequestContext
from onceflow.broker.handlers.group_configs import RESOURCE_GROUP, alter_group
from onceflow.broker.topics import validate_topic_name
from onceflow.config import (
    AlterConfigOp,
    ConfigError,
    alter_broker_settings,
    alter_topic_overrides,
)
from onceflow.errors import ErrorCode, KafkaError
from onceflow.protocol.api_versions import ApiKey
from onceflow.security.acl import AclOperation, ResourceType

Op = tuple[str, AlterConfigOp, str | None]
_NODE_ID = re.compile(r"[+-]?[0-9]+")


async def handle_alter_configs(ctx: RequestContext, request: Any) -> Any:
    return await _alter(ctx, request, incremental=False)


async def handle_incremental_alter_configs(ctx: RequestContext, request: Any) -> Any:
    return await _alter(ctx, request, incremental=True)


async def _alter(ctx: RequestContext, request: Any, *, incremental: bool) -> Any:
    given = Counter((r.resource_type, r.resource_name) for r in request.resources)
    validate_only = bool(request.validate_only)
    results = []
    for resource in request.resources:
        error, message = ErrorCode.none, None
        try:
            if given[(resource.resource_type, resource.resource_name)] > 1:
                raise KafkaError(
                    ErrorCode.invalid_request, "Each resource must appear at most once."
                )
            ops = _operations(resource.configs, incremental)
            if resource.resource_type == RESOURCE_TOPIC:
                await _alter_topic(ctx, resource.resource_name, ops, incremental, validate_only)
            elif resource.resource_type == RESOURCE_BROKER:
                await _alter_broker(ctx, resource.resource_name, ops, incremental, validate_only)
            elif resource.resource_type == RESOURCE_GROUP:
                await alter_group(ctx, resource.resource_name, ops, incremental, validate_only)
            else:
                raise KafkaError(
                    ErrorCode.invalid_request, f"Unknown resource type {resource.resource_type}"
                )
        except KafkaError as exc:
            error, message = exc.code, exc.message or None
        results.append(
            ctx.entity(
                "AlterConfigsResourceResponse",
                error_code=error,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
            )
        )
    return ctx.response(throttle_time=datetime.timedelta(0), responses=tuple(results))


def _operations(configs: Any, incremental: bool) -> list[Op]:
    """The resource's (key, operation, value) list, refused as Kafka's preprocessing refuses
    it: a key twice, a null value (except to DELETE), an unknown operation."""
    if len({c.name for c in configs}) != len(configs):
        raise KafkaError(ErrorCode.invalid_request, "Error due to duplicate config keys")
    ops: list[Op] = []
    nulls = []
    for config in configs:
        code = int(config.config_operation) if incremental else AlterConfigOp.SET
        if code not in AlterConfigOp.__members__.values():
            raise KafkaError(ErrorCode.invalid_request, f"Unknown operations type {code}")
        op = AlterConfigOp(code)
        if config.value is None and op is not AlterConfigOp.DELETE:
            nulls.append(config.name)
        ops.append((config.name, op, config.value))
    if nulls:
        raise KafkaError(
            ErrorCode.invalid_request, f"Null value not supported for : {', '.join(nulls)}"
        )
    return ops


def _refuse(error: ErrorCode) -> KafkaError:
    return KafkaError(error, authz.DENIED_MESSAGES[error])


async def _alter_topic(
    ctx: RequestContext, name: str, ops: list[Op], incremental: bool, validate_only: bool
) -> None:
    if not ctx.authorized(AclOperation.ALTER_CONFIGS, ResourceType.TOPIC, name):
        raise _refuse(ErrorCode.topic_authorization_failed)
    if not name:
        raise KafkaError(ErrorCode.invalid_request, "Default topic resources are not allowed.")
    validate_topic_name(name)
    broker = ctx.broker

    def change(current: dict[str, str]) -> dict[str, str]:
        if not incremental:
            return {key: value or "" for key, _, value in ops}
        try:
            return alter_topic_overrides(broker.config.topic_config(current), current, ops)
        except ConfigError as exc:
            raise KafkaError(ErrorCode.invalid_config, str(exc)) from exc

    await broker.alter_topic_configs(name, change, validate_only)


async def _alter_broker(
    ctx: RequestContext, name: str, ops: list[Op], incremental: bool, validate_only: bool
) -> None:
    """This broker's entity (its id) or the cluster-wide default (""): checked here before
    authorization, as Kafka's brokers check it before forwarding to the controller."""
    node = ctx.broker.node_id
    if name:
        if not _NODE_ID.fullmatch(name):
            raise KafkaError(
                ErrorCode.invalid_request, f"Node id must be an integer, but it is: {name}"
            )
        if int(name) != node:
            raise KafkaError(
                ErrorCode.invalid_request,
                f"Unexpected broker id, expected {node}, but received {name}",
            )
    dynamic = ctx.broker.dynamic_config

    def change(current: dict[str, str]) -> dict[str, str]:
        if not incremental:
            return {key: value or "" for key, _, value in ops}
        try:
            return alter_broker_settings(ctx.broker.config, current, ops)
        except ConfigError as exc:
            raise KafkaError(ErrorCode.invalid_config, str(exc)) from exc

    entity = dynamic.entity(name)
    dynamic.check(entity, dynamic.entities.get(entity, {}), change)
    if not authz.cluster_authorized(ctx, AclOperation.ALTER_CONFIGS):
        raise _refuse(ErrorCode.cluster_authorization_failed)
    if not validate_only:
        await dynamic.alter(entity, change)


HANDLERS: dict[int, Handler] = {
    ApiKey.ALTER_CONFIGS: handle_alter_configs,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: handle_incremental_alter_configs,
}
