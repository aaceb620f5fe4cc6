"""The authorization patterns the handlers share, as Kafka's KafkaApis and AuthHelper use them.

Without an authorizer everything is allowed, and the helpers here return before looking
at a request. Checks are made once per distinct resource name in a request (Kafka's
filterByAuthorized), never per partition or record. A denial is audited, except where Kafka
asks with logIfDenied=false (`quiet`): a first try that has a fallback, a filter over
resources the client did not name, the authorized-operations fields.
docs/authorization.md lists what each API needs.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any

from onceflow.broker.handlers.base import RequestContext
from onceflow.errors import ErrorCode
from onceflow.records.batch import ATTRIBUTES_OFFSET, MAGIC_OFFSET, TRANSACTIONAL_FLAG
from onceflow.security.acl import CLUSTER_NAME, SUPPORTED_OPERATIONS, AclOperation, ResourceType

__all__ = [
    "DENIED_MESSAGES",
    "allowed",
    "authorized_operations",
    "cluster_authorized",
    "create_denied",
    "denied",
    "has_transactional_records",
]

Op = AclOperation

#: Kafka's message for each authorization error, where a response carries one.
DENIED_MESSAGES = {
    ErrorCode.topic_authorization_failed: "Topic authorization failed.",
    ErrorCode.group_authorization_failed: "Group authorization failed.",
    ErrorCode.cluster_authorization_failed: "Cluster authorization failed.",
    ErrorCode.transactional_id_authorization_failed: "Transactional Id authorization failed.",
}


_ATTRIBUTES = struct.Struct(">h")
_CURRENT_MAGIC = 2


def allowed(
    ctx: RequestContext,
    operation: AclOperation,
    resource_type: ResourceType,
    name: str,
    *,
    quiet: bool = False,
) -> bool:
    """`ctx.authorized`, or with `quiet` the same decision without an audit line."""
    return ctx.authorized(operation, resource_type, name, log_denied=not quiet)


def denied(
    ctx: RequestContext,
    operation: AclOperation,
    resource_type: ResourceType,
    names: Iterable[str],
    *,
    quiet: bool = False,
) -> frozenset[str]:
    """The names the principal may not `operation`: one check per distinct name, and none
    at all (not even iterating `names`) without an authorizer."""
    if ctx.broker.authorizer is None:
        return frozenset()
    return frozenset(
        name for name in set(names) if not allowed(ctx, operation, resource_type, name, quiet=quiet)
    )


def cluster_authorized(
    ctx: RequestContext, operation: AclOperation, *, quiet: bool = False
) -> bool:
    """`operation` on the one CLUSTER resource."""
    return allowed(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME, quiet=quiet)


def create_denied(ctx: RequestContext, names: Iterable[str]) -> frozenset[str]:
    """The topic names the principal may not create: CREATE on CLUSTER covers every topic
    (asked once, quietly), else CREATE on each topic, as Kafka checks CreateTopics and
    auto-creation."""
    if ctx.broker.authorizer is None or cluster_authorized(ctx, Op.CREATE, quiet=True):
        return frozenset()
    return denied(ctx, Op.CREATE, ResourceType.TOPIC, names)


def authorized_operations(ctx: RequestContext, resource_type: ResourceType, name: str) -> int:
    """Kafka's bitfield (bit n set: operation code n allowed) of what the principal may do
    on the resource, among the operations Kafka supports for its type; all of them without
    an authorizer."""
    field = 0
    for operation in sorted(SUPPORTED_OPERATIONS[resource_type]):
        if allowed(ctx, operation, resource_type, name, quiet=True):
            field |= 1 << operation
    return field


def has_transactional_records(request: Any) -> bool:
    """Whether any partition's first batch in a Produce request is transactional (Kafka's
    RequestUtils.hasTransactionalRecords). Reads one header field; the full validation
    comes later, at the append."""
    for topic in request.topic_data:
        for data in topic.partition_data:
            records = data.records
            if (
                records is not None
                and len(records) >= ATTRIBUTES_OFFSET + _ATTRIBUTES.size
                and records[MAGIC_OFFSET] == _CURRENT_MAGIC
                and _ATTRIBUTES.unpack_from(records, ATTRIBUTES_OFFSET)[0] & TRANSACTIONAL_FLAG
            ):
                return True
    return False
