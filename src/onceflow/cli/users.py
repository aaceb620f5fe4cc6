"""`onceflow users`: SCRAM credentials, as `kafka-configs.sh --entity-type users` manages them.

Kafka's protocol only (KIP-554), so they work against Apache Kafka too: changes through
confluent-kafka's AdminClient (AlterUserScramCredentials), descriptions through
`onceflow.client.security_admin` (librdkafka aborts on a refused
DescribeUserScramCredentials):

    onceflow users --alter --entity-name alice --add-config 'SCRAM-SHA-256=[password=...]'
    onceflow users --alter --entity-name alice --delete-config SCRAM-SHA-512
    onceflow users --describe [--entity-name alice]
    onceflow users add alice --mechanism SCRAM-SHA-256 [--password-file F]
    onceflow users delete alice [--mechanism SCRAM-SHA-512]
    onceflow users list [alice ...]

The friendly `add` never takes a password in argv (where `ps` shows it): it reads the first
line of a file (`-`: stdin) or asks twice on the terminal. Descriptions show mechanisms
and iterations only; the broker keeps no password to show.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, no __all__
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from onceflow.cli import scram_args
from onceflow.cli.admin import connect_admin
from onceflow.cli.command_config import add_command_config_option
from onceflow.cli.common import (
    CliError,
    UsageError,
    add_bootstrap_option,
    explain_failure,
    positive_int,
)
from onceflow.cli.kafka_wire import wire_cluster
from onceflow.cli.scram_args import ScramUpsertion, mechanism
from onceflow.client.errors import ClientError, KafkaApiError
from onceflow.client.quota_admin import MATCH_ANY, MATCH_EXACT, describe_client_quotas
from onceflow.client.security_admin import describe_scram_credentials
from onceflow.config import ConfigError, read_properties

__all__ = ["register"]

DEFAULT_TIMEOUT_MS = 30_000
ACTIONS = ("add", "delete", "list", "describe")


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "users",
        help="add, delete and describe SCRAM credentials (like kafka-configs.sh)",
        description="Add, delete and describe users' SCRAM credentials with kafka-configs.sh's "
        "options: --alter or --describe, --entity-type users, --entity-name (or --user), "
        "--add-config, --add-config-file, --delete-config.",
        epilog="Also accepted, the short form: users add|delete|list USER ... (add reads the "
        "password from --password-file or the terminal).",
    )
    parser.add_argument("action", nargs="?", choices=ACTIONS, help="the short form")
    parser.add_argument("names", nargs="*", metavar="USER", help="user name(s)")
    add_bootstrap_option(parser)
    add_command_config_option(parser)
    style = parser.add_mutually_exclusive_group()
    style.add_argument("--alter", action="store_true", help="add or delete credentials")
    style.add_argument("--describe", action="store_true", help="show users' mechanisms")
    parser.add_argument("--entity-type", choices=("users",), help="users (the only type here)")
    parser.add_argument(
        "--entity-name",
        "--user",
        dest="entity_name",
        action="append",
        default=[],
        metavar="USER",
        help="the user to alter or describe (describe: repeatable, default every user)",
    )
    parser.add_argument(
        "--add-config",
        metavar="CONFIGS",
        help="'SCRAM-SHA-256=[iterations=N,password=P],...' (argv shows in ps: prefer "
        "--add-config-file or add)",
    )
    parser.add_argument(
        "--add-config-file",
        metavar="FILE",
        help="properties file of configs to add (SCRAM-SHA-256=iterations=N,password=P)",
    )
    parser.add_argument(
        "--delete-config",
        action="append",
        default=[],
        metavar="MECHANISM[,...]",
        help="the credentials to delete, e.g. SCRAM-SHA-512; repeatable",
    )
    parser.add_argument(
        "--mechanism",
        type=_mechanism_argument,
        action="append",
        default=[],
        help="add/delete: SCRAM-SHA-256 or SCRAM-SHA-512 (delete: default every one)",
    )
    parser.add_argument(
        "--iterations",
        type=positive_int,
        default=scram_args.DEFAULT_ITERATIONS,
        help=f"add: SCRAM iterations (default {scram_args.DEFAULT_ITERATIONS}, "
        f"at least {scram_args.MIN_ITERATIONS})",
    )
    parser.add_argument(
        "--password-file",
        metavar="FILE",
        help="add: read the password from the first line of FILE ('-': stdin); "
        "without it, ask on the terminal",
    )
    parser.add_argument(
        "--timeout-ms",
        type=positive_int,
        default=DEFAULT_TIMEOUT_MS,
        help=f"how long to wait for the broker (default {DEFAULT_TIMEOUT_MS})",
    )
    parser.set_defaults(func=run_users, command_parser=parser)


def _mechanism_argument(text: str) -> str:
    try:
        return mechanism(text)
    except UsageError as exc:  # argparse reports only its own error types as usage errors
        raise argparse.ArgumentTypeError(str(exc)) from None


# ---- what to change -----------------------------------------------------------------------


def _configs_to_add(args: argparse.Namespace) -> list[ScramUpsertion]:
    configs: dict[str, str] = {}
    if args.add_config_file is not None:
        try:
            configs.update(read_properties(args.add_config_file))
        except ConfigError as exc:
            raise CliError(str(exc)) from None
    if args.add_config is not None:
        configs.update(scram_args.parse_add_config(args.add_config))
    unknown = sorted(k for k in configs if k.upper() not in scram_args.MECHANISMS)
    if unknown:
        raise UsageError(
            "only SCRAM credential configs (SCRAM-SHA-256, SCRAM-SHA-512) can be added for "
            f"users; unexpected: {', '.join(unknown)}"
        )
    return [scram_args.scram_credential(k, v) for k, v in configs.items()]


def _read_password(args: argparse.Namespace) -> bytes:
    if args.password_file is not None:
        try:
            if args.password_file == "-":
                line = sys.stdin.readline()
            else:
                with open(args.password_file, encoding="utf-8") as file:
                    line = file.readline()
        except OSError as exc:
            raise CliError(f"cannot read {args.password_file}: {exc.strerror or exc}") from None
        password = line.rstrip("\r\n")
    elif sys.stdin.isatty():
        password = getpass.getpass(f"Password for {args.names[0]}: ")
        if getpass.getpass("Again: ") != password:
            raise CliError("the passwords differ")
    else:
        raise CliError("no terminal to ask for the password on: give --password-file")
    if not password:
        raise CliError("the password is empty")
    return password.encode()


def _friendly_add(args: argparse.Namespace) -> ScramUpsertion:
    if len(args.mechanism) != 1:
        raise UsageError("add takes one --mechanism (SCRAM-SHA-256 or SCRAM-SHA-512)")
    if args.iterations < scram_args.MIN_ITERATIONS:
        raise UsageError(f"--iterations must be at least {scram_args.MIN_ITERATIONS}")
    return ScramUpsertion(args.mechanism[0], args.iterations, _read_password(args))


def _check_style(args: argparse.Namespace) -> None:
    kafka_style = (args.alter, args.describe, args.add_config, args.add_config_file)
    if args.action is None:
        if not (args.alter or args.describe):
            raise UsageError("give an action (add, delete, list) or --alter / --describe")
        if args.names:
            raise UsageError("with --alter or --describe, name users with --entity-name")
        if args.alter and len(args.entity_name) != 1:
            raise UsageError("--alter needs one --entity-name")
        if args.alter and not (args.add_config or args.add_config_file or args.delete_config):
            raise UsageError("--alter needs --add-config, --add-config-file or --delete-config")
        return
    if any(kafka_style) or args.entity_name or args.delete_config:
        raise UsageError(f"{args.action} does not mix with kafka-configs.sh's options")
    if args.action in ("add", "delete") and len(args.names) != 1:
        raise UsageError(f"{args.action} takes one user name")
    if args.password_file is not None and args.action != "add":
        raise UsageError("--password-file is only for add")


# ---- the cluster --------------------------------------------------------------------------


def _mechanism_enum(name: str) -> Any:
    return ScramMechanism[name.replace("-", "_")]


def _mechanism_name(value: Any) -> str:
    return str(value.name).replace("_", "-")


def _mechanisms_of(args: argparse.Namespace, user: str) -> list[str]:
    with wire_cluster(args) as cluster:
        found = describe_scram_credentials(cluster.bootstrap, [user]).get(user)
    if isinstance(found, KafkaApiError):
        raise CliError(f"cannot describe user {user}: {found}")
    if not found:
        raise CliError(f"user {user} has no SCRAM credentials")
    return [name for name, _ in found]


def _alter(
    admin: Any, args: argparse.Namespace, user: str, adds: list[ScramUpsertion], drops: list[str]
) -> None:
    changes: list[Any] = [UserScramCredentialDeletion(user, _mechanism_enum(m)) for m in drops]
    changes += [
        UserScramCredentialUpsertion(
            user, ScramCredentialInfo(_mechanism_enum(a.mechanism), a.iterations), a.password
        )
        for a in adds
    ]
    futures = admin.alter_user_scram_credentials(changes, request_timeout=args.timeout_ms / 1e3)
    try:
        futures[user].result()
    except KafkaException as exc:
        raise CliError(f"cannot alter user {user}: {explain_failure(exc, admin)}") from None
    print(f"Completed updating config for user {user}.")


def _describe(args: argparse.Namespace, users: list[str]) -> int:
    """Each user's mechanisms and iterations (every user's without names), as
    kafka-configs.sh prints them; 1 when a named user has no credentials."""
    with wire_cluster(args) as cluster:
        found = describe_scram_credentials(cluster.bootstrap, users)
        _print_quotas(cluster.bootstrap, users)
    status = 0
    for user in users or sorted(found):
        credentials = found.get(user, KafkaApiError(0, "not in the broker's answer"))
        if isinstance(credentials, KafkaApiError):
            what = f"SCRAM credential configs for user-principal '{user}'"
            print(f"Error retrieving {what}: {credentials}")
            status = 1
            continue
        shown = ", ".join(f"{name}=iterations={n}" for name, n in credentials)
        print(f"SCRAM credential configs for user-principal '{user}' are {shown}")
    return status


def _print_quotas(connection: Any, users: list[str]) -> None:
    """The users' client quotas first, as kafka-configs.sh describes users (a user's
    quotas per client id are `configs --entity-type users --entity-type clients`)."""
    filters: list[list[tuple[str, int, str | None]]] = [
        [("user", MATCH_EXACT, user)] for user in users
    ] or [[("user", MATCH_ANY, None)]]
    for components in filters:
        try:
            quotas = describe_client_quotas(connection, components, strict=True)
        except ClientError:
            return  # a broker without client quotas, or a principal that may not see them
        for entity, values in sorted(quotas.items(), key=lambda item: item[0][0][1] or ""):
            [(_, name)] = entity
            who = "the default user-principal" if name is None else f"user-principal '{name}'"
            shown = ", ".join(f"{key}={value}" for key, value in sorted(values.items()))
            print(f"Quota configs for {who} are {shown}")


def run_users(args: argparse.Namespace) -> int:
    _check_style(args)
    if args.action in ("list", "describe") or args.describe:
        users = list(dict.fromkeys(args.names or args.entity_name))
        return _describe(args, users)
    if args.alter:
        adds = _configs_to_add(args)
        drops = [mechanism(m) for m in scram_args.parse_delete_config(args.delete_config)]
        _alter(connect_admin(args), args, args.entity_name[0], adds, drops)
    elif args.action == "add":
        add = _friendly_add(args)  # the password before connecting: fail fast without one
        _alter(connect_admin(args), args, args.names[0], [add], [])
    else:
        drops = args.mechanism or _mechanisms_of(args, args.names[0])
        _alter(connect_admin(args), args, args.names[0], [], drops)
    return 0
