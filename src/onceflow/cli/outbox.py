"""`onceflow outbox relay`: publish an outbox table's rows exactly once (onceflow.dualwrite)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

from onceflow.cli.common import add_bootstrap_option, positive_int
from onceflow.dualwrite import Fenced
from onceflow.dualwrite.relay import DEFAULT_LEDGER_TABLE, OutboxRelay

__all__ = ["FENCED_EXIT", "register"]

FENCED_EXIT = 3  # a newer relay of the same table and topic took over


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "outbox", help="relay an outbox table's rows to a topic exactly once"
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    relay = actions.add_parser(
        "relay",
        help="publish each row of --table to --topic once, in order per key",
        description=(
            "Publish each row of an outbox table as one record, exactly once: each round "
            "reads unpublished rows, produces them in a two-phase commit transaction and "
            "records their ids in the database in the same unit (KIP-939). A newer relay "
            f"of the same table and topic fences this one (exit {FENCED_EXIT})."
        ),
    )
    add_bootstrap_option(relay)
    relay.add_argument(
        "--dsn", required=True, help="sqlite:///path/file.db or postgresql://user@host/db"
    )
    relay.add_argument("--table", required=True, help="the outbox table")
    relay.add_argument("--topic", required=True)
    relay.add_argument("--id-column", default="id", help="increasing row id (default id)")
    relay.add_argument(
        "--key-column", default="key", help="the record key; '' for none (default key)"
    )
    relay.add_argument("--value-column", default="value", help="the record value (default value)")
    relay.add_argument("--relay-id", help="names the relay's progress (default TABLE-TOPIC)")
    relay.add_argument("--ledger-table", default=DEFAULT_LEDGER_TABLE)
    relay.add_argument("--batch-size", type=positive_int, default=1000, help="rows per unit")
    relay.add_argument(
        "--poll-interval-ms", type=positive_int, default=500, help="wait when nothing is new"
    )
    relay.add_argument(
        "--until-empty", action="store_true", help="exit once every row is published"
    )
    relay.set_defaults(func=run_relay, command_parser=relay)


def run_relay(args: argparse.Namespace) -> int:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    relay = OutboxRelay(
        args.dsn,
        args.bootstrap_server,
        args.table,
        args.topic,
        relay_id=args.relay_id,
        id_column=args.id_column,
        key_column=args.key_column or None,
        value_column=args.value_column,
        ledger_table=args.ledger_table,
        batch_size=args.batch_size,
    )
    try:
        published = relay.run(
            stop, poll_interval_s=args.poll_interval_ms / 1000, until_empty=args.until_empty
        )
    except Fenced as exc:
        print(f"onceflow outbox relay: fenced: {exc}", file=sys.stderr)
        return FENCED_EXIT
    finally:
        relay.close()
    print(f"published {published} rows of {args.table} to {args.topic}", flush=True)
    return 0
