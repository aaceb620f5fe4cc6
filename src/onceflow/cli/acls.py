"""`onceflow acls --add|--remove|--list`: ACLs, as Kafka's `kafka-acls.sh` manages them.

Kafka's protocol only, so the same command manages an Apache Kafka cluster, through
`onceflow.client.security_admin`: librdkafka hides DescribeAcls' authorization error, and
its operations stop before TWO_PHASE_COMMIT. The arguments expand as kafka-acls.sh expands
them (`acl_args`) and the output reads like its output.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from onceflow.cli import acl_args
from onceflow.cli.acl_args import PATTERN_TYPES, entry_text, pattern_text
from onceflow.cli.command_config import add_command_config_option
from onceflow.cli.common import add_bootstrap_option, positive_int
from onceflow.cli.kafka_wire import wire_cluster
from onceflow.client.cluster import Cluster
from onceflow.client.security_admin import create_acls, delete_acls, describe_acls
from onceflow.security import acl

__all__ = ["register"]

DEFAULT_TIMEOUT_MS = 30_000
Entries = Iterable[acl.AccessControlEntry]


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "acls",
        help="add, remove and list ACLs (like kafka-acls.sh)",
        description="Add, remove or list ACLs, as Kafka's kafka-acls.sh does. DENY wins "
        "over ALLOW; a principal is Type:name (User:alice, User:*).",
    )
    add_bootstrap_option(parser)
    add_command_config_option(parser)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add ACLs")
    action.add_argument("--remove", action="store_true", help="remove ACLs")
    action.add_argument("--list", action="store_true", help="list ACLs (of the resources given)")
    many: dict[str, Any] = {"action": "append", "default": []}
    parser.add_argument("--topic", metavar="TOPIC", help="a topic ('*': all); repeatable", **many)
    parser.add_argument("--group", metavar="GROUP", help="a consumer group; repeatable", **many)
    parser.add_argument(
        "--transactional-id", metavar="ID", help="a transactional id; repeatable", **many
    )
    parser.add_argument("--cluster", action="store_true", help="the cluster resource")
    parser.add_argument(
        "--resource-pattern-type",
        choices=sorted(PATTERN_TYPES),
        default="literal",
        help="literal or prefixed to add; any or match also to list or remove (match: every "
        "ACL that applies to the names given; take care with --remove) (default literal)",
    )
    parser.add_argument("--allow-principal", metavar="P", help="Type:name; repeatable", **many)
    parser.add_argument("--deny-principal", metavar="P", help="Type:name; repeatable", **many)
    parser.add_argument(
        "--allow-host", metavar="HOST", help="of --allow-principal (default *)", **many
    )
    parser.add_argument(
        "--deny-host", metavar="HOST", help="of --deny-principal (default *)", **many
    )
    parser.add_argument(
        "--operation",
        metavar="OP",
        action="append",
        help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
        "AlterConfigs, IdempotentWrite, TwoPhaseCommit or All (default All); repeatable",
    )
    parser.add_argument(
        "--producer",
        action="store_true",
        help="a producer's ACLs: WRITE, DESCRIBE, CREATE on the topics; WRITE, DESCRIBE on "
        "the --transactional-id",
    )
    parser.add_argument(
        "--idempotent", action="store_true", help="with --producer: IDEMPOTENT_WRITE on the cluster"
    )
    parser.add_argument(
        "--consumer",
        action="store_true",
        help="a consumer's ACLs: READ, DESCRIBE on the topics; READ on the group",
    )
    parser.add_argument(
        "--principal", metavar="P", help="with --list: only this principal's ACLs", **many
    )
    parser.add_argument("--force", action="store_true", help="remove without asking")
    parser.add_argument(
        "--timeout-ms",
        type=positive_int,
        default=DEFAULT_TIMEOUT_MS,
        help=f"how long to wait for the broker (default {DEFAULT_TIMEOUT_MS})",
    )
    parser.set_defaults(func=run_acls, command_parser=parser)


# ---- output ------------------------------------------------------------------------------


def _order(pattern: acl.ResourcePattern) -> tuple[int, int, str]:
    return int(pattern.resource_type), int(pattern.pattern_type), pattern.name


def _entry_order(entry: acl.AccessControlEntry) -> tuple[str, str, int, int]:
    return entry.principal, entry.host, int(entry.operation), int(entry.permission)


def _entry_lines(entries: Entries) -> str:
    return "\n".join(f"\t{entry_text(e)}" for e in sorted(entries, key=_entry_order))


def _print_acls(acls: dict[acl.ResourcePattern, set[acl.AccessControlEntry]]) -> None:
    for pattern in sorted(acls, key=_order):
        print(f"Current ACLs for resource `{pattern_text(pattern)}`:")
        print(_entry_lines(acls[pattern]) + "\n")


def _confirm(args: argparse.Namespace, question: str) -> bool:
    if args.force:
        return True
    print(question, flush=True)
    try:
        return input().strip().lower() == "y"
    except EOFError:
        return False


# ---- actions -----------------------------------------------------------------------------


def _add(cluster: Cluster, args: argparse.Namespace) -> None:
    for pattern, entries in sorted(acl_args.expand(args).items(), key=lambda i: _order(i[0])):
        existing = describe_acls(cluster.bootstrap, pattern).get(pattern, set())
        for entry in sorted(entries & existing, key=_entry_order):
            print(
                f"Acl (pattern={pattern_text(pattern)}, entry={entry_text(entry)}) already exists."
            )
        new = sorted(entries - existing, key=_entry_order)
        if not new:
            continue
        print(f"Adding ACLs for resource `{pattern_text(pattern)}`: ")
        print(_entry_lines(new) + "\n")
        create_acls(cluster.bootstrap, pattern, new)


def _remove(cluster: Cluster, args: argparse.Namespace) -> None:
    for pattern, entries in sorted(acl_args.expand(args).items(), key=lambda i: _order(i[0])):
        shown = f"resource filter `{pattern_text(pattern)}`"
        if entries:
            question = (
                f"Are you sure you want to remove ACLs: \n{_entry_lines(entries)}\n "
                f"from {shown}? (y/n)"
            )
            filters: list[acl.AccessControlEntry | None] = [*sorted(entries, key=_entry_order)]
        else:
            question = f"Are you sure you want to delete all ACLs for {shown}? (y/n)"
            filters = [None]
        if not _confirm(args, question):
            continue
        removed = delete_acls(cluster.bootstrap, pattern, filters)
        print(f"Removed {removed} ACL{'' if removed == 1 else 's'} matching {shown}.")


def _list(cluster: Cluster, args: argparse.Namespace) -> None:
    acls: dict[acl.ResourcePattern, set[acl.AccessControlEntry]] = defaultdict(set)
    wanted: list[acl.ResourcePattern | None] = [*acl_args.resource_filters(args, required=False)]
    for pattern in wanted or [None]:
        for found, entries in describe_acls(cluster.bootstrap, pattern).items():
            acls[found] |= entries
    if not args.principal:
        _print_acls(acls)
        return
    for who in dict.fromkeys(acl_args.principal(p) for p in args.principal):
        print(f"ACLs for principal `{who}`")
        mine = {p: {e for e in es if e.principal == who} for p, es in acls.items()}
        _print_acls({p: es for p, es in mine.items() if es})


def run_acls(args: argparse.Namespace) -> int:
    acl_args.check_arguments(args)
    if not args.list:
        acl_args.expand(args)  # a usage error before connecting
    with wire_cluster(args) as cluster:
        if args.remove:
            _remove(cluster, args)
        elif args.add:
            _add(cluster, args)
        else:
            _list(cluster, args)
    return 0
