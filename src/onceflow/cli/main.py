"""`onceflow ...`: the command line entry point.

Each command family lives in its own module with a `register(subparsers)` that adds its
parser, in the syntax of the Kafka tool that does its job, and sets `func` (and `normalize`,
which `argv.OnceflowParser` runs after parsing; it also rewrites the older short forms
before). This module only builds the parser, sets up logging and turns failures into exit
codes: user errors (a `CliError`, or the client package's `ClientError`)
are one line on stderr and exit 1, usage errors keep argparse's exit 2, and a traceback
means a bug.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import logging
import os
import sys
from collections.abc import Callable
from typing import cast

from onceflow.cli import (
    acls,
    bench,
    cluster,
    configs,
    console,
    consume,
    delete_records,
    dualwrite,
    dump_log,
    groups,
    leader_election,
    outbox,
    produce,
    reassign,
    serve,
    share_groups,
    topics,
    transactions,
    users,
)
from onceflow.cli.argv import OnceflowParser
from onceflow.cli.common import KAFKA_LOG, CliError, UsageError
from onceflow.client.errors import ClientError

__all__ = ["build_parser", "main"]

PROG = "onceflow"
CLIENT_LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"


def version() -> str:
    """The installed package's version (`unknown` when run from a bare source tree)."""
    try:
        return importlib.metadata.version("onceflow")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = OnceflowParser(
        prog=PROG,
        description="Onceflow: exactly-once streaming on a Kafka-compatible broker. The "
        "commands take the options of the Kafka tool that does the same job "
        "(kafka-topics.sh, kafka-console-producer.sh, ...).",
    )
    parser.translate_aliases = True
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="also show the Kafka client's own log"
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (
        serve,
        cluster,
        topics,
        produce,
        consume,
        groups,
        share_groups,
        delete_records,
        dump_log,
        transactions,
        acls,
        users,
        configs,
        leader_election,
        reassign,
        bench,
        console,
        outbox,
        dualwrite,
    ):
        module.register(commands)
    for command in commands.choices.values():  # as every Kafka tool takes --version
        command.add_argument("--version", action="version", version=f"{PROG} {version()}")
    return parser


def _setup_client_logging(verbose: bool) -> None:
    """Warnings to stderr; librdkafka's chatter only when asked for.

    basicConfig does nothing when the root logger already has handlers (an embedding
    application, or pytest), so this never fights someone else's logging setup.
    """
    logging.basicConfig(level=logging.WARNING, format=CLIENT_LOG_FORMAT)
    KAFKA_LOG.setLevel(logging.DEBUG if verbose else logging.CRITICAL + 1)


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns the process exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) and usage errors (2)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    if args.command != "serve":  # serve sets up its own, broker-wide logging
        _setup_client_logging(args.verbose)
    func = cast(Callable[[argparse.Namespace], int], args.func)
    try:
        return func(args)
    except UsageError as exc:
        command_parser = cast(argparse.ArgumentParser, args.command_parser)
        command_parser.print_usage(sys.stderr)
        print(f"{command_parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    except (CliError, ClientError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`onceflow consume ... | head`): not an error worth a line.
        # Point stdout at /dev/null so the interpreter's final flush does not fail again.
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
