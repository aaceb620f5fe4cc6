"""`onceflow acls` argument expansion, checked against what Kafka's AclCommand expands the
same arguments to (--producer, --consumer, hosts, DENY, pattern types, refused mixes)."""

from __future__ import annotations

import argparse

import pytest

from onceflow.cli import acl_args
from onceflow.cli.common import UsageError
from onceflow.cli.main import build_parser
from onceflow.security.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

Op = AclOperation
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


def args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["acls", *argv])


def expand(*argv: str) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
    parsed = args(*argv)
    acl_args.check_arguments(parsed)
    return acl_args.expand(parsed)


def topic(name: str, kind: PatternType = PatternType.LITERAL) -> ResourcePattern:
    return ResourcePattern(ResourceType.TOPIC, name, kind)


def group(name: str) -> ResourcePattern:
    return ResourcePattern(ResourceType.GROUP, name, PatternType.LITERAL)


def txn(name: str) -> ResourcePattern:
    return ResourcePattern(ResourceType.TRANSACTIONAL_ID, name, PatternType.LITERAL)


def entries(
    who: str, ops: list[AclOperation], host: str = "*", permission: AclPermissionType = ALLOW
) -> frozenset[AccessControlEntry]:
    return frozenset(AccessControlEntry(who, host, op, permission) for op in ops)


def test_producer_gets_write_describe_create_on_each_topic() -> None:
    acls = expand("--add", "--producer", "--allow-principal", "User:alice", "--topic", "a")
    assert acls == {topic("a"): entries("User:alice", [Op.WRITE, Op.DESCRIBE, Op.CREATE])}


def test_transactional_idempotent_producer() -> None:
    acls = expand(
        "--add",
        "--producer",
        "--idempotent",
        "--allow-principal",
        "User:alice",
        "--topic",
        "a",
        "--transactional-id",
        "t1",
    )
    assert acls == {
        topic("a"): entries("User:alice", [Op.WRITE, Op.DESCRIBE, Op.CREATE]),
        txn("t1"): entries("User:alice", [Op.WRITE, Op.DESCRIBE]),
        acl_args.CLUSTER: entries("User:alice", [Op.IDEMPOTENT_WRITE]),
    }


def test_consumer_gets_read_describe_on_topic_and_read_on_group() -> None:
    acls = expand(
        "--add", "--consumer", "--allow-principal", "User:bob", "--topic", "a", "--group", "g"
    )
    assert acls == {
        topic("a"): entries("User:bob", [Op.READ, Op.DESCRIBE]),
        group("g"): entries("User:bob", [Op.READ]),
    }


def test_producer_and_consumer_together_merge_on_the_topic() -> None:
    acls = expand(
        "--add",
        "--producer",
        "--consumer",
        "--allow-principal",
        "User:bob",
        "--topic",
        "a",
        "--group",
        "g",
    )
    assert acls[topic("a")] == entries("User:bob", [Op.WRITE, Op.DESCRIBE, Op.CREATE, Op.READ])
    assert acls[group("g")] == entries("User:bob", [Op.READ])


def test_principals_hosts_and_operations_multiply() -> None:
    acls = expand(
        "--add",
        "--allow-principal",
        "User:a",
        "--allow-principal",
        "User:b",
        "--allow-host",
        "10.0.0.1",
        "--allow-host",
        "10.0.0.2",
        "--operation",
        "Read",
        "--operation",
        "DESCRIBE",
        "--topic",
        "t",
    )
    assert len(acls[topic("t")]) == 2 * 2 * 2
    assert {e.host for e in acls[topic("t")]} == {"10.0.0.1", "10.0.0.2"}


def test_deny_entries_and_the_default_operation_all() -> None:
    acls = expand(
        "--add",
        "--allow-principal",
        "User:*",
        "--deny-principal",
        "User:mallory",
        "--deny-host",
        "6.6.6.6",
        "--topic",
        "t",
    )
    assert acls[topic("t")] == entries("User:*", [Op.ALL]) | entries(
        "User:mallory", [Op.ALL], "6.6.6.6", DENY
    )


def test_prefixed_pattern_and_the_cluster_only_when_literal() -> None:
    acls = expand(
        "--add",
        "--allow-principal",
        "User:a",
        "--operation",
        "Describe",
        "--topic",
        "pay",
        "--cluster",
        "--resource-pattern-type",
        "prefixed",
    )
    assert set(acls) == {topic("pay", PatternType.PREFIXED)}


def test_remove_without_principals_means_every_acl_of_the_resource() -> None:
    assert expand("--remove", "--topic", "t") == {topic("t"): frozenset()}


def test_operation_names_as_kafka_spells_them() -> None:
    for text in ("IdempotentWrite", "IDEMPOTENTWRITE", "idempotent_write", " Idempotentwrite "):
        assert acl_args.operation(text) == Op.IDEMPOTENT_WRITE
    with pytest.raises(UsageError, match="unknown operation"):
        acl_args.operation("Any")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--add", "--allow-principal", "User:a", "--operation", "Write", "--group", "g"], "GROUP"),
        (["--add", "--allow-principal", "User:a", "--operation", "Read", "--cluster"], "CLUSTER"),
        (["--add", "--allow-principal", "alice", "--topic", "t"], "Type:name"),
        (["--add", "--topic", "t"], "--allow-principal"),
        (["--add", "--allow-principal", "User:a"], "at least one resource"),
    ],
)
def test_refused_acls(argv: list[str], message: str) -> None:
    parsed = args(*argv)
    acl_args.check_arguments(parsed)
    with pytest.raises(UsageError, match=message):
        acl_args.expand(parsed)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--list", "--producer", "--topic", "t"], "--list"),
        (["--list", "--allow-host", "h", "--topic", "t"], "--list"),
        (["--add", "--producer", "--operation", "Read", "--topic", "t"], "--operation"),
        (["--add", "--consumer", "--deny-principal", "User:a", "--topic", "t"], "--deny"),
        (["--add", "--principal", "User:a", "--topic", "t"], "--principal"),
        (["--add", "--producer", "--group", "g"], "--topic"),
        (["--add", "--idempotent", "--topic", "t"], "--idempotent"),
        (["--add", "--consumer", "--topic", "t"], "--group"),
        (["--add", "--consumer", "--topic", "t", "--group", "g", "--cluster"], "--cluster"),
        (["--add", "--topic", "t", "--resource-pattern-type", "match"], "match"),
    ],
)
def test_refused_combinations(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        acl_args.check_arguments(args(*argv))


def test_kafka_listing_text() -> None:
    entry = AccessControlEntry("User:alice", "*", Op.IDEMPOTENT_WRITE, ALLOW)
    assert acl_args.pattern_text(acl_args.CLUSTER) == (
        "ResourcePattern(resourceType=CLUSTER, name=kafka-cluster, patternType=LITERAL)"
    )
    assert acl_args.entry_text(entry) == (
        "(principal=User:alice, host=*, operation=IDEMPOTENT_WRITE, permissionType=ALLOW)"
    )
