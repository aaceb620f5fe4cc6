"""`onceflow topics --create|--list|--describe|--alter|--delete`: topic administration over
the Kafka protocol, with kafka-topics.sh's options, checks and output.

Only Kafka clients are used (`confluent_kafka.admin.AdminClient`, and Onceflow's own client
for DescribeLogDirs), never Onceflow's internals, so the same commands manage an Apache Kafka
cluster, with `--command-config` for a secured one. Topic listings come from a metadata
request for all topics: asking for one topic by name could auto-create it on a broker that
allows that. `alter` adds partitions (CreatePartitions) and sets or deletes config overrides
(IncrementalAlterConfigs), each validated by the broker before either is applied, so a bad
config value does not leave the partitions added.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, no __all__
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from onceflow.cli.admin import connect_admin
from onceflow.cli.admin_errors import error_code, error_text
from onceflow.cli.command_config import add_command_config_option, wire_security
from onceflow.cli.common import (
    CliError,
    UsageError,
    add_bootstrap_option,
    describe_kafka_error,
    explain_failure,
    key_value,
    positive_int,
)
from onceflow.cli.log_dirs import log_dir_lines
from onceflow.cli.reassign_wire import list_reassignments
from onceflow.cli.topic_views import (
    Moving,
    describe_configs,
    describe_one,
    reporting,
    select_topics,
    topic_ids,
)
from onceflow.client.cluster import Cluster
from onceflow.client.errors import ClientError

__all__ = ["connect_admin", "register"]

DEFAULT_TIMEOUT_MS = 30_000


ALIASES = (
    "Also accepted, the older short form: topics create|list|describe|alter|delete "
    "[TOPIC ...] (the action as a word, topics as positionals)."
)
# option (dest) -> the actions it goes with, as kafka-topics.sh checks them
_VALID_WITH = {
    "partitions": ("create", "alter"),
    "replication_factor": ("create",),
    "config": ("create", "alter"),
    "delete_config": ("alter",),
    "if_not_exists": ("create",),
    "if_exists": ("alter", "delete", "describe"),
    "exclude_internal": ("list", "describe"),
    "all_configs": ("describe",),
    "under_replicated_partitions": ("describe",),
    "unavailable_partitions": ("describe",),
    "under_min_isr_partitions": ("describe",),
    "at_min_isr_partitions": ("describe",),
    "topics_with_overrides": ("describe",),
}


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "topics",
        help="create, list, describe, alter and delete topics (like kafka-topics.sh)",
        description="Create, list, describe, alter or delete topics, as Kafka's "
        "kafka-topics.sh does: exactly one of --create, --list, --describe, --alter, --delete.",
        epilog=ALIASES,
    )
    add_bootstrap_option(parser)
    add_command_config_option(parser)
    action = parser.add_mutually_exclusive_group(required=True)
    for name, text in (
        ("create", "create a topic"),
        ("list", "list topic names"),
        ("describe", "show partitions, leaders, replicas, ISR and config overrides"),
        ("alter", "add partitions, set or delete config overrides"),
        ("delete", "delete topics"),
    ):
        action.add_argument(
            f"--{name}", dest="topics_command", action="store_const", const=name, help=text
        )
    parser.add_argument(
        "--topic",
        dest="topics",
        action="append",
        default=[],
        metavar="TOPIC",
        help="the topic; with --list and --describe also a regular expression; repeatable",
    )
    parser.add_argument(
        "--partitions", type=positive_int, help="partition count (--create: default the broker's)"
    )
    parser.add_argument(
        "--replication-factor",
        type=positive_int,
        help="replicas per partition (default: the broker's default.replication.factor)",
    )
    parser.add_argument(
        "--config",
        type=key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="topic config such as retention.ms=60000; repeatable",
    )
    parser.add_argument(
        "--delete-config",
        action="append",
        default=[],
        metavar="KEY",
        help="with --alter: remove an override (back to the broker's default); repeatable",
    )
    parser.add_argument("--if-exists", action="store_true", help="succeed if it does not exist")
    parser.add_argument("--if-not-exists", action="store_true", help="succeed if it exists")
    parser.add_argument(
        "--exclude-internal", action="store_true", help="hide topics whose name starts with __"
    )
    parser.add_argument(
        "--under-replicated-partitions",
        action="store_true",
        help="with --describe: only partitions with fewer in-sync replicas than replicas",
    )
    parser.add_argument(
        "--unavailable-partitions",
        action="store_true",
        help="with --describe: only partitions without a leader",
    )
    parser.add_argument(
        "--under-min-isr-partitions",
        action="store_true",
        help="with --describe: only partitions with fewer in-sync replicas than "
        "min.insync.replicas (or no leader)",
    )
    parser.add_argument(
        "--at-min-isr-partitions",
        action="store_true",
        help="with --describe: only partitions with exactly min.insync.replicas in sync",
    )
    parser.add_argument(
        "--topics-with-overrides",
        action="store_true",
        help="with --describe: only topics with config overrides, without their partitions",
    )
    parser.add_argument(
        "--all-configs",
        action="store_true",
        help="with --describe: defaults too",
    )
    parser.add_argument(
        "--timeout-ms",
        type=positive_int,
        default=DEFAULT_TIMEOUT_MS,
        help=f"how long to wait for the broker (default {DEFAULT_TIMEOUT_MS})",
    )
    parser.add_argument(
        "--property",
        type=key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="admin client (librdkafka) setting; repeatable",
    )
    parser.set_defaults(normalize=_normalize, command_parser=parser)


def _normalize(args: argparse.Namespace) -> None:
    """Check the options against the action, as kafka-topics.sh does, and pick the runner."""
    action = args.topics_command
    for dest, actions in _VALID_WITH.items():
        if getattr(args, dest) not in (None, False, []) and action not in actions:
            option = "--" + dest.replace("_", "-")
            allowed = " or ".join(f"--{a}" for a in actions)
            raise UsageError(f"{option} goes with {allowed}, not --{action}")
    names = args.topics
    if action in ("create", "alter") and len(names) != 1:
        raise UsageError(f"--{action} needs one --topic")
    if action == "delete" and not names:
        raise UsageError("--delete needs --topic")
    if reporting(args) and args.topics_with_overrides:
        raise UsageError("--topics-with-overrides shows no partitions to report on")
    args.topic = names[0] if names else None
    args.func = _RUNNERS[action]


def _timeout_s(args: argparse.Namespace) -> float:
    return float(args.timeout_ms) / 1000.0


def _metadata(admin: Any, args: argparse.Namespace) -> Any:
    try:
        return admin.list_topics(timeout=_timeout_s(args))
    except KafkaException as exc:
        raise CliError(
            f"cannot get metadata from {args.bootstrap_server}: {explain_failure(exc, admin)}"
        ) from None


def _error_code(exc: KafkaException) -> Any:
    error = exc.args[0] if exc.args else None
    return error.code() if isinstance(error, KafkaError) else None


def run_create(args: argparse.Namespace) -> int:
    admin = connect_admin(args)
    topic = NewTopic(
        args.topic,
        num_partitions=args.partitions if args.partitions is not None else -1,
        replication_factor=args.replication_factor or -1,
        config=dict(args.config),
    )
    timeout = _timeout_s(args)
    futures = admin.create_topics([topic], request_timeout=timeout, operation_timeout=timeout)
    try:
        futures[args.topic].result()
    except KafkaException as exc:
        if args.if_not_exists and _error_code(exc) == KafkaError.TOPIC_ALREADY_EXISTS:
            return 0
        reason = explain_failure(exc, admin)
        raise CliError(f"cannot create topic {args.topic}: {reason}") from None
    print(f"Created topic {args.topic}.")
    return 0


def run_list(args: argparse.Namespace) -> int:
    metadata = _metadata(connect_admin(args), args)
    names, _ = select_topics(metadata.topics, args.topics, args.exclude_internal)
    for name in names:
        print(name)
    return 0


def _alter_steps(admin: Any, args: argparse.Namespace, validate_only: bool) -> list[Any]:
    """The futures of the requested changes (CreatePartitions, IncrementalAlterConfigs)."""
    timeout = _timeout_s(args)
    options = {"request_timeout": timeout, "validate_only": validate_only}
    futures = []
    if args.partitions is not None:
        new = [NewPartitions(args.topic, args.partitions)]
        created = admin.create_partitions(new, operation_timeout=timeout, **options)
        futures.append(created[args.topic])
    entries = [
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
        for key, value in args.config
    ] + [
        ConfigEntry(key, None, incremental_operation=AlterConfigOpType.DELETE)
        for key in args.delete_config
    ]
    if entries:
        resource = ConfigResource("topic", args.topic, incremental_configs=entries)
        futures.extend(admin.incremental_alter_configs([resource], **options).values())
    return futures


def run_alter(args: argparse.Namespace) -> int:
    if args.partitions is None and not args.config and not args.delete_config:
        raise UsageError("give --partitions, --config or --delete-config")
    admin = connect_admin(args)
    for validate_only in (True, False):
        for future in _alter_steps(admin, args, validate_only):
            try:
                future.result()
            except KafkaException as exc:
                if args.if_exists and error_code(exc) == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    return 0
                reason = error_text(exc, admin)
                raise CliError(f"cannot alter topic {args.topic}: {reason}") from None
    if args.partitions is not None:
        print(f"Increased the partition count of topic {args.topic} to {args.partitions}.")
    if args.config or args.delete_config:
        print(f"Completed updating config for topic {args.topic}.")
    return 0


def run_delete(args: argparse.Namespace) -> int:
    admin = connect_admin(args)
    timeout = _timeout_s(args)
    futures = admin.delete_topics(args.topics, request_timeout=timeout, operation_timeout=timeout)
    status = 0
    for name in args.topics:
        try:
            futures[name].result()
        except KafkaException as exc:
            if args.if_exists and _error_code(exc) == KafkaError.UNKNOWN_TOPIC_OR_PART:
                continue
            print(
                f"onceflow: error: cannot delete topic {name}: {describe_kafka_error(exc)}",
                file=sys.stderr,
            )
            status = 1
            continue
        print(f"Deleted topic {name}.")
    return status


def run_describe(args: argparse.Namespace) -> int:
    admin = connect_admin(args)
    metadata = _metadata(admin, args)
    found, missing = select_topics(metadata.topics, args.topics, args.exclude_internal)
    configs = describe_configs(admin, found, args)
    ids = topic_ids(admin, found, args)
    moving = _reassigning(args)
    status = 0
    for name in found:
        topic = metadata.topics[name]
        if topic.error is not None:
            print(f"onceflow: error: topic {name}: {topic.error.str()}", file=sys.stderr)
            status = 1
            continue
        topic_configs = configs.get(name, "no answer from the broker")
        describe_one(name, topic, topic_configs, ids.get(name), args, moving.get(name))
        if isinstance(topic_configs, str):
            print(
                f"onceflow: error: cannot describe configs of {name}: {topic_configs}",
                file=sys.stderr,
            )
            status = 1
    if missing and not args.if_exists:
        raise CliError(f"no such topic: {', '.join(missing)}")
    if reporting(args) or args.topics_with_overrides:
        return status
    # Where the partitions live, and whether the brokers still accept writes there.
    try:
        security = wire_security(args)
    except ClientError as exc:  # a setting only Onceflow's own client refuses (e.g. GSSAPI)
        print(f"LogDirs: (unavailable: {exc})")
        return status
    for line in log_dir_lines(admin, args.bootstrap_server, _timeout_s(args), security):
        print(line)
    return status


def _reassigning(args: argparse.Namespace) -> dict[str, Moving]:
    """The partitions being reassigned, by topic (ListPartitionReassignments, as Kafka's
    tool asks it); none when the cluster cannot or will not say."""
    try:
        security = wire_security(args)
        with Cluster(args.bootstrap_server, _timeout_s(args), security) as cluster:
            found = list_reassignments(cluster)
    except (ClientError, CliError):
        return {}
    moving: dict[str, dict[int, tuple[tuple[int, ...], tuple[int, ...]]]] = {}
    for (topic, partition), (_, adding, removing) in found.items():
        moving.setdefault(topic, {})[partition] = (adding, removing)
    return dict(moving)


_RUNNERS = {
    "create": run_create,
    "list": run_list,
    "describe": run_describe,
    "alter": run_alter,
    "delete": run_delete,
}
