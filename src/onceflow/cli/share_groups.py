"""`onceflow share-groups --list|--describe|--delete|--reset-offsets|--delete-offsets`:
share groups (KIP-932), as Kafka's `kafka-share-groups.sh` manages them.

Kafka's protocol only, through Onceflow's own client (confluent-kafka's AdminClient has no
share-group calls): ListGroups (type "share"), ShareGroupDescribe, DescribeShareGroupOffsets,
AlterShareGroupOffsets, DeleteShareGroupOffsets and DeleteGroups. Start offsets are reset
only in a group without members, as Kafka refuses to move them under running consumers;
without --execute the reset is only shown.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from onceflow.cli.command_config import add_command_config_option
from onceflow.cli.common import CliError, UsageError, add_bootstrap_option, positive_int
from onceflow.cli.group_reset import add_time_targets
from onceflow.cli.kafka_wire import wire_cluster
from onceflow.client.cluster import Cluster
from onceflow.client.errors import error_name
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import request_type

__all__ = ["delete", "describe", "listed", "register", "reset"]

MISSING = "-"


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "share-groups",
        help="list, describe and delete share groups, reset their start offsets "
        "(like kafka-share-groups.sh)",
        description="List, describe or delete share groups (KIP-932), or reset their start "
        "offsets, as Kafka's kafka-share-groups.sh does.",
    )
    add_bootstrap_option(parser)
    add_command_config_option(parser)
    parser.add_argument(
        "--timeout-ms",
        "--timeout",
        type=positive_int,
        default=30_000,
        help="how long to wait for the broker (default 30000)",
    )
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="list the share groups")
    action.add_argument("--describe", action="store_true", help="describe share groups")
    action.add_argument("--delete", action="store_true", help="delete share groups")
    action.add_argument(
        "--reset-offsets", action="store_true", help="reset a group's start offsets"
    )
    action.add_argument(
        "--delete-offsets", action="store_true", help="forget a group's state of topics"
    )
    parser.add_argument("--group", action="append", metavar="GROUP", help="a share group")
    parser.add_argument("--topic", action="append", metavar="TOPIC", help="a topic")
    view = parser.add_mutually_exclusive_group()
    view.add_argument("--offsets", action="store_true", help="start offsets and lag (default)")
    view.add_argument("--members", action="store_true", help="the members")
    view.add_argument("--state", action="store_true", help="the group's state")
    to = parser.add_mutually_exclusive_group()
    to.add_argument("--to-earliest", action="store_true", help="the log start offset")
    to.add_argument("--to-latest", action="store_true", help="the log end offset")
    to.add_argument("--to-offset", type=int, metavar="OFFSET", help="this offset")
    add_time_targets(to)
    run_mode = parser.add_mutually_exclusive_group()
    run_mode.add_argument("--dry-run", action="store_true", help="only show (the default)")
    run_mode.add_argument("--execute", action="store_true", help="apply the new offsets")
    parser.set_defaults(func=run_share_groups, command_parser=parser)


def run_share_groups(args: argparse.Namespace) -> int:
    if not args.list and not args.group:
        raise UsageError("Option --group is required")
    with wire_cluster(args) as cluster:
        if args.list:
            for group_id, _ in listed(cluster):
                print(group_id)
            return 0
        if args.delete:
            return delete(cluster, args.group)
        if args.reset_offsets:
            if not args.topic:
                raise UsageError("Option --reset-offsets needs --topic")
            return reset(cluster, args.group[0], [(t, None) for t in args.topic], args)
        if args.delete_offsets:
            return _delete_offsets(cluster, args.group[0], args.topic or [])
        status = 0
        for group_id in args.group:
            status |= describe(cluster, group_id, args)
        return status


def listed(cluster: Cluster) -> list[tuple[str, str]]:
    """Every share group of the cluster, with its state (ListGroups of type "share")."""
    out: list[tuple[str, str]] = []
    for node in cluster.brokers():
        answer = cluster.node(node.node_id).call(
            ApiKey.LIST_GROUPS, states_filter=(), types_filter=("share",)
        )
        out.extend((g.group_id, g.group_state) for g in answer.groups)
    return sorted(out)


def _coordinator(cluster: Cluster, group_id: str) -> Any:
    return cluster.group_coordinator(group_id)[1]


def describe(cluster: Cluster, group_id: str, args: argparse.Namespace) -> int:
    """kafka-share-groups.sh --describe: start offsets and lag, or --members, or --state."""
    conn = _coordinator(cluster, group_id)
    group = conn.call(
        ApiKey.SHARE_GROUP_DESCRIBE, group_ids=(group_id,), include_authorized_operations=False
    ).groups[0]
    if group.error_code != ErrorCode.none:
        print(f"Error: Share group '{group_id}': {error_name(group.error_code)}", file=sys.stderr)
        return 1
    if args.state:
        rows = [["GROUP", "COORDINATOR (ID)", "STATE", "#MEMBERS"]]
        node = cluster.group_coordinator(group_id)[0]
        rows.append([group_id, f"({node})", group.group_state, str(len(group.members))])
        _table(rows)
        return 0
    if args.members:
        rows = [["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]]
        for m in group.members:
            parts = [
                f"{t.topic_name}:{','.join(map(str, t.partitions))}"
                for t in m.assignment.topic_partitions
            ]
            count = sum(len(t.partitions) for t in m.assignment.topic_partitions)
            rows.append(
                [group_id, m.member_id, m.client_host, m.client_id, str(count), ";".join(parts)]
            )
        _table(rows)
        return 0
    entity = request_type(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1)
    module = sys.modules[entity.__module__]
    answer = conn.call(
        ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
        groups=(module.DescribeShareGroupOffsetsRequestGroup(group_id=group_id, topics=None),),
    ).groups[0]
    rows = [["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"]]
    for t in answer.topics:
        for p in t.partitions:
            start = str(p.start_offset) if p.start_offset >= 0 else MISSING
            lag = str(p.lag) if getattr(p, "lag", -1) >= 0 else MISSING
            rows.append([group_id, t.topic_name, str(p.partition_index), start, lag])
    _table(rows)
    return 0


def delete(cluster: Cluster, groups: list[str]) -> int:
    status = 0
    for group_id in groups:
        answer = _coordinator(cluster, group_id).call(
            ApiKey.DELETE_GROUPS, groups_names=(group_id,)
        )
        code = answer.results[0].error_code
        if code == ErrorCode.none:
            print(f"Deletion of requested share groups ('{group_id}') was successful.")
        else:
            print(
                f"Error: Share group '{group_id}' could not be deleted due to: {error_name(code)}",
                file=sys.stderr,
            )
            status = 1
    return status


def reset(
    cluster: Cluster,
    group_id: str,
    topics: list[tuple[str, list[int] | None]],
    args: argparse.Namespace,
) -> int:
    """Reset the start offsets of the topics' partitions (all, or those listed); shown,
    and applied with --execute (AlterShareGroupOffsets)."""
    scenarios = (args.to_earliest, args.to_latest, args.to_offset is not None)
    if not any(scenarios) and args.to_datetime is None and args.by_duration is None:
        raise UsageError(
            "Option --reset-offsets needs one of --to-earliest, --to-latest, --to-offset, "
            "--to-datetime, --by-duration"
        )
    metadata = cluster.metadata([t for t, _ in topics])
    plan: list[tuple[str, int, int]] = []
    for topic, chosen in topics:
        leaders = metadata.leaders.get(topic)
        if leaders is None:
            raise CliError(f"Topic {topic} does not exist")
        for p in sorted(leaders) if chosen is None else sorted(chosen):
            plan.append((topic, p, _target(cluster, topic, p, args)))
    rows = [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]]
    rows += [[group_id, t, str(p), str(o)] for t, p, o in plan]
    _table(rows)
    if not args.execute:
        return 0
    entity = request_type(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0)
    module = sys.modules[entity.__module__]
    altered = tuple(
        module.AlterShareGroupOffsetsRequestTopic(
            topic_name=topic,
            partitions=tuple(
                module.AlterShareGroupOffsetsRequestPartition(partition_index=p, start_offset=o)
                for t, p, o in plan
                if t == topic
            ),
        )
        for topic in dict.fromkeys(t for t, _, _ in plan)
    )
    answer = _coordinator(cluster, group_id).call(
        ApiKey.ALTER_SHARE_GROUP_OFFSETS, group_id=group_id, topics=altered
    )
    if answer.error_code != ErrorCode.none:
        raise CliError(f"Share group '{group_id}': {error_name(answer.error_code)}")
    return 0


def _target(cluster: Cluster, topic: str, partition: int, args: argparse.Namespace) -> int:
    """The new start offset: the one given, or ListOffsets' answer for the log start, the
    end, or a time (the first offset at or after it; the end when there is none)."""
    if args.to_offset is not None:
        return int(args.to_offset)
    if args.to_datetime is not None:
        timestamp = int(args.to_datetime)
    elif args.by_duration is not None:
        timestamp = int(time.time() * 1000) - int(args.by_duration)
    else:
        timestamp = -2 if args.to_earliest else -1
    found = _list_offset(cluster, topic, partition, timestamp)
    return found if found >= 0 else _list_offset(cluster, topic, partition, -1)


def _list_offset(cluster: Cluster, topic: str, partition: int, timestamp: int) -> int:
    _, conn = cluster.leader(topic, partition)
    entity = request_type(ApiKey.LIST_OFFSETS, 1)
    module = sys.modules[entity.__module__]
    answer = conn.call_at(
        ApiKey.LIST_OFFSETS,
        1,
        entity(
            replica_id=-1,
            topics=(
                module.ListOffsetsTopic(
                    name=topic,
                    partitions=(
                        module.ListOffsetsPartition(partition_index=partition, timestamp=timestamp),
                    ),
                ),
            ),
        ),
    )
    return int(answer.topics[0].partitions[0].offset)


def _delete_offsets(cluster: Cluster, group_id: str, topics: list[str]) -> int:
    if not topics:
        raise UsageError("Option --delete-offsets needs --topic")
    entity = request_type(ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0)
    module = sys.modules[entity.__module__]
    answer = _coordinator(cluster, group_id).call(
        ApiKey.DELETE_SHARE_GROUP_OFFSETS,
        group_id=group_id,
        topics=tuple(module.DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in topics),
    )
    if answer.error_code != ErrorCode.none:
        raise CliError(f"Share group '{group_id}': {error_name(answer.error_code)}")
    rows = [["TOPIC", "STATUS"]]
    for t in answer.responses:
        rows.append([t.topic_name, "Successful" if t.error_code == 0 else error_name(t.error_code)])
    _table(rows)
    return 0


def _table(rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(" ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
