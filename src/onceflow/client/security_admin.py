"""The ACL APIs and DescribeUserScramCredentials through Onceflow's own client.

librdkafka mishandles both reads' top-level error (checked against its source, 2.x):
DescribeAcls drops it, so a principal without DESCRIBE on the cluster would see "no ACLs";
DescribeUserScramCredentials frees a string it does not own, and the process aborts. Kafka
sends exactly such an error when the principal may not describe, so these reads raise
`KafkaApiError` with Kafka's code instead. CreateAcls and DeleteAcls are here too because
confluent-kafka's operations stop at IDEMPOTENT_WRITE: it cannot name TWO_PHASE_COMMIT
(KIP-939). AlterUserScramCredentials stays on confluent-kafka.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from onceflow.client.blocking import Connection
from onceflow.client.errors import KafkaApiError, error_name
from onceflow.client.wire import request_entity
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import build, request_type
from onceflow.security import acl
from onceflow.security.scram import ScramMechanism

__all__ = [
    "ScramCredentials",
    "create_acls",
    "delete_acls",
    "describe_acls",
    "describe_scram_credentials",
]

Acls = dict[acl.ResourcePattern, set[acl.AccessControlEntry]]
#: user -> (mechanism, iterations) pairs, or the KafkaApiError that describes the user.
ScramCredentials = dict[str, list[tuple[str, int]] | KafkaApiError]


def _check(code: int, message: str | None, what: str) -> None:
    if code != ErrorCode.none:
        detail = f" ({message})" if message else ""
        raise KafkaApiError(code, f"cannot {what}: {error_name(code)}{detail}")


def describe_acls(connection: Connection, pattern: acl.ResourcePattern | None) -> Acls:
    """The ACLs matching a resource filter (None: every ACL), grouped by resource."""
    version = connection.version_for(ApiKey.DESCRIBE_ACLS)
    request = build(
        request_type(ApiKey.DESCRIBE_ACLS, version),
        resource_type_filter=acl.ResourceType.ANY if pattern is None else pattern.resource_type,
        resource_name_filter=None if pattern is None else pattern.name,
        pattern_type_filter=acl.PatternType.ANY if pattern is None else pattern.pattern_type,
        principal_filter=None,
        host_filter=None,
        operation=acl.AclOperation.ANY,
        permission_type=acl.AclPermissionType.ANY,
    )
    response = connection.call_at(ApiKey.DESCRIBE_ACLS, version, request)
    _check(response.error_code, response.error_message, "describe ACLs")
    found: Acls = defaultdict(set)
    for resource in response.resources:
        pattern_type = getattr(resource, "pattern_type", acl.PatternType.LITERAL)
        key = acl.ResourcePattern(
            acl.ResourceType(resource.resource_type),
            resource.resource_name,
            acl.PatternType(pattern_type),
        )
        found[key].update(
            acl.AccessControlEntry(
                a.principal,
                a.host,
                acl.AclOperation(a.operation),
                acl.AclPermissionType(a.permission_type),
            )
            for a in resource.acls
        )
    return found


def create_acls(
    connection: Connection, pattern: acl.ResourcePattern, entries: list[acl.AccessControlEntry]
) -> None:
    """Add ACLs on one resource pattern; raises on the first one refused."""
    version = connection.version_for(ApiKey.CREATE_ACLS)
    request = build(
        request_type(ApiKey.CREATE_ACLS, version),
        creations=tuple(
            request_entity(
                ApiKey.CREATE_ACLS,
                version,
                "AclCreation",
                resource_type=pattern.resource_type,
                resource_name=pattern.name,
                resource_pattern_type=pattern.pattern_type,
                principal=e.principal,
                host=e.host,
                operation=e.operation,
                permission_type=e.permission,
            )
            for e in entries
        ),
    )
    response = connection.call_at(ApiKey.CREATE_ACLS, version, request)
    for result in response.results:
        _check(result.error_code, result.error_message, "add ACLs")


def delete_acls(
    connection: Connection,
    pattern: acl.ResourcePattern,
    entries: list[acl.AccessControlEntry | None],
) -> int:
    """Remove the ACLs matching each filter: the pattern with an entry, or (None) with any
    principal, host, operation and permission. The number removed."""
    version = connection.version_for(ApiKey.DELETE_ACLS)
    request = build(
        request_type(ApiKey.DELETE_ACLS, version),
        filters=tuple(
            request_entity(
                ApiKey.DELETE_ACLS,
                version,
                "DeleteAclsFilter",
                resource_type_filter=pattern.resource_type,
                resource_name_filter=pattern.name,
                pattern_type_filter=pattern.pattern_type,
                principal_filter=None if e is None else e.principal,
                host_filter=None if e is None else e.host,
                operation=acl.AclOperation.ANY if e is None else e.operation,
                permission_type=acl.AclPermissionType.ANY if e is None else e.permission,
            )
            for e in entries
        ),
    )
    response = connection.call_at(ApiKey.DELETE_ACLS, version, request)
    removed = 0
    for result in response.filter_results:
        _check(result.error_code, result.error_message, "remove ACLs")
        for matched in result.matching_acls:
            _check(matched.error_code, matched.error_message, "remove an ACL")
            removed += 1
    return removed


def describe_scram_credentials(connection: Connection, users: list[str]) -> ScramCredentials:
    """Each user's SCRAM mechanisms and iterations (every user's without names); a user
    without credentials maps to its error (RESOURCE_NOT_FOUND)."""
    api = ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS
    version = connection.version_for(api)
    names: Any = None
    if users:
        names = tuple(request_entity(api, version, "UserName", name=u) for u in users)
    response = connection.call_at(api, version, build(request_type(api, version), users=names))
    _check(response.error_code, response.error_message, "describe SCRAM credentials")
    out: ScramCredentials = {}
    for result in response.results:
        if result.error_code != ErrorCode.none:
            detail = f": {result.error_message}" if result.error_message else ""
            out[result.user] = KafkaApiError(
                result.error_code, f"{error_name(result.error_code)}{detail}"
            )
            continue
        out[result.user] = [
            (_mechanism_name(int(i.mechanism)), int(i.iterations)) for i in result.credential_infos
        ]
    return out


def _mechanism_name(code: int) -> str:
    mechanism = ScramMechanism.from_code(code)
    return f"mechanism {code}" if mechanism is ScramMechanism.UNKNOWN else mechanism.mechanism_name
