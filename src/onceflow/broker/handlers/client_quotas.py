"""DescribeClientQuotas (48) and AlterClientQuotas (49): KIP-546's client quota API.

As Kafka's KafkaApis and ZooKeeper-era admin manager answer them: describing needs
DESCRIBE_CONFIGS on the cluster and altering ALTER_CONFIGS (else CLUSTER_AUTHORIZATION_FAILED,
for the whole response or for every entry); a bad filter fails the whole description with
INVALID_REQUEST, a bad entry (an unknown entity type or key, a fraction for a byte rate)
only itself. Values are doubles on the wire; a quota the broker keeps is in force on every
broker once the answer is sent here and once their watches see it on a cluster.
"""

from __future__ import annotations

import datetime
from typing import Any

from onceflow.broker.handlers import authz
from onceflow.broker.handlers.base import Handler, RequestContext
from onceflow.broker.quota_entities import FilterComponent, parse_entity
from onceflow.errors import ErrorCode, KafkaError, ProtocolError
from onceflow.protocol.api_versions import ApiKey
from onceflow.security.acl import AclOperation

_NO_TIME = datetime.timedelta(0)
_DENIED = authz.DENIED_MESSAGES[ErrorCode.cluster_authorization_failed]


async def handle_describe_client_quotas(ctx: RequestContext, request: Any) -> Any:
    if request.components is None:  # a null array: Kafka's parser refuses the request
        raise ProtocolError("malformed DescribeClientQuotas request: null components")
    if not authz.cluster_authorized(ctx, AclOperation.DESCRIBE_CONFIGS):
        return ctx.response(
            throttle_time=_NO_TIME,
            error_code=ErrorCode.cluster_authorization_failed,
            error_message=_DENIED,
            entries=None,
        )
    components = [
        FilterComponent(c.entity_type, int(c.match_type), c.match) for c in request.components
    ]
    try:
        found = ctx.broker.client_quotas.describe(components, bool(request.strict))
    except KafkaError as exc:
        return ctx.response(
            throttle_time=_NO_TIME,
            error_code=exc.code,
            error_message=exc.message,
            entries=None,
        )
    entries = tuple(
        ctx.entity(
            "EntryData",
            entity=tuple(
                ctx.entity("EntityData", entity_type=kind, entity_name=name)
                for kind, name in entity.components()
            ),
            values=tuple(
                ctx.entity("ValueData", key=key, value=value)
                for key, value in sorted(values.items())
            ),
        )
        for entity, values in found
    )
    return ctx.response(
        throttle_time=_NO_TIME, error_code=ErrorCode.none, error_message=None, entries=entries
    )


async def handle_alter_client_quotas(ctx: RequestContext, request: Any) -> Any:
    if request.entries is None or any(e.entity is None or e.ops is None for e in request.entries):
        raise ProtocolError("malformed AlterClientQuotas request: a null array")
    authorized = authz.cluster_authorized(ctx, AclOperation.ALTER_CONFIGS)
    results = []
    for entry in request.entries:
        error, message = ErrorCode.none, None
        if not authorized:
            error, message = ErrorCode.cluster_authorization_failed, _DENIED
        else:
            try:
                entity = parse_entity((e.entity_type, e.entity_name) for e in entry.entity)
                ops = [(op.key, float(op.value), bool(op.remove)) for op in entry.ops]
                await ctx.broker.client_quotas.alter(entity, ops, bool(request.validate_only))
            except KafkaError as exc:
                error, message = exc.code, exc.message
        results.append(
            ctx.entity(
                "EntryData",
                error_code=error,
                error_message=message,
                entity=tuple(
                    ctx.entity("EntityData", entity_type=e.entity_type, entity_name=e.entity_name)
                    for e in entry.entity
                ),
            )
        )
    return ctx.response(throttle_time=_NO_TIME, entries=tuple(results))


#: The first version of each topic-mutating API whose topics are refused
#: THROTTLING_QUOTA_EXCEEDED once the client's controller_mutation_rate is used up (KIP-599's
#: strict mode); older versions are only throttled.
STRICT_MUTATIONS_FROM: dict[int, int] = {
    ApiKey.CREATE_TOPICS: 6,
    ApiKey.CREATE_PARTITIONS: 3,
    ApiKey.DELETE_TOPICS: 5,
}


def check_mutation(ctx: RequestContext) -> None:
    """Before a topic's partitions are created or deleted: THROTTLING_QUOTA_EXCEEDED when
    the client's mutation budget is used up and its version is strict."""
    quotas = ctx.broker.client_quotas
    bucket = quotas.mutation_bucket(ctx.session.principal, ctx.header.client_id or "")
    if bucket is None or ctx.api_version < STRICT_MUTATIONS_FROM[ctx.header.api_key]:
        return
    if bucket.delay_ms(quotas.clock.monotonic_ms()) > 0:
        raise KafkaError(
            ErrorCode.throttling_quota_exceeded, "The throttling quota has been exceeded."
        )


def record_mutation(ctx: RequestContext, partitions: int) -> None:
    """After partitions were created or deleted: take them from the client's budget."""
    quotas = ctx.broker.client_quotas
    bucket = quotas.mutation_bucket(ctx.session.principal, ctx.header.client_id or "")
    if bucket is not None and partitions > 0:
        bucket.take(partitions, quotas.clock.monotonic_ms())


HANDLERS: dict[int, Handler] = {
    ApiKey.DESCRIBE_CLIENT_QUOTAS: handle_describe_client_quotas,
    ApiKey.ALTER_CLIENT_QUOTAS: handle_alter_client_quotas,
}
