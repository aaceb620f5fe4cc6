"""`.index` and `.timeindex`: the sparse indexes of a segment, entry by entry.

Offsets in both files are relative to the segment's base offset, which only the file name
carries, so it is read from there and added back. Kafka preallocates index files and a crash
can leave the zero-filled rest in place: a run of all-zero entries after the first entry is
reported as unused space rather than printed as thousands of "offset 0" lines.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import NamedTuple, TextIO

from onceflow.cli.dumpers.registry import DumpOptions, base_offset_of, register_dumper

__all__ = ["OFFSET_ENTRY", "TIME_ENTRY", "dump_offset_index", "dump_time_index"]

OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, position in the .log
TIME_ENTRY = struct.Struct(">qi")  # timestamp, relative offset


class _IndexFile(NamedTuple):
    base_offset: int
    entries: list[tuple[int, int]]  # the two fields of each entry, as stored
    notes: list[str]  # what is odd about the file, shown after the entries


def _read(path: Path, entry: struct.Struct, out: TextIO) -> _IndexFile:
    base = base_offset_of(path)
    if base is None:
        out.write(f"No base offset in the file name {path.name}; offsets shown as relative\n")
        base = 0
    data = path.read_bytes()
    whole = len(data) - len(data) % entry.size
    entries: list[tuple[int, int]] = []
    notes: list[str] = []
    for number, (first, second) in enumerate(entry.iter_unpack(data[:whole])):
        if number > 0 and first == 0 and second == 0:
            unused = whole // entry.size - number
            notes.append(f"{unused} zero-filled entries follow: unused preallocated space")
            break
        entries.append((first, second))
    if whole != len(data):
        notes.append(f"{len(data) - whole} trailing bytes do not make a whole entry")
    return _IndexFile(base, entries, notes)


@register_dumper(".index")
def dump_offset_index(path: Path, options: DumpOptions, out: TextIO) -> int:
    index = _read(path, OFFSET_ENTRY, out)
    for relative, position in index.entries:
        out.write(f"offset: {index.base_offset + relative} position: {position}\n")
    out.writelines(note + "\n" for note in index.notes)
    return 0


@register_dumper(".timeindex")
def dump_time_index(path: Path, options: DumpOptions, out: TextIO) -> int:
    index = _read(path, TIME_ENTRY, out)
    for timestamp, relative in index.entries:
        out.write(f"timestamp: {timestamp} offset: {index.base_offset + relative}\n")
    out.writelines(note + "\n" for note in index.notes)
    return 0
