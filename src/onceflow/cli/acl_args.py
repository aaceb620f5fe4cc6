"""`onceflow acls` arguments to ACLs, as kafka-acls.sh (Kafka's AclCommand) expands them.

Each resource (`--topic`, `--group`, `--transactional-id`, `--cluster`) gets every entry
made of the principals, hosts and operations given: ALLOW entries from `--allow-principal`
and `--allow-host`, DENY ones from `--deny-*`, a missing host meaning `*`. `--producer` and
`--consumer` replace `--operation` with a role's fixed set. Pure functions: `acls` does
the talking to the cluster.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable

from onceflow.cli.common import UsageError
from onceflow.security.acl import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    WILDCARD,
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

__all__ = [
    "CLUSTER",
    "PATTERN_TYPES",
    "check_arguments",
    "entry_text",
    "expand",
    "operation",
    "pattern_text",
    "principal",
    "resource_filters",
]

PatternAcls = dict[ResourcePattern, frozenset[AccessControlEntry]]
Op = AclOperation
CLUSTER = ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL)
PATTERN_TYPES = {
    "literal": PatternType.LITERAL,
    "prefixed": PatternType.PREFIXED,
    "any": PatternType.ANY,
    "match": PatternType.MATCH,
}
# The roles' operations, per resource type (Kafka's --producer and --consumer).
PRODUCER_OPERATIONS = {
    ResourceType.TOPIC: (Op.WRITE, Op.DESCRIBE, Op.CREATE),
    ResourceType.TRANSACTIONAL_ID: (Op.WRITE, Op.DESCRIBE),
}
CONSUMER_OPERATIONS = {
    ResourceType.TOPIC: (Op.READ, Op.DESCRIBE),
    ResourceType.GROUP: (Op.READ,),
}
_SETTABLE_OPERATIONS = [op for op in AclOperation if op not in (Op.UNKNOWN, Op.ANY)]


def _pascal(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def operation(text: str) -> AclOperation:
    """An operation by Kafka's name: `IdempotentWrite`, `IDEMPOTENTWRITE` or `idempotent_write`."""
    wanted = text.strip().replace("_", "").upper()
    for op in _SETTABLE_OPERATIONS:
        if op.name.replace("_", "") == wanted:
            return op
    names = ", ".join(_pascal(op.name) for op in _SETTABLE_OPERATIONS)
    raise UsageError(f"unknown operation {text!r} (valid: {names})")


def principal(text: str) -> str:
    """`Type:name` (User:alice, User:*), as Kafka parses a principal."""
    kind, sep, name = text.strip().partition(":")
    if not sep or not kind:
        raise UsageError(f"expected a principal as Type:name (User:alice), got {text!r}")
    return f"{kind}:{name}"


def pattern_text(pattern: ResourcePattern) -> str:
    """As Kafka prints a ResourcePattern (or the filter made of one)."""
    return (
        f"ResourcePattern(resourceType={pattern.resource_type.name}, name={pattern.name}, "
        f"patternType={pattern.pattern_type.name})"
    )


def entry_text(entry: AccessControlEntry) -> str:
    """As Kafka prints an AccessControlEntry."""
    return (
        f"(principal={entry.principal}, host={entry.host}, "
        f"operation={entry.operation.name}, permissionType={entry.permission.name})"
    )


def check_arguments(args: argparse.Namespace) -> None:
    """The combinations kafka-acls.sh refuses, with its reasons."""
    roles = args.producer or args.consumer
    if args.list and (roles or args.allow_principal or args.deny_principal):
        raise UsageError("--list takes no --producer, --consumer or --allow/--deny options")
    if args.list and (args.allow_host or args.deny_host):
        raise UsageError("--list takes no --allow-host or --deny-host")
    if roles and (args.operation or args.deny_principal or args.deny_host):
        raise UsageError("--producer and --consumer take no --operation or --deny-* option")
    if args.principal and not args.list:
        raise UsageError("--principal is only for --list")
    if args.producer and not args.topic:
        raise UsageError("with --producer you must give a --topic")
    if args.idempotent and not args.producer:
        raise UsageError("--idempotent is only for --producer")
    if args.consumer and (
        not args.topic
        or not args.group
        or (not args.producer and (args.cluster or args.transactional_id))
    ):
        raise UsageError(
            "with --consumer you must give a --topic and a --group, "
            "and no --cluster or --transactional-id"
        )
    if args.add and PATTERN_TYPES[args.resource_pattern_type] not in (
        PatternType.LITERAL,
        PatternType.PREFIXED,
    ):
        raise UsageError(
            f"--resource-pattern-type {args.resource_pattern_type} is not valid when adding "
            "ACLs: use literal or prefixed"
        )


