"""Readable dumps of the files in a partition directory, one module per kind of file.

Importing this package registers every built-in dumper; see `registry` for adding more.
"""

from onceflow.cli.dumpers import indexes, segment, snapshot, transactions
from onceflow.cli.dumpers.registry import (
    DumpOptions,
    base_offset_of,
    dumper_for,
    known_suffixes,
    suffixes_in_directory,
)

__all__ = [
    "DumpOptions",
    "base_offset_of",
    "dumper_for",
    "indexes",
    "known_suffixes",
    "segment",
    "snapshot",
    "suffixes_in_directory",
    "transactions",
]
