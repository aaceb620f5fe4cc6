"""`onceflow groups --list|--describe|--delete|--reset-offsets|--delete-offsets`: consumer
groups, as Kafka's `kafka-consumer-groups.sh` manages them, with its options, checks and output;
and share groups too (type Share in --list --type), described, deleted and reset as
`kafka-share-groups.sh` does (share_groups.py, which is that tool's twin).

Kafka's protocol only (confluent-kafka's AdminClient: ListGroups, DescribeGroups,
OffsetFetch, ListOffsets, OffsetCommit, DeleteGroups; OffsetDelete, which it lacks, through
Onceflow's own client), so the same command manages an Apache Kafka cluster. Offsets are reset only
in a group with no members (Empty, or Dead: not there), as Kafka refuses to move them under
running consumers; --dry-run is the default. The calls live in `group_admin` and
`group_delete_offsets`, the reset arithmetic in `group_reset`, the output in `group_views`.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from confluent_kafka import ConsumerGroupState

from onceflow.cli import group_views, share_groups
from onceflow.cli.admin import connect_admin
from onceflow.cli.command_config import add_command_config_option
from onceflow.cli.common import UsageError, add_bootstrap_option, positive_int
from onceflow.cli.group_admin import GroupAdmin
from onceflow.cli.group_delete_offsets import run_delete_offsets
from onceflow.cli.group_reset import (
    SCENARIOS,
    Scenario,
    Tp,
    add_time_targets,
    export_csv,
    parse_topic_arg,
    plan_offsets,
)
from onceflow.cli.group_views import STATE_NAMES, state_name
from onceflow.cli.kafka_wire import wire_cluster
from onceflow.client.errors import ClientError

__all__ = ["register"]

DEFAULT_TIMEOUT_MS = 30_000
INACTIVE = frozenset({ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD})


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "groups",
        help="list, describe and delete consumer groups, reset their offsets "
        "(like kafka-consumer-groups.sh)",
        description="List, describe or delete consumer groups, or reset their committed "
        "offsets, as Kafka's kafka-consumer-groups.sh does. Offsets are reset only while the "
        "group has no members; without --execute the reset is only shown.",
    )
    add_bootstrap_option(parser)
    add_command_config_option(parser)
    parser.add_argument(
        "--timeout-ms",
        "--timeout",
        type=positive_int,
        default=DEFAULT_TIMEOUT_MS,
        help=f"how long to wait for the broker (default {DEFAULT_TIMEOUT_MS})",
    )
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="list the consumer groups")
    action.add_argument(
        "--describe", action="store_true", help="describe groups: offsets and lag by default"
    )
    action.add_argument(
        "--delete", action="store_true", help="delete groups (they must have no members)"
    )
    action.add_argument(
        "--reset-offsets", action="store_true", help="reset offsets of inactive groups"
    )
    action.add_argument(
        "--delete-offsets",
        action="store_true",
        help="delete a group's offsets of the --topic given (not of topics it consumes)",
    )
    many: dict[str, Any] = {"action": "append", "default": []}
    parser.add_argument("--group", metavar="GROUP", help="a consumer group; repeatable", **many)
    parser.add_argument("--all-groups", action="store_true", help="every consumer group")
    parser.add_argument(
        "--topic",
        metavar="TOPIC[:P,...]",
        help="with --reset-offsets or --delete-offsets: a topic, or some of its partitions "
        "(t:0,1); repeatable",
        **many,
    )
    parser.add_argument(
        "--all-topics", action="store_true", help="with --reset-offsets: every committed topic"
    )
    view = parser.add_argument_group("--describe views (at most one)")
    view.add_argument("--offsets", action="store_true", help="offsets and lag (the default)")
    view.add_argument("--members", action="store_true", help="the members")
    view.add_argument(
        "--state",
        nargs="?",
        const="",
        metavar="STATES",
        help="the group's state; with --list: show states, or only these (stable,empty)",
    )
    view.add_argument(
        "--type",
        nargs="?",
        const="",
        metavar="TYPES",
        help="with --list: show group types, or only these (classic,consumer)",
    )
    view.add_argument(
        "--verbose",
        dest="verbose_view",
        action="store_true",
        help="with --members: each member's partitions",
    )
    reset = parser.add_argument_group("--reset-offsets: to where (exactly one)")
    to = reset.add_mutually_exclusive_group()
    to.add_argument("--to-earliest", action="store_true", help="the log start offset")
    to.add_argument("--to-latest", action="store_true", help="the log end offset")
    to.add_argument(
        "--to-current", action="store_true", help="the committed offset (log end without one)"
    )
    to.add_argument("--to-offset", type=int, metavar="OFFSET", help="this offset")
    to.add_argument(
        "--shift-by", type=int, metavar="N", help="the committed offset plus N (may be < 0)"
    )
    add_time_targets(to)
    to.add_argument(
        "--from-file", metavar="CSV", help="the offsets in this file (as --export writes)"
    )
    run_mode = reset.add_mutually_exclusive_group()
    run_mode.add_argument("--dry-run", action="store_true", help="only show (the default)")
    run_mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    reset.add_argument("--export", action="store_true", help="print the plan as CSV")
    parser.set_defaults(func=run_groups, command_parser=parser)


def _check_args(args: argparse.Namespace) -> None:
    """kafka-consumer-groups.sh's checks, with its messages."""
    acting_on_groups = args.describe or args.delete or args.reset_offsets
    if acting_on_groups and not args.group and not args.all_groups:
        raise UsageError(
            f"Option {_action(args)} takes one of these options: --group, --all-groups"
        )
    if args.group and args.all_groups:
        raise UsageError("Option --group is not valid with --all-groups")
    if args.list and args.group:
        raise UsageError("Option --group is not valid with --list")
    views = [name for name in ("members", "offsets") if getattr(args, name)]
    if args.state is not None:
        views.append("state")
    if not args.describe and (args.members or args.offsets or args.verbose_view):
        raise UsageError(f"Option --{views[0] if views else 'verbose'} needs --describe")
    if args.describe and len(views) > 1:
        raise UsageError(
            "Option --describe takes at most one of these options: --members, --offsets, --state"
        )
    if args.describe and args.state:
        raise UsageError("Option --describe does not take a value for --state")
    if args.state is not None and not (args.describe or args.list):
        raise UsageError("Option --state needs --describe or --list")
    if args.type is not None and not args.list:
        raise UsageError("Option --type needs --list")
    if args.list:  # the filters' values, before connecting
        group_views.parse_filter(args.state, STATE_NAMES, "state")
        group_views.parse_filter(args.type, group_views.TYPE_NAMES, "type")
    if args.delete_offsets and (len(args.group) != 1 or not args.topic):
        raise UsageError("Option --delete-offsets takes the following options: --group, --topic")
    if args.delete_offsets and args.all_topics:
        raise UsageError("Option --all-topics is not valid with --delete-offsets")
    if (args.topic or args.all_topics) and not (args.reset_offsets or args.delete_offsets):
        if args.delete and args.topic:
            raise UsageError(
                "The consumer does not support topic-specific offset deletion from a "
                "consumer group."
            )
        raise UsageError("Options --topic and --all-topics need --reset-offsets")
    given = [kind for kind in SCENARIOS if getattr(args, kind) not in (None, False)]
    if not args.reset_offsets:
        if given or args.dry_run or args.execute or args.export:
            raise UsageError(
                "the reset scenarios, --dry-run, --execute and --export need --reset-offsets"
            )
        return
    if not given:
        raise UsageError(
            "Option --reset-offsets requires one of the following scenarios: --to-earliest, "
            "--to-latest, --to-current, --to-offset, --shift-by, --to-datetime, --by-duration, "
            "--from-file"
        )
    if args.topic and args.all_topics:
        raise UsageError("Option --topic is not valid with --all-topics")
    if not args.topic and not args.all_topics and args.from_file is None:
        raise UsageError("One of the reset scopes should be defined: --all-topics, --topic.")


