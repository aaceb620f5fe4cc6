"""The GROUP config resource (type 32, KIP-848/932) of DescribeConfigs and
(Incremental)AlterConfigs: a share group's `share.*` settings.

Authorization is Kafka's: ALTER_CONFIGS or DESCRIBE_CONFIGS on the group. A value out of
its broker bounds, or an unknown key, is INVALID_CONFIG; the overrides are kept in
`__share_group_state` (see coordinator/share/records.py).
"""

from __future__ import annotations

import sys
from typing import Any

from onceflow.broker.handlers.base import RequestContext
from onceflow.broker.handlers.share_groups import share_coordinator
from onceflow.config import AlterConfigOp
from onceflow.config.describe import ConfigEntry, ConfigSource
from onceflow.coordinator.share.group_configs import InvalidGroupConfig
from onceflow.errors import ErrorCode, KafkaError
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import build, request_type
from onceflow.security.acl import AclOperation, ResourceType

RESOURCE_GROUP = 32
FORWARD_VERSION = 1  # IncrementalAlterConfigs, between brokers


async def alter_group(
    ctx: RequestContext,
    name: str,
    ops: list[tuple[str, AlterConfigOp, str | None]],
    incremental: bool,
    validate_only: bool,
) -> None:
    if not ctx.authorized(AclOperation.ALTER_CONFIGS, ResourceType.GROUP, name):
        raise KafkaError(ErrorCode.group_authorization_failed, "Group authorization failed.")
    if not name:
        raise KafkaError(ErrorCode.invalid_request, "Group name must not be empty.")
    coordinator = share_coordinator(ctx)
    if await _forwarded(ctx, name, ops, incremental, validate_only):
        return
    configs = coordinator.group_configs.overrides(name) if incremental else {}
    for key, op, value in ops:
        if op is AlterConfigOp.SET:
            configs[key] = value or ""
        elif op is AlterConfigOp.DELETE:
            configs.pop(key, None)
        else:
            raise KafkaError(
                ErrorCode.invalid_config, f"Config value append is not allowed for config {key}"
            )
    try:
        coordinator.group_configs.validate(configs)
    except InvalidGroupConfig as exc:
        raise KafkaError(ErrorCode.invalid_config, str(exc)) from exc
    if not validate_only:
        await coordinator.set_group_configs(name, configs)


async def _forwarded(
    ctx: RequestContext,
    name: str,
    ops: list[tuple[str, AlterConfigOp, str | None]],
    incremental: bool,
    validate_only: bool,
) -> bool:
    """On a cluster the group's configs live where its `__share_group_state` partition is
    led: another broker's change is sent there (as an IncrementalAlterConfigs; a whole
    AlterConfigs as SETs of its keys and DELETEs of the others). True when it was."""
    coordinator = share_coordinator(ctx)
    changes = [(key, op, value) for key, op, value in ops]
    if not incremental:
        given = {key for key, _, _ in ops}
        changes += [
            (key, AlterConfigOp.DELETE, None)
            for key in coordinator.group_configs.defaults()
            if key not in given
        ]
    request = build(
        request_type(ApiKey.INCREMENTAL_ALTER_CONFIGS, FORWARD_VERSION),
        resources=(
            build(
                nested_request(
                    ApiKey.INCREMENTAL_ALTER_CONFIGS, FORWARD_VERSION, "AlterConfigsResource"
                ),
                resource_type=RESOURCE_GROUP,
                resource_name=name,
                configs=tuple(
                    build(
                        nested_request(
                            ApiKey.INCREMENTAL_ALTER_CONFIGS, FORWARD_VERSION, "AlterableConfig"
                        ),
                        name=key,
                        config_operation=int(op),
                        value=value,
                    )
                    for key, op, value in changes
                ),
            ),
        ),
        validate_only=validate_only,
    )
    answer = await coordinator.persister.alter_group_configs(name, request, FORWARD_VERSION)
    if answer is None:
        return False
    result = answer.responses[0]
    if result.error_code != ErrorCode.none:
        raise KafkaError(ErrorCode(result.error_code), result.error_message or "")
    coordinator.forget_group_configs(name)
    return True


def nested_request(api_key: int, version: int, name: str) -> Any:
    module = sys.modules[request_type(api_key, version).__module__]
    return getattr(module, name)


def describe_group(ctx: RequestContext, name: str) -> list[ConfigEntry]:
    if not ctx.authorized(AclOperation.DESCRIBE_CONFIGS, ResourceType.GROUP, name):
        raise KafkaError(ErrorCode.group_authorization_failed, "Group authorization failed.")
    configs = share_coordinator(ctx).group_configs
    overrides = configs.overrides(name)
    entries = []
    for key, default in sorted(configs.defaults().items()):
        set_here = key in overrides
        entries.append(
            ConfigEntry(
                name=key,
                value=overrides.get(key, default),
                source=ConfigSource.GROUP_CONFIG if set_here else ConfigSource.DEFAULT_CONFIG,
                read_only=False,
                is_default=not set_here,
            )
        )
    return entries