def resource_filters(args: argparse.Namespace, required: bool) -> list[ResourcePattern]:
    """The resources named, with the pattern type given (a filter for list and remove)."""
    kind = PATTERN_TYPES[args.resource_pattern_type]
    found = [ResourcePattern(ResourceType.TOPIC, t.strip(), kind) for t in args.topic]
    # The cluster has one literal name: other pattern types cannot name it, as in Kafka.
    if kind == PatternType.LITERAL and (args.cluster or args.idempotent):
        found.append(CLUSTER)
    found += [ResourcePattern(ResourceType.GROUP, g.strip(), kind) for g in args.group]
    found += [
        ResourcePattern(ResourceType.TRANSACTIONAL_ID, t, kind) for t in args.transactional_id
    ]
    if required and not found:
        raise UsageError(
            "give at least one resource: --topic, --group, --transactional-id or --cluster"
        )
    return list(dict.fromkeys(found))


def _entries(
    args: argparse.Namespace, operations: Iterable[AclOperation]
) -> set[AccessControlEntry]:
    """Every principal x host x operation, ALLOW and DENY; a host defaults to `*`."""
    entries: set[AccessControlEntry] = set()
    ops = list(operations)
    sides = (
        (args.allow_principal, args.allow_host, AclPermissionType.ALLOW),
        (args.deny_principal, args.deny_host, AclPermissionType.DENY),
    )
    for principals, hosts, permission in sides:
        for who in {principal(p) for p in principals}:
            for host in {h.strip() for h in hosts} or {WILDCARD}:
                entries.update(AccessControlEntry(who, host, op, permission) for op in ops)
    return entries


def _role(
    args: argparse.Namespace, roles: dict[ResourceType, tuple[AclOperation, ...]]
) -> dict[ResourcePattern, set[AccessControlEntry]]:
    return {
        pattern: _entries(args, roles[pattern.resource_type])
        for pattern in resource_filters(args, required=True)
        if pattern.resource_type in roles
    }


def expand(args: argparse.Namespace) -> PatternAcls:
    """Each resource (filter) and its entries: what --add creates and --remove deletes.

    An empty set (only with --remove, when no principal is given) means every ACL of the
    resource.
    """
    acls: dict[ResourcePattern, set[AccessControlEntry]] = {}
    if not args.producer and not args.consumer:
        ops = [operation(o) for o in args.operation or ["All"]]
        acls = {p: _entries(args, ops) for p in resource_filters(args, required=True)}
    if args.producer:
        acls.update(_role(args, PRODUCER_OPERATIONS))
        if args.idempotent:
            acls[CLUSTER] = _entries(args, [Op.IDEMPOTENT_WRITE])
    if args.consumer:
        for pattern, entries in _role(args, CONSUMER_OPERATIONS).items():
            acls.setdefault(pattern, set()).update(entries)
    for pattern, entries in acls.items():
        allowed = SUPPORTED_OPERATIONS[pattern.resource_type] | {Op.ALL}
        if any(e.operation not in allowed for e in entries):
            names = ", ".join(sorted(op.name for op in allowed))
            raise UsageError(
                f"ResourceType {pattern.resource_type.name} only supports operations {names}"
            )
    if args.add and any(not entries for entries in acls.values()):
        raise UsageError("give --allow-principal or --deny-principal to add ACLs")
    return {pattern: frozenset(entries) for pattern, entries in acls.items()}
