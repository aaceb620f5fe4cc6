"""The GROUP config resource (type 32, KIP-848/932) of DescribeConfigs and
(Incremental)AlterConfigs: a share group's `share.*` settings.

Authorization is Kafka's: ALTER_CONFIGS or DESCRIBE_CONFIGS on the group. A value out of
its broker bounds, or an unknown key, is INVALID_CONFIG; the overrides are kept in
`__share_group_state` (see coordinator/share/records.py).
"""

from __future__ import annotations

from onceflow.broker.handlers.base import RequestContext
from onceflow.broker.handlers.share_groups import share_coordinator
from onceflow.config import AlterConfigOp
from onceflow.config.describe import ConfigEntry, ConfigSource
from onceflow.coordinator.share.group_configs import InvalidGroupConfig
from onceflow.errors import ErrorCode, KafkaError
from onceflow.security.acl import AclOperation, ResourceType

RESOURCE_GROUP = 32


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
