"""`onceflow configs`: topic and broker config overrides, as kafka-configs.sh manages them.

`--entity-type topics|brokers` with `--entity-name` (or the shorthands `--topic`,
`--broker`, `--broker-defaults`), then `--describe [--all]` or `--alter` with
`--add-config k1=v1,k2=[a,b]`, `--add-config-file FILE` and `--delete-config k1,k2`. Client
quotas (`--entity-type users|clients`) are `quota_configs.py`'s. Users' SCRAM credentials
are the `users` command's; the argument translation sends such a line there. Through
confluent-kafka's AdminClient (DescribeConfigs, IncrementalAlterConfigs), so it works
against Apache Kafka too; an alter is validated by the broker before it is applied, as
`topics --alter` does.
"""

from __future__ import annotations

import argparse
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, no __all__
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
)

from onceflow.cli.add_config import to_set
from onceflow.cli.admin import connect_admin
from onceflow.cli.admin_errors import error_text
from onceflow.cli.command_config import add_command_config_option
from onceflow.cli.common import CliError, UsageError, add_bootstrap_option, positive_int
from onceflow.cli.quota_configs import (
    QUOTA_ENTITY_TYPES,
    normalize_quota_entity,
    run_quota_configs,
)

__all__ = ["register"]

DEFAULT_TIMEOUT_MS = 30_000
_RESOURCE = {"topics": "topic", "brokers": "broker"}


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "configs",
        help="describe and alter topic and broker configs and client quotas "
        "(like kafka-configs.sh)",
        description="Describe or alter config overrides of topics and brokers and the "
        "quotas of users and client ids, as Kafka's kafka-configs.sh does. Users' SCRAM "
        "credentials: see users.",
    )
    add_bootstrap_option(parser)
    add_command_config_option(parser)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true", help="show the overrides")
    action.add_argument("--alter", action="store_true", help="add or delete overrides")
    parser.add_argument(
        "--entity-type",
        action="append",
        choices=sorted([*_RESOURCE, *QUOTA_ENTITY_TYPES]),
        help="what to configure (users and clients may go together)",
    )
    parser.add_argument(
        "--entity-name", action="append", metavar="NAME", help="the topic, broker, user or client"
    )
    parser.add_argument(
        "--entity-default", action="store_true", help="the default broker, user or client"
    )
    parser.add_argument("--user", help="= --entity-type users --entity-name USER")
    parser.add_argument("--client", help="= --entity-type clients --entity-name CLIENT")
    parser.add_argument(
        "--user-defaults", action="store_true", help="= --entity-type users --entity-default"
    )
    parser.add_argument(
        "--client-defaults", action="store_true", help="= --entity-type clients --entity-default"
    )
    parser.add_argument("--topic", help="= --entity-type topics --entity-name TOPIC")
    parser.add_argument("--broker", metavar="ID", help="= --entity-type brokers --entity-name ID")
    parser.add_argument(
        "--broker-defaults", action="store_true", help="= --entity-type brokers --entity-default"
    )
    parser.add_argument(
        "--add-config", metavar="K=V,K2=[A,B]", help="configs to set, comma-separated"
    )
    parser.add_argument("--add-config-file", metavar="FILE", help="a properties file to set")
    parser.add_argument("--delete-config", metavar="K,K2", help="overrides to remove")
    parser.add_argument("--all", action="store_true", help="with --describe: defaults too")
    parser.add_argument(
        "--timeout-ms",
        type=positive_int,
        default=DEFAULT_TIMEOUT_MS,
        help=f"how long to wait for the broker (default {DEFAULT_TIMEOUT_MS})",
    )
    parser.set_defaults(func=run_configs, command_parser=parser, normalize=_normalize)


