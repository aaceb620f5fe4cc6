"""`onceflow configs` for client quotas, as kafka-configs.sh manages them:

    onceflow configs --alter --entity-type users --entity-name alice \\
        --entity-type clients --entity-name app --add-config producer_byte_rate=1048576
    onceflow configs --alter --entity-type clients --entity-default \\
        --add-config consumer_byte_rate=2097152,request_percentage=50
    onceflow configs --describe --entity-type users          (every user's quotas)
    onceflow configs --alter --client app --delete-config producer_byte_rate

Entity types pair with the names in the order given; `--entity-default` names the default
of the type left without a name; `--user`, `--client`, `--user-defaults` and
`--client-defaults` are the shorthands. Through Onceflow's client (DescribeClientQuotas,
AlterClientQuotas: confluent-kafka has no calls for them), so it works against Apache
Kafka too; an alter is validated by the broker before it is applied.
"""

from __future__ import annotations

import argparse

from onceflow.cli.add_config import to_set
from onceflow.cli.common import CliError, UsageError
from onceflow.cli.kafka_wire import wire_cluster
from onceflow.client.quota_admin import (
    MATCH_ANY,
    MATCH_DEFAULT,
    MATCH_EXACT,
    alter_client_quotas,
    describe_client_quotas,
)

__all__ = ["QUOTA_ENTITY_TYPES", "normalize_quota_entity", "run_quota_configs"]

#: kafka-configs.sh's entity types and the protocol's names of them.
QUOTA_ENTITY_TYPES = {"users": "user", "clients": "client-id"}
_WORDS = {"user": "user-principal", "client-id": "client-id"}
_UNNAMED = "*"  # a type given without a name: every entity of it (describe only)


def normalize_quota_entity(args: argparse.Namespace, types: list[str], names: list[str]) -> None:
    """`args.quota_entity`: (protocol entity type, name, None for the default, or "*" for
    any) pairs from the Kafka options, checked as kafka-configs.sh checks them."""
    pairs: list[tuple[str, str | None]] = []
    given = list(names)
    defaults = 1 if args.entity_default else 0
    for kind in types:
        if kind not in QUOTA_ENTITY_TYPES:
            raise UsageError(f"--entity-type {kind} does not go with users or clients")
        if given:
            pairs.append((QUOTA_ENTITY_TYPES[kind], given.pop(0)))
        elif defaults:
            pairs.append((QUOTA_ENTITY_TYPES[kind], None))
            defaults -= 1
        else:
            pairs.append((QUOTA_ENTITY_TYPES[kind], _UNNAMED))
    if given or defaults:
        raise UsageError("each --entity-name or --entity-default needs an --entity-type")
    if args.user is not None or args.user_defaults:
        pairs.append(("user", args.user))
    if args.client is not None or args.client_defaults:
        pairs.append(("client-id", args.client))
    kinds = [kind for kind, _ in pairs]
    if len(set(kinds)) != len(kinds):
        raise UsageError("give each of users and clients once")
    pairs.sort(key=lambda pair: 0 if pair[0] == "user" else 1)
    changes = args.add_config or args.add_config_file or args.delete_config
    if args.alter and not changes:
        raise UsageError("--alter needs --add-config, --add-config-file or --delete-config")
    if args.describe and changes:
        raise UsageError("--add-config and --delete-config go with --alter")
    if args.alter and any(name == _UNNAMED for _, name in pairs):
        raise UsageError("--alter needs --entity-name (or --entity-default) for each type")
    args.quota_entity = pairs


def _entity_words(entity: tuple[tuple[str, str | None], ...]) -> str:
    return ", ".join(
        f"the default {_WORDS[kind]}" if name is None else f"{_WORDS[kind]} '{name}'"
        for kind, name in entity
    )


def _changes(args: argparse.Namespace) -> dict[str, float | None]:
    changes: dict[str, float | None] = {}
    for key, text in to_set(args).items():
        try:
            changes[key] = float(text)
        except ValueError:
            raise UsageError(f"--add-config: {key}={text} is not a number") from None
    for key in (args.delete_config or "").split(","):
        if key.strip():
            changes[key.strip()] = None
    return changes


def _alter(args: argparse.Namespace) -> None:
    entity = tuple(args.quota_entity)
    changes = _changes(args)
    with wire_cluster(args) as cluster:
        for validate_only in (True, False):
            result = alter_client_quotas(cluster.bootstrap, {entity: changes}, validate_only)
            error = result.get(entity)
            if error is not None:
                raise CliError(f"cannot alter quotas of {_entity_words(entity)}: {error}")
    [(kind, name)] = entity[-1:]
    plural = "users" if kind == "user" else "clients"
    if len(entity) == 1 and name is None:
        print(f"Completed updating default config for {plural} in the cluster.")
    else:
        print(f"Completed updating config for {_entity_words(entity)}.")


def _describe(args: argparse.Namespace) -> int:
    components = [
        (kind, MATCH_ANY if name == _UNNAMED else MATCH_DEFAULT if name is None else MATCH_EXACT,
         None if name in (None, _UNNAMED) else name)
        for kind, name in args.quota_entity
    ]  # fmt: skip
    with wire_cluster(args) as cluster:
        found = describe_client_quotas(cluster.bootstrap, components, strict=True)
    for entity in sorted(found, key=lambda e: [(k, n or "") for k, n in e]):
        shown = ", ".join(f"{key}={value}" for key, value in sorted(found[entity].items()))
        print(f"Quota configs for {_entity_words(entity)} are {shown}")
    return 0


def run_quota_configs(args: argparse.Namespace) -> int:
    if args.alter:
        _alter(args)
        return 0
    return _describe(args)
