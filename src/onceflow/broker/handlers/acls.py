"""CreateAcls, DescribeAcls and DeleteAcls (KIP-140), as `AdminClient.create_acls` and
`kafka-acls.sh` use them. Changing ACLs needs ALTER on the cluster, reading them DESCRIBE;
without an authorizer configured Kafka answers SECURITY_DISABLED, and so do we."""

from __future__ import annotations

import datetime
from collections import defaultdict
from typing import Any

from onceflow.broker.handlers.base import Handler, RequestContext
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.security.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

_NO_TIME = datetime.timedelta(0)
_DISABLED = "No Authorizer is configured on the broker"


def _enum(kind: Any, value: int) -> Any:
    try:
        return kind(value)
    except ValueError:
        return kind.UNKNOWN


def _filter(request: Any) -> AclBindingFilter:
    return AclBindingFilter(
        resource_type=_enum(ResourceType, request.resource_type_filter),
        name=request.resource_name_filter,
        pattern_type=_enum(PatternType, request.pattern_type_filter),
        principal=request.principal_filter,
        host=request.host_filter,
        operation=_enum(AclOperation, request.operation),
        permission=_enum(AclPermissionType, request.permission_type),
    )


def _refused(ctx: RequestContext, operation: AclOperation) -> tuple[ErrorCode, str | None] | None:
    """Why an ACL request is refused: no authorizer (SECURITY_DISABLED, as Kafka answers),
    or the principal may not do `operation` on the cluster; None when it may go on."""
    if ctx.broker.security.authorizer is None:
        return ErrorCode.security_disabled, _DISABLED
    if not ctx.authorized(operation, ResourceType.CLUSTER, CLUSTER_NAME):
        return ErrorCode.cluster_authorization_failed, None
    return None


async def handle_create_acls(ctx: RequestContext, request: Any) -> Any:
    security = ctx.broker.security
    refused = _refused(ctx, AclOperation.ALTER)
    if refused is not None:
        code, message = refused
        results = tuple(
            ctx.entity("AclCreationResult", error_code=code, error_message=message)
            for _ in request.creations
        )
        return ctx.response(throttle_time=_NO_TIME, results=results)
    bindings = [
        AclBinding(
            ResourcePattern(
                _enum(ResourceType, c.resource_type),
                c.resource_name,
                _enum(PatternType, c.resource_pattern_type),
            ),
            AccessControlEntry(
                c.principal,
                c.host,
                _enum(AclOperation, c.operation),
                _enum(AclPermissionType, c.permission_type),
            ),
        )
        for c in request.creations
    ]
    errors = await security.create_acls(bindings)
    results = tuple(
        ctx.entity(
            "AclCreationResult",
            error_code=ErrorCode.none if error is None else error[0],
            error_message=None if error is None else error[1],
        )
        for error in errors
    )
    return ctx.response(throttle_time=_NO_TIME, results=results)


async def handle_describe_acls(ctx: RequestContext, request: Any) -> Any:
    security = ctx.broker.security

    def failed(code: ErrorCode, message: str | None) -> Any:
        return ctx.response(
            throttle_time=_NO_TIME, error_code=code, error_message=message, resources=()
        )

    refused = _refused(ctx, AclOperation.DESCRIBE)
    if refused is not None:
        return failed(*refused)
    found = security.describe_acls(_filter(request))
    if isinstance(found, tuple):
        return failed(*found)
    by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = defaultdict(list)
    for binding in found:
        by_pattern[binding.pattern].append(binding.entry)
    resources = tuple(
        ctx.entity(
            "DescribeAclsResource",
            resource_type=pattern.resource_type,
            resource_name=pattern.name,
            pattern_type=pattern.pattern_type,
            acls=tuple(
                ctx.entity(
                    "AclDescription",
                    principal=entry.principal,
                    host=entry.host,
                    operation=entry.operation,
                    permission_type=entry.permission,
                )
                for entry in entries
            ),
        )
        for pattern, entries in by_pattern.items()
    )
    return ctx.response(
        throttle_time=_NO_TIME, error_code=ErrorCode.none, error_message=None, resources=resources
    )


async def handle_delete_acls(ctx: RequestContext, request: Any) -> Any:
    security = ctx.broker.security
    refused = _refused(ctx, AclOperation.ALTER)
    if refused is not None:
        code, message = refused
        denied = tuple(
            ctx.entity(
                "DeleteAclsFilterResult", error_code=code, error_message=message, matching_acls=()
            )
            for _ in request.filters
        )
        return ctx.response(throttle_time=_NO_TIME, filter_results=denied)
    outcomes = await security.delete_acls([_filter(f) for f in request.filters])
    results: list[Any] = []
    for outcome in outcomes:
        if isinstance(outcome, tuple):
            results.append(
                ctx.entity(
                    "DeleteAclsFilterResult",
                    error_code=outcome[0],
                    error_message=outcome[1],
                    matching_acls=(),
                )
            )
            continue
        matching = tuple(
            ctx.entity(
                "DeleteAclsMatchingAcl",
                error_code=ErrorCode.none,
                error_message=None,
                resource_type=b.pattern.resource_type,
                resource_name=b.pattern.name,
                pattern_type=b.pattern.pattern_type,
                principal=b.entry.principal,
                host=b.entry.host,
                operation=b.entry.operation,
                permission_type=b.entry.permission,
            )
            for b in outcome
        )
        results.append(
            ctx.entity(
                "DeleteAclsFilterResult",
                error_code=ErrorCode.none,
                error_message=None,
                matching_acls=matching,
            )
        )
    return ctx.response(throttle_time=_NO_TIME, filter_results=tuple(results))


HANDLERS: dict[int, Handler] = {
    ApiKey.CREATE_ACLS: handle_create_acls,
    ApiKey.DESCRIBE_ACLS: handle_describe_acls,
    ApiKey.DELETE_ACLS: handle_delete_acls,
}
