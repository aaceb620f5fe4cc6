"""`onceflow topics create|list|describe|alter|delete`: topic administration over the Kafka
protocol.

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
from collections.abc import Iterable
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, no __all__
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)
from confluent_kafka.cimpl import CONFIG_SOURCE_DEFAULT_CONFIG

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
from onceflow.client.errors import ClientError

__all__ = ["connect_admin", "register"]

DEFAULT_TIMEOUT_MS = 30_000


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "topics", help="create, list, describe and delete topics"
    )
    actions = parser.add_subparsers(dest="topics_command", required=True, metavar="ACTION")
    common = argparse.ArgumentParser(add_help=False)
    add_bootstrap_option(common)
    add_command_config_option(common)
    common.add_argument(
        "--timeout-ms",
        type=positive_int,
        default=DEFAULT_TIMEOUT_MS,
        help=f"how long to wait for the broker (default {DEFAULT_TIMEOUT_MS})",
    )
    common.add_argument(
        "--property",
        type=key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="admin client (librdkafka) setting; repeatable",
    )

    create = actions.add_parser("create", parents=[common], help="create a topic")
    create.add_argument("topic")
    create.add_argument(
        "--partitions", type=positive_int, help="partition count (default: the broker's)"
    )
    create.add_argument(
        "--replication-factor",
        type=positive_int,
        help="replicas per partition (default: the broker's default.replication.factor)",
    )
    create.add_argument(
        "--config",
        type=key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="topic config such as retention.ms=60000; repeatable",
    )
    create.add_argument("--if-not-exists", action="store_true", help="succeed if it exists")
    create.set_defaults(func=run_create, command_parser=create)

    listing = actions.add_parser("list", parents=[common], help="list topic names")
    listing.add_argument(
        "--exclude-internal", action="store_true", help="hide topics whose name starts with __"
    )
    listing.set_defaults(func=run_list, command_parser=listing)

    describe = actions.add_parser(
        "describe", parents=[common], help="show partitions, leaders and configs"
    )
    describe.add_argument("topics", nargs="*", metavar="TOPIC", help="default: every topic")
    describe.add_argument(
        "--all-configs", action="store_true", help="show defaults too, not only overrides"
    )
    describe.set_defaults(func=run_describe, command_parser=describe)

    alter = actions.add_parser(
        "alter", parents=[common], help="add partitions, set or delete config overrides"
    )
    alter.add_argument("topic")
    alter.add_argument(
        "--partitions",
        type=positive_int,
        help="the new partition count (only more: keyed records may then map elsewhere)",
    )
    alter.add_argument(
        "--config",
        type=key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a topic config such as retention.ms=60000; repeatable",
    )
    alter.add_argument(
        "--delete-config",
        action="append",
        default=[],
        metavar="KEY",
        help="remove an override (back to the broker's default); repeatable",
    )
    alter.add_argument("--if-exists", action="store_true", help="succeed if it does not exist")
    alter.set_defaults(func=run_alter, command_parser=alter)

    delete = actions.add_parser("delete", parents=[common], help="delete topics")
    delete.add_argument("topics", nargs="+", metavar="TOPIC")
    delete.add_argument("--if-exists", action="store_true", help="succeed if it does not exist")
    delete.set_defaults(func=run_delete, command_parser=delete)


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
    for name in sorted(metadata.topics):
        if not (args.exclude_internal and name.startswith("__")):
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


def _describe_configs(
    admin: Any, names: list[str], args: argparse.Namespace
) -> dict[str, list[Any] | str]:
    """Each topic's config entries, or the text of the error that kept them from us."""
    if not names:
        return {}
    resources = [ConfigResource("topic", name) for name in names]
    futures = admin.describe_configs(resources, request_timeout=_timeout_s(args))
    configs: dict[str, list[Any] | str] = {}
    for resource, future in futures.items():
        try:
            entries = future.result()
        except KafkaException as exc:
            configs[resource.name] = describe_kafka_error(exc)
            continue
        configs[resource.name] = [entries[key] for key in sorted(entries)]
    return configs


def _render_configs(entries: Iterable[Any], show_all: bool) -> str:
    """`key=value,...`: only overrides unless `show_all`; secrets are never printed."""
    shown = []
    for entry in entries:
        # librdkafka hands the source over as a plain int; the Python class as an enum.
        source = getattr(entry.source, "value", entry.source)
        if not show_all and (entry.is_default or source == CONFIG_SOURCE_DEFAULT_CONFIG):
            continue
        value = "(sensitive)" if entry.is_sensitive else entry.value
        shown.append(f"{entry.name}={'' if value is None else value}")
    return ",".join(shown)


def _node(node_id: int) -> str:
    return "none" if node_id < 0 else str(node_id)


def _describe_one(name: str, topic: Any, configs: list[Any] | str, show_all: bool) -> None:
    partitions = [topic.partitions[pid] for pid in sorted(topic.partitions)]
    replication = len(partitions[0].replicas) if partitions else 0
    if isinstance(configs, str):
        rendered = f"(unavailable: {configs})"
    else:
        rendered = _render_configs(configs, show_all)
    print(
        f"Topic: {name}\tPartitionCount: {len(partitions)}\t"
        f"ReplicationFactor: {replication}\tConfigs: {rendered}"
    )
    for partition in partitions:
        line = (
            f"\tTopic: {name}\tPartition: {partition.id}\tLeader: {_node(partition.leader)}"
            f"\tReplicas: {','.join(map(str, partition.replicas))}"
            f"\tIsr: {','.join(map(str, partition.isrs))}"
        )
        if partition.error is not None:
            line += f"\tError: {partition.error.str()}"
        print(line)


def run_describe(args: argparse.Namespace) -> int:
    admin = connect_admin(args)
    metadata = _metadata(admin, args)
    names = list(args.topics) or sorted(metadata.topics)
    missing = [name for name in names if name not in metadata.topics]
    found = [name for name in names if name in metadata.topics]
    configs = _describe_configs(admin, found, args)
    status = 0
    for name in found:
        topic = metadata.topics[name]
        if topic.error is not None:
            print(f"onceflow: error: topic {name}: {topic.error.str()}", file=sys.stderr)
            status = 1
            continue
        topic_configs = configs.get(name, "no answer from the broker")
        _describe_one(name, topic, topic_configs, args.all_configs)
        if isinstance(topic_configs, str):
            print(
                f"onceflow: error: cannot describe configs of {name}: {topic_configs}",
                file=sys.stderr,
            )
            status = 1
    if missing:
        raise CliError(f"no such topic: {', '.join(missing)}")
    # Where the partitions live, and whether the brokers still accept writes there.
    try:
        security = wire_security(args)
    except ClientError as exc:  # a setting only Onceflow's own client refuses (e.g. GSSAPI)
        print(f"LogDirs: (unavailable: {exc})")
        return status
    for line in log_dir_lines(admin, args.bootstrap_server, _timeout_s(args), security):
        print(line)
    return status
