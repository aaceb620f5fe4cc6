"""`onceflow leader-election`: ask for preferred or unclean leader elections (ElectLeaders),
as Kafka's `kafka-leader-election.sh`.

PREFERRED gives each partition back to its first replica when that one is in sync; UNCLEAN
lets a leaderless partition be led by a live replica outside its ISR, losing what only the
old ISR had. The partitions are every one (`--all-topic-partitions`), one (`--topic` and
`--partition`) or Kafka's JSON file (`{"partitions": [{"topic": "t", "partition": 0}]}`).
Through Onceflow's own client (confluent-kafka 2.16's `elect_leaders` fails in its C
binding), to the controller as Kafka's admin client sends it. Output and exit code are
the tool's: a partition that could not be elected makes it 1.
"""

from __future__ import annotations

import argparse
import datetime
import json
from typing import Any

from kio.index import load_payload_module
from kio.static.constants import EntityType

from onceflow.cli.command_config import add_command_config_option, wire_security
from onceflow.cli.common import CliError, UsageError, add_bootstrap_option, non_negative_int
from onceflow.client.cluster import Cluster
from onceflow.client.errors import error_name
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import build, request_type

__all__ = ["elect_leaders", "parse_election_json", "register"]

TYPES = {"PREFERRED": 0, "UNCLEAN": 1}
TIMEOUT_MS = 30_000
Tp = tuple[str, int]
Result = tuple[int, str | None]  # error code, message


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "leader-election",
        help="elect preferred or unclean leaders (like kafka-leader-election.sh)",
        description="Ask the controller for leader elections (ElectLeaders), as Kafka's "
        "kafka-leader-election.sh does.",
    )
    add_bootstrap_option(parser)
    add_command_config_option(parser)
    parser.add_argument(
        "--admin.config", dest="command_config", metavar="FILE", help="as --command-config"
    )
    parser.add_argument(
        "--election-type",
        required=True,
        type=str.upper,
        choices=sorted(TYPES),
        help="PREFERRED or UNCLEAN",
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--all-topic-partitions", action="store_true", help="every partition")
    which.add_argument("--topic", help="the topic of one partition (with --partition)")
    which.add_argument("--path-to-json-file", metavar="FILE", help="Kafka's JSON partition list")
    parser.add_argument("--partition", type=non_negative_int, help="with --topic")
    parser.set_defaults(func=run_leader_election, command_parser=parser)


def parse_election_json(text: str) -> list[Tp]:
    """Kafka's partitions file; duplicates refused as its tool refuses them."""
    try:
        document = json.loads(text)
    except ValueError:
        raise CliError("The input string is not a valid JSON") from None
    entries = document.get("partitions") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise CliError("Missing partitions field")
    partitions: list[Tp] = []
    for entry in entries:
        topic = entry.get("topic") if isinstance(entry, dict) else None
        partition = entry.get("partition") if isinstance(entry, dict) else None
        if not isinstance(topic, str) or type(partition) is not int:
            raise CliError(f"each partition needs a topic and a partition: {json.dumps(entry)}")
        partitions.append((topic, partition))
    duplicates = sorted({f"{t}-{p}" for t, p in partitions if partitions.count((t, p)) > 1})
    if duplicates:
        raise CliError(
            f"Replica election data contains duplicate partitions: {','.join(duplicates)}"
        )
    return partitions


def elect_leaders(
    cluster: Cluster, election_type: int, partitions: list[Tp] | None, timeout_ms: int
) -> dict[Tp, Result]:
    """ElectLeaders at the controller; each partition's error code and message."""
    connection = cluster.bootstrap
    if ApiKey.DESCRIBE_CLUSTER in connection.versions:
        described = connection.call(
            ApiKey.DESCRIBE_CLUSTER, include_cluster_authorized_operations=False
        )
        controller = described.controller_id
        if controller >= 0:
            connection = cluster.node(controller)
    version = connection.version_for(ApiKey.ELECT_LEADERS)
    if election_type != 0 and version < 1:
        raise CliError("the broker knows only preferred elections (ElectLeaders v0)")
    topics = None
    if partitions is not None:
        grouped: dict[str, list[int]] = {}
        for topic, partition in partitions:
            grouped.setdefault(topic, []).append(partition)
        topics = tuple(_topic_partitions(version, t, p) for t, p in grouped.items())
    request = build(
        request_type(ApiKey.ELECT_LEADERS, version),
        election_type=election_type,
        topic_partitions=topics,
        timeout=datetime.timedelta(milliseconds=timeout_ms),
    )
    response = connection.call_at(ApiKey.ELECT_LEADERS, version, request)
    top = getattr(response, "error_code", ErrorCode.none)
    results = {
        (r.topic, int(p.partition_id)): (int(p.error_code), p.error_message)
        for r in response.replica_election_results
        for p in r.partition_result
    }
    if top != ErrorCode.none and not results:
        raise CliError(f"leader election failed: {error_name(int(top))}")
    return results


def _topic_partitions(version: int, topic: str, partitions: list[int]) -> Any:
    module = load_payload_module(ApiKey.ELECT_LEADERS, version, EntityType.request)
    return build(module.TopicPartitions, topic=topic, partitions=tuple(partitions))


def run_leader_election(args: argparse.Namespace) -> int:
    if (args.topic is None) != (args.partition is None):
        raise UsageError("--topic and --partition go together")
    partitions: list[Tp] | None = None
    if args.topic is not None:
        partitions = [(args.topic, args.partition)]
    elif args.path_to_json_file is not None:
        try:
            with open(args.path_to_json_file, encoding="utf-8") as file:
                partitions = parse_election_json(file.read())
        except OSError as exc:
            raise CliError(f"cannot read {args.path_to_json_file}: {exc.strerror}") from None
    kind = args.election_type
    with Cluster(args.bootstrap_server, TIMEOUT_MS / 1000, wire_security(args)) as cluster:
        results = elect_leaders(cluster, TYPES[kind], partitions, TIMEOUT_MS)
    return _report(kind, results)


def _report(kind: str, results: dict[Tp, Result]) -> int:
    """Kafka's tool's lines: the elected, the ones that needed none, then each failure."""

    def names(code: int) -> list[str]:
        return [f"{t}-{p}" for (t, p), (c, _) in sorted(results.items()) if c == code]

    elected, valid = names(ErrorCode.none), names(ErrorCode.election_not_needed)
    failed = {
        tp: r
        for tp, r in sorted(results.items())
        if r[0] not in (ErrorCode.none, ErrorCode.election_not_needed)
    }
    if elected:
        print(
            f"Successfully completed leader election ({kind}) for partitions {', '.join(elected)}"
        )
    if valid:
        print(f"Valid replica already elected for partitions {', '.join(valid)}")
    for (topic, partition), (code, message) in failed.items():
        why = message or error_name(code)
        print(
            f"Error completing leader election ({kind}) for partition: {topic}-{partition}: "
            f"{error_name(code)}: {why}"
        )
    if failed:
        raise CliError(f"{len(failed)} replica(s) could not be elected")
    return 0
