"""`onceflow console`: serve the web console (see onceflow.console) until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
from typing import Any

from onceflow.cli.command_config import add_command_config_option
from onceflow.cli.common import CliError, add_bootstrap_option, host_port, positive_int

__all__ = ["register"]

DEFAULT_LISTEN = "127.0.0.1:8080"


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "console", help="serve a web console: transactions, LSO lag, hanging transactions, groups"
    )
    add_bootstrap_option(parser)
    parser.add_argument(
        "--listen",
        type=host_port,
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help=f"where the console's web server listens (default {DEFAULT_LISTEN})",
    )
    add_command_config_option(parser)
    parser.add_argument(
        "--timeout-ms",
        type=positive_int,
        default=10_000,
        help="how long each Kafka call may take before the page shows an error (default 10000)",
    )
    parser.add_argument(
        "--max-transaction-timeout",
        type=positive_int,
        default=15,
        metavar="MINUTES",
        help="the cluster's transaction.max.timeout.ms in minutes, for finding hanging "
        "transactions (default 15)",
    )
    parser.set_defaults(func=run, command_parser=parser)


def run(args: argparse.Namespace) -> int:
    # Imported here: the web framework loads only for this command.
    from aiohttp import web

    from onceflow.console.app import make_app
    from onceflow.console.settings import ConsoleSettings, security_from_file

    settings = ConsoleSettings(
        bootstrap=args.bootstrap_server,
        timeout_s=args.timeout_ms / 1000.0,
        max_transaction_timeout_ms=args.max_transaction_timeout * 60_000,
        security=security_from_file(args.command_config),
    )
    host, _, port = args.listen.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")

    def started(_: str) -> None:
        print(f"onceflow console on http://{args.listen}/ for {args.bootstrap_server}", flush=True)

    try:
        web.run_app(make_app(settings), host=host, port=int(port), print=started, access_log=None)
    except OSError as exc:
        raise CliError(f"cannot listen on {args.listen}: {exc.strerror or exc}") from None
    return 0