def _action(args: argparse.Namespace) -> str:
    return "--describe" if args.describe else "--delete" if args.delete else "--reset-offsets"


def run_groups(args: argparse.Namespace) -> int:
    _check_args(args)
    if args.reset_offsets and not (args.dry_run or args.execute):
        print(
            "WARN: No action will be performed as the --execute option is missing.", file=sys.stderr
        )
    if args.delete_offsets:
        with wire_cluster(args) as cluster:
            return run_delete_offsets(cluster, args.group[0], args.topic)
    admin = connect_admin(args)
    offsets = GroupAdmin(admin, args.timeout_ms / 1000.0)
    shares = _share_groups(args)
    if args.list:
        return _run_list(offsets, args, shares)
    named = sorted(set(args.group)) if args.group else offsets.group_ids() + sorted(shares)
    groups = [g for g in named if g not in shares]
    share_status = _run_shares(args, [g for g in named if g in shares])
    if not groups and share_status is not None:
        return share_status
    status = _run_consumer_groups(offsets, groups, args)
    return status | (share_status or 0)


def _share_groups(args: argparse.Namespace) -> dict[str, str]:
    """The cluster's share groups and their states (ListGroups of type "share")."""
    try:
        with wire_cluster(args) as cluster:
            return dict(share_groups.listed(cluster))
    except ClientError:  # a broker without share groups (ListGroups before v5): none
        return {}


def _run_shares(args: argparse.Namespace, groups: list[str]) -> int | None:
    """--describe, --delete or --reset-offsets of share groups, as kafka-share-groups.sh
    does them; None when there are none."""
    if not groups:
        return None
    with wire_cluster(args) as cluster:
        if args.delete:
            return share_groups.delete(cluster, groups)
        status = 0
        for group in groups:
            if args.reset_offsets:
                status |= _reset_share(cluster, group, args)
            else:
                view = argparse.Namespace(state=args.state is not None, members=args.members)
                status |= share_groups.describe(cluster, group, view)
        return status


