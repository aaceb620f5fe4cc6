"""`onceflow reassign-partitions`: Kafka's `kafka-reassign-partitions.sh`.

--generate proposes an assignment of the topics in --topics-to-move-json-file over
--broker-list (Kafka's placement, rack-aware unless --disable-rack-aware); --execute starts
the reassignment in --reassignment-json-file (AlterPartitionReassignments), throttling the
replication it causes with --throttle B/s; --verify reports each partition and, once all
are done, removes the throttles; --cancel goes back to the original replicas; --list shows
what is in progress. Kafka's JSON
files and output lines; a refused partition makes the exit code 1.
"""

from __future__ import annotations

import argparse
import random
from typing import Any

from confluent_kafka.admin import ResourceType  # type: ignore[attr-defined]  # re-exported

from onceflow.cli.admin import connect_admin
from onceflow.cli.command_config import add_command_config_option, wire_security
from onceflow.cli.common import CliError, UsageError, add_bootstrap_option
from onceflow.cli.reassign_json import (
    Assignment,
    format_reassignment,
    parse_reassignment,
    parse_topics_to_move,
)
from onceflow.cli.reassign_wire import (
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
    TIMEOUT_MS,
    Ongoing,
    alter_configs,
    alter_reassignments,
    describe,
    list_reassignments,
)
from onceflow.client.cluster import Cluster
from onceflow.client.errors import error_name
from onceflow.cluster.assignment import assign_replicas
from onceflow.errors import ErrorCode

__all__ = ["propose", "register"]

ACTIONS = ("generate", "execute", "verify", "cancel", "list")
EXISTING = (
    "Cannot execute because there is an existing partition assignment.  Use --additional to "
    "override this and create a new partition assignment in addition to the existing one. "
    "The --additional flag can also be used to change the throttle by resubmitting the "
    "current reassignment."
)


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "reassign-partitions",
        help="move partitions between brokers (like kafka-reassign-partitions.sh)",
        description="Generate, execute, verify or cancel partition reassignments, as Kafka's "
        "kafka-reassign-partitions.sh does.",
    )
    add_bootstrap_option(parser)
    add_command_config_option(parser)
    action = parser.add_mutually_exclusive_group(required=True)
    for name in ACTIONS:
        action.add_argument(f"--{name}", action="store_true", help=f"{name} a reassignment")
    parser.add_argument("--topics-to-move-json-file", metavar="FILE", help="with --generate")
    parser.add_argument("--broker-list", metavar="1,2,3", help="with --generate")
    parser.add_argument(
        "--disable-rack-aware", action="store_true", help="--generate ignores broker.rack"
    )
    parser.add_argument(
        "--reassignment-json-file", metavar="FILE", help="with --execute, --verify, --cancel"
    )
    parser.add_argument(
        "--throttle",
        type=int,
        default=-1,
        metavar="B/s",
        help="with --execute: limit the replication the moves cause to this rate",
    )
    parser.add_argument(
        "--additional", action="store_true", help="--execute while others are in progress"
    )
    parser.add_argument(
        "--preserve-throttles", action="store_true", help="--verify/--cancel keep throttles"
    )
    parser.set_defaults(func=run_reassign, command_parser=parser)


def _read(path: str | None, option: str) -> str:
    if path is None:
        raise UsageError(f"{option} is required with this action")
    try:
        with open(path, encoding="utf-8") as file:
            return file.read()
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}") from None


def run_reassign(args: argparse.Namespace) -> int:
    with Cluster(args.bootstrap_server, TIMEOUT_MS / 1000, wire_security(args)) as cluster:
        if args.generate:
            return _generate(cluster, args)
        if args.list:
            return _list(cluster)
        targets = parse_reassignment(_read(args.reassignment_json_file, "--reassignment-json-file"))
        if args.execute:
            return _execute(cluster, args, targets)
        if args.verify:
            return _verify(cluster, args, targets)
        return _cancel(cluster, args, targets)


# ---- generate ----------------------------------------------------------------------


def propose(
    current: Assignment,
    brokers: list[int],
    racks: dict[int, str | None] | None,
    rng: random.Random | None = None,
) -> Assignment:
    """Kafka's placement of each topic's partitions over `brokers`, keeping each
    partition's replication factor (rack-aware when `racks` is given)."""
    proposed: Assignment = {}
    for topic in sorted({t for t, _ in current}):
        partitions = sorted(p for t, p in current if t == topic)
        factor = len(current[(topic, partitions[0])])
        placed = assign_replicas(len(partitions), factor, brokers, rng=rng, racks=racks)
        for index, partition in enumerate(partitions):
            proposed[(topic, partition)] = tuple(placed[index])
    return proposed