def _normalize(args: argparse.Namespace) -> None:
    """The shorthands into --entity-type and --entity-name, checked as Kafka checks them."""
    types, names = args.entity_type or [], args.entity_name or []
    args.quota_entity = None
    quota = args.user is not None or args.client is not None
    if quota or args.user_defaults or args.client_defaults or set(types) & set(QUOTA_ENTITY_TYPES):
        normalize_quota_entity(args, types, names)
        return
    if len(types) > 1 or len(names) > 1:
        raise UsageError("give one --entity-type and --entity-name for topics and brokers")
    args.entity_type = types[0] if types else None
    args.entity_name = names[0] if names else None
    if args.topic is not None:
        args.entity_type, args.entity_name = args.entity_type or "topics", args.topic
    if args.broker is not None or args.broker_defaults:
        args.entity_type, args.entity_name = args.entity_type or "brokers", args.broker
        args.entity_default = args.entity_default or args.broker_defaults
    args.topic, args.broker, args.broker_defaults = None, None, False  # merged: one request
    if args.entity_type is None:
        raise UsageError(
            "give --entity-type topics|brokers|users|clients (or --topic, --broker, --client)"
        )
    if args.entity_default and args.entity_type != "brokers":
        raise UsageError("--entity-default goes with --entity-type brokers")
    if args.entity_default:
        args.entity_name = ""
    changes = args.add_config or args.add_config_file or args.delete_config
    if args.alter and not changes:
        raise UsageError("--alter needs --add-config, --add-config-file or --delete-config")
    if args.describe and changes:
        raise UsageError("--add-config and --delete-config go with --alter")
    if args.alter and args.entity_name is None:
        raise UsageError("--alter needs --entity-name (or --entity-default)")


def _entity(args: argparse.Namespace, name: str) -> str:
    kind = _RESOURCE[args.entity_type]
    return "default config for brokers in the cluster" if name == "" else f"{kind} {name}"


def _alter(admin: Any, args: argparse.Namespace) -> None:
    entries = [
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
        for key, value in to_set(args).items()
    ] + [
        ConfigEntry(key.strip(), None, incremental_operation=AlterConfigOpType.DELETE)
        for key in (args.delete_config or "").split(",")
        if key.strip()
    ]
    resource = ConfigResource(
        _RESOURCE[args.entity_type], args.entity_name, incremental_configs=entries
    )
    timeout = args.timeout_ms / 1000.0
    for validate_only in (True, False):
        futures = admin.incremental_alter_configs(
            [resource], request_timeout=timeout, validate_only=validate_only
        )
        for future in futures.values():
            try:
                future.result()
            except KafkaException as exc:
                what = _entity(args, args.entity_name)
                raise CliError(f"cannot alter {what}: {error_text(exc, admin)}") from None
    if args.entity_name == "":
        print("Completed updating default config for brokers in the cluster.")
    else:
        print(f"Completed updating config for {_entity(args, args.entity_name)}.")


def _names(admin: Any, args: argparse.Namespace) -> list[str]:
    if args.entity_name is not None:
        return [args.entity_name]
    metadata = admin.list_topics(timeout=args.timeout_ms / 1000.0)
    if args.entity_type == "topics":
        return sorted(metadata.topics)
    return [str(broker) for broker in sorted(metadata.brokers)]


def _source(source: Any) -> str:
    """Kafka's name of a config source (librdkafka sometimes hands over a plain int)."""
    try:
        return str(ConfigSource(getattr(source, "value", source)).name)
    except ValueError:
        return "UNKNOWN_CONFIG"


def _synonyms(entry: Any) -> str:
    synonyms = getattr(entry, "synonyms", None) or {}
    shown = [f"{_source(s.source)}:{s.name}={s.value}" for s in synonyms.values()]
    return "{" + ", ".join(shown) + "}"


def _describe(admin: Any, args: argparse.Namespace) -> None:
    for name in _names(admin, args):
        resource = ConfigResource(_RESOURCE[args.entity_type], name)
        future = admin.describe_configs([resource], request_timeout=args.timeout_ms / 1000.0)
        try:
            entries = next(iter(future.values())).result()
        except KafkaException as exc:
            raise CliError(f"cannot describe {_entity(args, name)}: {error_text(exc)}") from None
        if name == "":
            print("Default configs for brokers in the cluster are:")
        else:
            print(f"{'All' if args.all else 'Dynamic'} configs for {_entity(args, name)} are:")
        for key in sorted(entries):
            entry = entries[key]
            if not args.all and not _source(entry.source).startswith("DYNAMIC"):
                continue  # Kafka's describe shows the dynamic overrides only
            value = "null" if entry.is_sensitive else entry.value
            sensitive = str(entry.is_sensitive).lower()
            print(f"  {key}={value} sensitive={sensitive} synonyms={_synonyms(entry)}")


def run_configs(args: argparse.Namespace) -> int:
    if args.quota_entity is not None:
        return run_quota_configs(args)
    admin = connect_admin(args)
    if args.alter:
        _alter(admin, args)
    else:
        _describe(admin, args)
    return 0
