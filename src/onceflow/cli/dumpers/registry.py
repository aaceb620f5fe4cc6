"""Which function dumps which file, chosen by suffix, and how records are shown per topic.

A partition directory holds several kinds of file (`.log`, `.index`, `.timeindex`, and later
`.txnindex` and `.snapshot`), and the internal topics store structured records that deserve
a decoder of their own. Both are open tables here, so adding a file kind or a topic decoder
is one decorated function in its own module, without touching the command.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, TextIO

from onceflow.records.record import Record

__all__ = [
    "DumpOptions",
    "Dumper",
    "RecordFormatter",
    "base_offset_of",
    "dumper_for",
    "known_suffixes",
    "record_formatter_for",
    "register_dumper",
    "register_record_formatter",
    "suffixes_in_directory",
    "topic_of",
]


@dataclass(frozen=True)
class DumpOptions:
    print_data_log: bool = False
    verify_crc: bool = False


# Writes a readable form of the file to `out`; returns the exit status it calls for (0 or 1).
Dumper = Callable[[Path, DumpOptions, TextIO], int]
# The tail of a record's line after its fixed fields, e.g. "key: k payload: v".
RecordFormatter = Callable[[Record], str]


class _Registered(NamedTuple):
    dumper: Dumper
    in_directory: bool


_DUMPERS: dict[str, _Registered] = {}
_RECORD_FORMATTERS: dict[str, RecordFormatter] = {}


def register_dumper(suffix: str, *, in_directory: bool = False) -> Callable[[Dumper], Dumper]:
    """Decorator: `func` dumps files ending in `suffix` (with its dot, e.g. ".log").

    `in_directory` files are also dumped when the user names a whole partition directory.
    """

    def decorate(func: Dumper) -> Dumper:
        if suffix in _DUMPERS:
            raise ValueError(f"a dumper for {suffix} is already registered")
        _DUMPERS[suffix] = _Registered(func, in_directory)
        return func

    return decorate


def dumper_for(path: Path) -> Dumper | None:
    entry = _DUMPERS.get(path.suffix)
    return entry.dumper if entry is not None else None


def known_suffixes() -> list[str]:
    return sorted(_DUMPERS)


def suffixes_in_directory() -> list[str]:
    return sorted(suffix for suffix, entry in _DUMPERS.items() if entry.in_directory)


def register_record_formatter(topic: str) -> Callable[[RecordFormatter], RecordFormatter]:
    """Decorator: records of `topic` (e.g. "__transaction_state") are shown by `func`."""

    def decorate(func: RecordFormatter) -> RecordFormatter:
        _RECORD_FORMATTERS[topic] = func
        return func

    return decorate


def topic_of(path: Path) -> str | None:
    """The topic of a segment in Kafka's `<topic>-<partition>/` directory, if it is one."""
    topic, sep, partition = path.parent.name.rpartition("-")
    return topic if sep and topic and partition.isdigit() else None


def record_formatter_for(path: Path) -> RecordFormatter | None:
    topic = topic_of(path)
    return _RECORD_FORMATTERS.get(topic) if topic is not None else None


def base_offset_of(path: Path) -> int | None:
    """The base offset a segment file's name carries (`00000000000000000042.log` -> 42)."""
    stem = path.name.split(".", 1)[0]
    return int(stem) if stem.isdigit() else None
