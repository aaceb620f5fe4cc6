"""`onceflow dualwrite recover`: complete or abort the prepared transactions that dual
writers (onceflow.dualwrite) left behind, from what their database says."""

from __future__ import annotations

import argparse
from typing import Any

from onceflow.cli.common import add_bootstrap_option, non_negative_int
from onceflow.dualwrite import DualWriter, recover_abandoned
from onceflow.dualwrite.state import DEFAULT_STATE_TABLE

__all__ = ["register"]


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "dualwrite", help="recover the prepared transactions of dual writers"
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    recover = actions.add_parser(
        "recover",
        help="commit or abort what dual writers left prepared, as their database says",
        description=(
            "The check-back of onceflow.dualwrite: every open two-phase commit transaction "
            "of a transactional id in the state table, open longer than --older-than-ms, is "
            "committed if the database committed its unit and aborted otherwise; its writer "
            "is fenced. With --transactional-id, that id alone, whatever its age."
        ),
    )
    add_bootstrap_option(recover)
    recover.add_argument(
        "--dsn", required=True, help="sqlite:///path/file.db or postgresql://user@host/db"
    )
    recover.add_argument("--state-table", default=DEFAULT_STATE_TABLE)
    recover.add_argument(
        "--older-than-ms",
        type=non_negative_int,
        default=60_000,
        help="leave younger transactions to their writers (default 60000)",
    )
    recover.add_argument("--transactional-id", help="recover this id only")
    recover.set_defaults(func=run_recover, command_parser=recover)


def run_recover(args: argparse.Namespace) -> int:
    if args.transactional_id:
        with DualWriter(
            args.dsn,
            args.bootstrap_server,
            args.transactional_id,
            state_table=args.state_table,
            recovery_interval_s=None,
        ) as writer:
            outcomes = {args.transactional_id: writer.last_recovery}
    else:
        outcomes = recover_abandoned(
            args.dsn,
            args.bootstrap_server,
            older_than_s=args.older_than_ms / 1000,
            state_table=args.state_table,
        )
    for transactional_id, outcome in sorted(outcomes.items()):
        print(f"{transactional_id}\t{outcome}")
    if not outcomes:
        print("nothing to recover")
    return 0