def _generate(cluster: Cluster, args: argparse.Namespace) -> int:
    topics = parse_topics_to_move(
        _read(args.topics_to_move_json_file, "--topics-to-move-json-file")
    )
    if args.broker_list is None:
        raise UsageError("--broker-list is required with --generate")
    try:
        brokers = [int(b) for b in args.broker_list.split(",")]
    except ValueError:
        raise CliError(f"--broker-list: not a list of broker ids: {args.broker_list}") from None
    duplicates = sorted({b for b in brokers if brokers.count(b) > 1})
    if duplicates:
        raise CliError(
            f"Broker list contains duplicate entries: [{', '.join(map(str, duplicates))}]"
        )
    view = describe(cluster, topics)
    if view.missing:
        raise CliError(f"Topic {view.missing[0]} not found.")
    unknown = sorted(set(brokers) - set(view.racks))
    if unknown:
        raise CliError(f"Unknown broker id(s) {','.join(map(str, unknown))}")
    racks = None
    if not args.disable_rack_aware:
        racks = {b: view.racks[b] for b in brokers}
        if all(r is None for r in racks.values()):
            racks = None
        elif any(r is None for r in racks.values()):
            raise CliError(
                "Not all brokers have rack information. Add --disable-rack-aware in command "
                "line to make replica assignment without rack information."
            )
    proposed = propose(view.replicas, brokers, racks)
    print(f"Current partition replica assignment\n{format_reassignment(view.replicas)}\n")
    print(f"Proposed partition reassignment configuration\n{format_reassignment(proposed)}")
    return 0


# ---- execute -----------------------------------------------------------------------


def _execute(cluster: Cluster, args: argparse.Namespace, targets: Assignment) -> int:
    ongoing = list_reassignments(cluster)
    if ongoing and not args.additional:
        raise CliError(EXISTING)
    view = describe(cluster, sorted({t for t, _ in targets}))
    unknown_brokers = sorted({b for r in targets.values() for b in r} - set(view.racks))
    if unknown_brokers:
        raise CliError(f"Unknown broker id {unknown_brokers[0]}")
    unknown = sorted(f"{t}-{p}" for t, p in targets if (t, p) not in view.replicas)
    if unknown:
        raise CliError(f"Unable to find partition: {', '.join(unknown)}")
    current = {tp: view.replicas[tp] for tp in targets}
    print("Current partition replica assignment\n")
    print(format_reassignment(current))
    print("\nSave this to use as the --reassignment-json-file option during rollback")
    if args.throttle >= 0:
        print(
            "Warning: You must run --verify periodically, until the reassignment completes, "
            "to ensure the throttle is removed."
        )
        moves = move_map(ongoing, current, targets)
        _set_throttles(args, moves)
        print(f"The inter-broker throttle limit was set to {args.throttle} B/s")
    failed = _failures(alter_reassignments(cluster, dict(targets)))
    if failed:
        raise CliError("Error reassigning partition(s):\n" + "\n".join(failed))
    names = ",".join(f"{t}-{p}" for t, p in sorted(targets))
    plural = "s" if len(targets) > 1 else ""
    print(f"Successfully started partition reassignment{plural} for {names}")
    return 0


#: topic -> partition -> (sources, destinations) of every move, Kafka's PartitionMove.
Moves = dict[str, dict[int, tuple[frozenset[int], frozenset[int]]]]


def move_map(ongoing: Ongoing, current: Assignment, targets: Assignment) -> Moves:
    """The partitions moving once these targets start, as Kafka's tool computes them: those
    in progress (sources: their replicas but the added ones; destinations: the added ones),
    then each target (sources: the move's in progress, else the current replicas;
    destinations: the target's other replicas)."""
    moves: Moves = {}
    for (topic, partition), (replicas, adding, _) in ongoing.items():
        sources = frozenset(replicas) - frozenset(adding)
        moves.setdefault(topic, {})[partition] = (sources, frozenset(adding))
    for (topic, partition), target in targets.items():
        known = moves.setdefault(topic, {}).get(partition)
        sources = known[0] if known is not None else frozenset(current[(topic, partition)])
        moves[topic][partition] = (sources, frozenset(target) - sources)
    return moves


def throttled_replicas(moves: Moves) -> dict[str, tuple[str, str]]:
    """Kafka's throttled replica lists per topic, sorted as its tool sorts them: the leader
    list names every move's sources, the follower list its destinations."""
    lists: dict[str, tuple[str, str]] = {}
    for topic, partitions in moves.items():
        leaders = {f"{p}:{b}" for p, (sources, _) in partitions.items() for b in sources}
        followers = {f"{p}:{b}" for p, (_, dests) in partitions.items() for b in dests}
        lists[topic] = (",".join(sorted(leaders)), ",".join(sorted(followers)))
    return lists


