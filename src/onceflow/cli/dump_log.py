"""`onceflow dump-log --files PATH,...` (or PATH...): show what a partition's files hold,
without a broker.

A storage tool: it reads files in Kafka's layout (`<topic>-<partition>/<base offset>.log` and
its indexes) through `onceflow.records`, so it works on a stopped or crashed broker's data
dir and on Apache Kafka's too. The work per kind of file lives in `onceflow.cli.dumpers`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from onceflow.cli.common import CliError, UsageError
from onceflow.cli.dumpers import (
    DumpOptions,
    base_offset_of,
    dumper_for,
    known_suffixes,
    suffixes_in_directory,
)

__all__ = ["expand_paths", "register", "run_dump_log"]


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "dump-log",
        help="print the batches and records of log segments and their indexes",
        description=(
            "Print segment files (.log), offset indexes (.index) and time indexes "
            "(.timeindex). A directory stands for all its .log files, in offset order."
        ),
    )
    parser.add_argument(
        "--files",
        type=lambda text: [path for path in text.split(",") if path],
        action="extend",
        default=[],
        metavar="PATH[,PATH...]",
        help="files or partition directories, comma-separated (as kafka-dump-log.sh takes them)",
    )
    parser.add_argument("paths", nargs="*", metavar="PATH", help="the same, as positionals")
    parser.add_argument("--print-data-log", action="store_true", help="print every record too")
    parser.add_argument(
        "--verify-crc",
        action="store_true",
        help="exit 1 if a batch fails its CRC check or a segment ends in a partial batch",
    )
    parser.set_defaults(func=run_dump_log, command_parser=parser, normalize=_normalize)


def _normalize(args: argparse.Namespace) -> None:
    args.paths = [*args.files, *args.paths]
    del args.files  # merged: either form gives the same request
    if not args.paths:
        raise UsageError("give --files PATH[,PATH...]")


def _segment_order(path: Path) -> tuple[int, str]:
    base = base_offset_of(path)
    return (base if base is not None else -1, path.name)


def expand_paths(names: list[str]) -> list[Path]:
    """The files to dump: files as given, directories as their segments in offset order."""
    files: list[Path] = []
    for name in names:
        path = Path(name)
        if path.is_dir():
            wanted = suffixes_in_directory()
            found = sorted((p for p in path.iterdir() if p.suffix in wanted), key=_segment_order)
            if not found:
                raise CliError(f"{path} holds no {' or '.join(wanted)} files")
            files.extend(found)
        elif not path.exists():
            raise CliError(f"{path}: no such file or directory")
        elif dumper_for(path) is None:
            raise CliError(f"cannot dump {path}: expected a {', '.join(known_suffixes())} file")
        else:
            files.append(path)
    return files


def run_dump_log(args: argparse.Namespace) -> int:
    options = DumpOptions(print_data_log=args.print_data_log, verify_crc=args.verify_crc)
    out = sys.stdout
    status = 0
    for path in expand_paths(args.paths):
        dumper = dumper_for(path)
        assert dumper is not None  # expand_paths only returns files with a dumper
        out.write(f"Dumping {path}\n")
        try:
            status |= dumper(path, options, out)
        except OSError as exc:
            print(f"onceflow: error: cannot read {path}: {exc.strerror or exc}", file=sys.stderr)
            status = 1
    out.flush()
    return status
