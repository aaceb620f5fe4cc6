"""`.txnindex`: the aborted transactions whose ABORT marker is in this segment.

Kafka's layout: 34-byte entries of version (int16, 0), producer id (int64), first offset,
last offset (the marker's) and the last stable offset when it was written (int64 each).
read_committed fetches return the entries that overlap what they read, so consumers can
drop the aborted records. Derived data: recovery rebuilds it by replaying markers.

An entry's last stable offset is the LSO just after its marker: the first offset of the
oldest other transaction open across the marker, else the marker's offset + 1. Every
transaction aborted later was open then or began after, so its first offset is at least
that: a fetch's search stops at the first entry whose LSO reaches the end of what it read.
"""

from __future__ import annotations

import os
import struct
from bisect import bisect_left
from operator import attrgetter
from typing import NamedTuple

from onceflow.storage.fs import FileHandle, FileSystem, TornWrite

ENTRY = struct.Struct(">hqqqq")
VERSION = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


_LAST_OFFSET = attrgetter("last_offset")


class TxnIndex:
    def __init__(self, fs: FileSystem, path: str) -> None:
        self.path = path
        self._fs = fs
        self.entries: list[AbortedTxn] = []
        self._file: FileHandle | None = None

    def load(self) -> bool:
        """Read the file; False when it is not sane (then the caller replays markers)."""
        if not self._fs.exists(self.path):
            self.entries = []
            return True
        raw = self._fs.read_file(self.path)
        if len(raw) % ENTRY.size:
            return False
        entries: list[AbortedTxn] = []
        for version, pid, first, last, lso in ENTRY.iter_unpack(raw):
            if version != VERSION or first > last or (entries and last < entries[-1].last_offset):
                return False
            entries.append(AbortedTxn(pid, first, last, lso))
        self.entries = entries
        return True

    def append(self, entry: AbortedTxn) -> None:
        """Add an entry to the file and then to memory; raises OSError with neither done.

        Unlike the sparse indexes, this one may not lack an entry: a missing file means "no
        aborted transactions here", so the marker it indexes is written only after it.
        """
        if self._file is None:
            created = not self._fs.exists(self.path)
            handle = self._fs.open(self.path)
            if created:
                # A snapshot taken later covers this entry: the file must not vanish in a
                # crash, or replay from that snapshot would never rebuild the entry.
                try:
                    self._fs.fsync_dir(os.path.dirname(self.path) or ".")
                except OSError:
                    handle.close()
                    raise
            self._file = handle
        self._file.append(ENTRY.pack(VERSION, *entry))
        self.entries.append(entry)

    def collect(self, fetch_offset: int, upper_offset: int, out: list[AbortedTxn]) -> bool:
        """Kafka's collectAbortedTxns: add to `out` the entries overlapping [fetch_offset,
        upper_offset); True once an entry's LSO reaches `upper_offset`, after which no
        entry, here or in a later segment, can overlap. Entries rise by last offset, so
        those ending before `fetch_offset` are skipped by bisection."""
        entries = self.entries
        for i in range(bisect_left(entries, fetch_offset, key=_LAST_OFFSET), len(entries)):
            entry = entries[i]
            if entry.first_offset < upper_offset:
                out.append(entry)
            if entry.last_stable_offset >= upper_offset:
                return True
        return False

    def drop_last(self) -> None:
        """Take back the last entry (its marker could not be written)."""
        self.entries.pop()
        assert self._file is not None
        try:
            self._file.truncate(self._file.size() - ENTRY.size)
        except OSError as exc:
            raise TornWrite(
                exc.errno, f"{self.path} keeps an entry for a marker never written: {exc}"
            ) from exc

    def rewrite(self, entries: list[AbortedTxn]) -> None:
        self.close()
        self.entries = list(entries)
        if entries:
            self._fs.write_file_atomic(
                self.path, b"".join(ENTRY.pack(VERSION, *e) for e in entries)
            )
        else:
            self._fs.remove(self.path)

    def fsync(self) -> None:
        if self._file is not None:
            self._file.fsync()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
