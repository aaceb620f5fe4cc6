"""The file behind a sparse in-memory index (`.index`, `.timeindex`).

Entries are appended to the file as they are made. Indexes are derived data, so a failed
write never fails the append it indexes: the file becomes stale, is removed, and is
rewritten whole at the next sync (a roll or a clean shutdown) or rebuilt by recovery at the
next start. Appends are all-or-nothing (see fs.py), so before that the file only ever lacks
entries, and a sparse index that lacks entries is still correct.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

from onceflow.storage.fs import FileHandle, FileSystem, write_if_changed

log = logging.getLogger(__name__)


class IndexFile:
    def __init__(self, fs: FileSystem, path: str) -> None:
        self.fs = fs
        self.path = path
        self.stale = False  # the file misses entries the index holds in memory
        self._file: FileHandle | None = None

    def append(self, raw: bytes) -> None:
        if self.stale:
            return
        try:
            if self._file is None:
                self._file = self.fs.open(self.path)
            self._file.append(raw)
        except OSError as exc:
            self._give_up(exc)

    def replace(self, data: bytes) -> None:
        """Store exactly `data`, durably, or leave the file stale (missing)."""
        self.close()
        try:
            write_if_changed(self.fs, self.path, data)
        except OSError as exc:
            self._give_up(exc)
        else:
            self.stale = False

    def sync(self, encode: Callable[[], bytes]) -> None:
        """Make the file durable; a stale one is rewritten whole from `encode()`."""
        if self.stale:
            self.replace(encode())
        elif self._file is not None:
            try:
                self._file.fsync()
            except OSError as exc:
                self._give_up(exc)

    def _give_up(self, exc: OSError) -> None:
        if not self.stale:
            log.warning("%s: index write failed (%s); it is rebuilt later", self.path, exc)
        self.close()
        self.stale = True
        with contextlib.suppress(OSError):
            self.fs.remove(self.path)  # a missing index is rebuilt; a short one would not be

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
