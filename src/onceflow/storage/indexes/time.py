"""`.timeindex`: sparse map from timestamp to offset, Kafka's layout.

Each entry is 12 bytes: timestamp (int64) and offset relative to the segment base (int32).
Timestamps only grow across entries, so a lookup by time bisects.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_left

from onceflow.storage.fs import FileSystem
from onceflow.storage.indexes.file import IndexFile

ENTRY = struct.Struct(">qi")


class TimeIndex:
    def __init__(self, fs: FileSystem, path: str, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._fs = fs
        self.timestamps = array("q")
        self.offsets = array("q")
        self._file = IndexFile(fs, path)
        self._rebuilding = False  # entries kept in memory only until `rewrite`

    def __len__(self) -> int:
        return len(self.timestamps)

    def load(self, next_offset: int) -> bool:
        if not self._fs.exists(self.path):
            return False
        raw = self._fs.read_file(self.path)
        if len(raw) % ENTRY.size:
            return False
        timestamps = array("q")
        offsets = array("q")
        for ts, rel in ENTRY.iter_unpack(raw):
            offset = self.base_offset + rel
            if (timestamps and ts <= timestamps[-1]) or rel < 0 or offset >= next_offset:
                return False
            timestamps.append(ts)
            offsets.append(offset)
        self.timestamps, self.offsets = timestamps, offsets
        return True

    def append(self, timestamp: int, offset: int) -> None:
        if self.timestamps and timestamp <= self.timestamps[-1]:
            return
        self.timestamps.append(timestamp)
        self.offsets.append(offset)
        if not self._rebuilding:
            self._file.append(ENTRY.pack(timestamp, offset - self.base_offset))

    def start_rebuild(self) -> None:
        """Forget every entry; appends stay in memory until `rewrite` stores them."""
        self.close()
        self.timestamps, self.offsets = array("q"), array("q")
        self._rebuilding = True

    def lookup(self, timestamp: int) -> int:
        """An offset from which to scan for the first record at or after `timestamp`."""
        i = bisect_left(self.timestamps, timestamp)
        if i == 0:
            return self.base_offset
        return self.offsets[i - 1]

    @property
    def max_timestamp(self) -> int:
        return self.timestamps[-1] if self.timestamps else -1

    def rewrite(self, entries: list[tuple[int, int]]) -> None:
        self.close()
        self._rebuilding = False
        self.timestamps = array("q", (t for t, _ in entries))
        self.offsets = array("q", (o for _, o in entries))
        self._file.replace(self._encode())

    def finish_rebuild(self) -> None:
        self.rewrite(list(zip(self.timestamps, self.offsets, strict=True)))

    def fsync(self) -> None:
        self._file.sync(self._encode)

    def _encode(self) -> bytes:
        return b"".join(
            ENTRY.pack(t, o - self.base_offset)
            for t, o in zip(self.timestamps, self.offsets, strict=True)
        )

    def close(self) -> None:
        self._file.close()