def _set_throttles(args: argparse.Namespace, moves: Moves) -> None:
    admin = connect_admin(args)
    for topic, (leader, follower) in throttled_replicas(moves).items():
        alter_configs(
            admin, ResourceType.TOPIC, topic, {LEADER_REPLICAS: leader, FOLLOWER_REPLICAS: follower}
        )
    brokers = {
        b
        for partitions in moves.values()
        for move in partitions.values()
        for b in (*move[0], *move[1])
    }
    rate = str(args.throttle)
    for broker in sorted(brokers):
        alter_configs(
            admin, ResourceType.BROKER, str(broker), {LEADER_RATE: rate, FOLLOWER_RATE: rate}
        )


def _failures(results: dict[tuple[str, int], tuple[int, str | None]]) -> list[str]:
    return [
        f"{t}-{p}: {message or error_name(code)}"
        for (t, p), (code, message) in sorted(results.items())
        if code != ErrorCode.none
    ]


def _list(cluster: Cluster) -> int:
    """Kafka's --list: every reassignment in progress."""
    found = list_reassignments(cluster)
    if not found:
        print("No partition reassignments found.")
        return 0
    print("Current partition reassignments:")
    for (topic, partition), (replicas, adding, removing) in sorted(found.items()):
        line = f"{topic}-{partition}: replicas: {','.join(map(str, replicas))}."
        if adding:
            line += f" adding: {','.join(map(str, adding))}."
        if removing:
            line += f" removing: {','.join(map(str, removing))}."
        print(line)
    return 0


# ---- verify and cancel -------------------------------------------------------------


def _verify(cluster: Cluster, args: argparse.Namespace, targets: Assignment) -> int:
    """Each partition's state; the throttles go once no reassignment at all is in
    progress (Kafka cannot tell which brokers earlier ones throttled)."""
    ongoing = list_reassignments(cluster)
    view = describe(cluster, sorted({t for t, _ in targets}))
    print("Status of partition reassignment:")
    for (topic, partition), target in sorted(targets.items()):
        name = f"{topic}-{partition}"
        now = view.replicas.get((topic, partition), ())
        if (topic, partition) in ongoing:
            print(f"Reassignment of partition {name} is still in progress.")
        elif now == tuple(target):
            print(f"Reassignment of partition {name} is completed.")
        else:
            print(
                f"There is no active reassignment of partition {name}, but replica set is "
                f"{','.join(map(str, now))} rather than {','.join(map(str, target))}."
            )
    print()  # where Kafka's tool reports log dir moves: Onceflow has none
    if not ongoing and not args.preserve_throttles:
        _clear_throttles(args, set(view.racks) | {b for r in targets.values() for b in r}, targets)
    return 0


def _clear_throttles(args: argparse.Namespace, brokers: set[int], targets: Assignment) -> None:
    admin = connect_admin(args)
    print(
        f"Clearing broker-level throttles on broker{'s' if len(brokers) != 1 else ''} "
        f"{','.join(map(str, sorted(brokers)))}"
    )
    for broker in sorted(brokers):
        alter_configs(
            admin, ResourceType.BROKER, str(broker), {LEADER_RATE: None, FOLLOWER_RATE: None}
        )
    topics = sorted({t for t, _ in targets})
    print(
        f"Clearing topic-level throttles on topic{'s' if len(topics) != 1 else ''} "
        f"{','.join(topics)}"
    )
    for topic in topics:
        alter_configs(
            admin, ResourceType.TOPIC, topic, {LEADER_REPLICAS: None, FOLLOWER_REPLICAS: None}
        )


def _cancel(cluster: Cluster, args: argparse.Namespace, targets: Assignment) -> int:
    ongoing = list_reassignments(cluster)
    active = sorted(tp for tp in targets if tp in ongoing)
    if active:
        failed = _failures(alter_reassignments(cluster, dict.fromkeys(active)))
        if failed:
            plural = "s" if len(failed) > 1 else ""
            raise CliError(
                f"Error cancelling partition reassignment{plural} for:\n" + "\n".join(failed)
            )
        names = ",".join(f"{t}-{p}" for t, p in active)
        plural = "s" if len(active) > 1 else ""
        print(f"Successfully cancelled partition reassignment{plural} for: {names}")
    else:
        print("None of the specified partition reassignments are active.")
    print("None of the specified partition moves are active.")  # no log dir moves here
    if not args.preserve_throttles:
        view = describe(cluster, None)
        _clear_throttles(args, set(view.racks) | {b for r in targets.values() for b in r}, targets)
    return 0