def _reset_share(cluster: Any, group: str, args: argparse.Namespace) -> int:
    if args.to_current or args.shift_by is not None or args.from_file is not None:
        raise UsageError(
            f"Share group '{group}' resets with --to-earliest, --to-latest, --to-offset, "
            "--to-datetime or --by-duration"
        )
    if args.all_topics:
        raise UsageError(f"Share group '{group}' resets the --topic given, not --all-topics")
    topics = [parse_topic_arg(text) for text in args.topic]
    return share_groups.reset(cluster, group, topics, args)


def _run_consumer_groups(offsets: GroupAdmin, groups: list[str], args: argparse.Namespace) -> int:
    if args.delete:
        return _run_delete(offsets, groups)
    if args.reset_offsets:
        return _run_reset(offsets, groups, args)
    described = offsets.describe(groups)
    if args.members:
        return group_views.print_members(described, args.verbose_view)
    if args.state is not None:
        return group_views.print_states(described)
    return group_views.print_offsets(described, offsets)


def _run_list(offsets: GroupAdmin, args: argparse.Namespace, shares: dict[str, str]) -> int:
    listings = [g for g in offsets.listings() if g.group_id not in shares]
    if args.state is None and args.type is None:
        for group in sorted([g.group_id for g in listings] + list(shares)):
            print(group)
        return 0
    states = group_views.parse_filter(args.state, STATE_NAMES, "state")
    types = group_views.parse_filter(args.type, group_views.TYPE_NAMES, "type")
    # ListGroups before v4 (v5) answers no state (type): DescribeGroups has them.
    unknown = [
        listing.group_id
        for listing in listings
        if (args.state is not None and listing.state == ConsumerGroupState.UNKNOWN)
        or (args.type is not None and not group_views.type_name(listing.type))
    ]
    described = {group.name: group for group in offsets.describe(unknown)}
    rows = []
    for listing in listings:
        found = described.get(listing.group_id)
        state = state_name(found.state if found is not None else listing.state)
        kind = group_views.type_name(found.type if found is not None else listing.type)
        if (states and state.lower() not in states) or (types and kind.lower() not in types):
            continue
        rows.append((listing.group_id, kind or "Unknown", state))
    for group_id, share_state in shares.items():  # kafka-share-groups.sh's states
        share = group_views.TYPE_NAMES["SHARE"]
        if (states and share_state.lower() not in states) or (types and "share" not in types):
            continue
        rows.append((group_id, share, share_state))
    rows.sort()
    group_views.print_listing(rows, args.type is not None, args.state is not None)
    return 0


def _run_delete(offsets: GroupAdmin, groups: list[str]) -> int:
    results = offsets.delete(groups)
    failed = {group: error for group, error in results.items() if error is not None}
    deleted = [group for group, error in results.items() if error is None]
    if not failed:
        print(f"Deletion of requested consumer groups ({_quoted(deleted)}) was successful.")
        return 0
    print("Error: Deletion of some consumer groups failed:", file=sys.stderr)
    for group, error in failed.items():
        print(f"* Group '{group}' could not be deleted due to: {error}", file=sys.stderr)
    if deleted:
        print(f"\nThese consumer groups were deleted successfully: {_quoted(deleted)}")
    return 1


def _quoted(groups: list[str]) -> str:
    return ", ".join(f"'{group}'" for group in groups)


def _reset_partitions(offsets: GroupAdmin, group: str, args: argparse.Namespace) -> list[Tp]:
    if args.all_topics:
        return sorted(offsets.committed(group))
    named = [parse_topic_arg(text) for text in args.topic]
    everything = offsets.partitions(sorted({t for t, ps in named if ps is None}))
    chosen: set[Tp] = set()
    for topic, partitions in named:
        chosen.update((topic, p) for p in (everything[topic] if partitions is None else partitions))
    return sorted(chosen)


def _run_reset(offsets: GroupAdmin, groups: list[str], args: argparse.Namespace) -> int:
    scenario = Scenario.from_args(args)
    assert scenario is not None  # _check_args
    status = 0
    plans: dict[str, dict[Tp, int]] = {}
    for group in offsets.describe(groups):
        if group.error is not None:
            print(f"Error: cannot describe group {group.name}: {group.error}", file=sys.stderr)
            status = 1
            continue
        if group.state not in INACTIVE:
            print(
                f"Error: Assignments can only be reset if the group '{group.name}' is inactive, "
                f"but the current state is {state_name(group.state)}.",
                file=sys.stderr,
            )
            status = 1
            continue
        partitions = (
            [] if scenario.kind == "from_file" else _reset_partitions(offsets, group.name, args)
        )
        plan = plan_offsets(
            scenario, group.name, partitions, offsets, _warn, now_ms=int(time.time() * 1000)
        )
        if args.execute and plan:
            offsets.commit(group.name, plan)
        plans[group.name] = plan
    if args.export:
        print(export_csv(plans, single_group=len(args.group) == 1), end="")
    else:
        group_views.print_reset_plan(plans)
    return status


def _warn(message: str) -> None:
    print(f"WARN: {message}", file=sys.stderr)
