"""`onceflow bench`: measure a user's own broker (Onceflow or Apache Kafka) with the client
workloads of the benchmark suite (`onceflow.bench`).

The run creates its own topics, named `onceflow-bench-<8 hex>-...`, and deletes them at the
end, even after a failure or Ctrl-C. A broker that refuses the deletion is only a warning:
the figures are still good. Progress goes to stderr, the table to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from onceflow.bench.figures import SECTIONS, Sizes, delete_topics, measure, run_prefix
from onceflow.bench.stats import figure_table
from onceflow.bench.workloads import BenchError
from onceflow.cli.command_config import add_command_config_option, security_properties
from onceflow.cli.common import (
    CliError,
    UsageError,
    add_bootstrap_option,
    positive_float,
    positive_int,
    probe_bootstrap,
)

__all__ = ["register", "run_bench"]

DEFAULTS = Sizes()


def sections(text: str) -> list[str]:
    """argparse type for `--only`: comma-separated names out of SECTIONS."""
    names = [name.strip() for name in text.split(",")]
    unknown = [name for name in names if name not in SECTIONS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown section {unknown[0]!r} (choose from {','.join(SECTIONS)})"
        )
    return names


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "bench",
        help="measure a broker's throughput and latency",
        description=(
            "Measure a Kafka-protocol broker (Onceflow or Kafka) with the benchmark suite's "
            "client workloads: idempotent and transactional produce, consume at both "
            "isolation levels, end-to-end latency. Each figure is a median of --repeat runs."
        ),
    )
    add_bootstrap_option(parser)
    add_command_config_option(parser)
    parser.add_argument(
        "--messages",
        type=positive_int,
        default=DEFAULTS.messages,
        metavar="N",
        help=f"records per produce and consume run (default {DEFAULTS.messages})",
    )
    parser.add_argument(
        "--value-bytes",
        type=positive_int,
        default=DEFAULTS.value_bytes,
        metavar="N",
        help=f"value size of produce and consume records (default {DEFAULTS.value_bytes})",
    )
    parser.add_argument(
        "--repeat",
        type=positive_int,
        default=DEFAULTS.repeat,
        metavar="N",
        help=f"runs per figure; figures are medians (default {DEFAULTS.repeat})",
    )
    parser.add_argument(
        "--only",
        type=sections,
        default=list(SECTIONS),
        metavar="SECTION[,...]",
        help=f"sections to run, out of {','.join(SECTIONS)} (default all)",
    )
    parser.add_argument(
        "--latency-rate",
        type=positive_int,
        default=DEFAULTS.latency_rate,
        metavar="MSG/S",
        help=f"offered rate of the latency runs (default {DEFAULTS.latency_rate})",
    )
    parser.add_argument(
        "--latency-seconds",
        type=positive_float,
        default=DEFAULTS.latency_seconds,
        metavar="S",
        help=f"length of each latency run (default {DEFAULTS.latency_seconds:g})",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the figures to PATH as JSON")
    parser.set_defaults(func=run_bench, command_parser=parser)


def _progress(line: str) -> None:
    print(f"onceflow bench: {line}", file=sys.stderr, flush=True)


def run_bench(args: argparse.Namespace) -> int:
    if "latency" in args.only and int(args.latency_rate * args.latency_seconds) < 1:
        raise UsageError("--latency-rate x --latency-seconds must be at least one message")
    if args.json is not None and not Path(args.json).resolve().parent.is_dir():
        raise CliError(f"cannot write {args.json}: its directory does not exist")
    security = security_properties(args)
    endpoint = {"bootstrap.servers": args.bootstrap_server, **security}
    probe_bootstrap(args.bootstrap_server)
    sizes = Sizes(
        args.messages, args.value_bytes, args.repeat, args.latency_rate, args.latency_seconds
    )
    prefix = run_prefix()
    _progress(f"{args.bootstrap_server}, topics {prefix}*")
    try:
        figures = measure(endpoint, sizes, set(args.only), prefix, _progress)
    except BenchError as exc:
        raise CliError(str(exc)) from None
    finally:
        try:
            delete_topics(endpoint, prefix)
        except BenchError as exc:
            print(f"onceflow bench: warning: topics not deleted: {exc}", file=sys.stderr)
    cores = os.cpu_count()
    print(figure_table(figures, args.repeat, cores))
    if args.json is not None:
        out = {
            "bootstrap": args.bootstrap_server,
            "cores": cores,
            "repeat": args.repeat,
            "messages": args.messages,
            "value_bytes": args.value_bytes,
            "latency_rate": args.latency_rate,
            "latency_seconds": args.latency_seconds,
            "figures": figures,
        }
        try:
            Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
        except OSError as exc:
            raise CliError(f"cannot write {args.json}: {exc.strerror or exc}") from None
    return 0
