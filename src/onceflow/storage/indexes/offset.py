"""`.index`: sparse map from offset to file position, Kafka's layout.

Each entry is 8 bytes: offset relative to the segment's base (int32) and byte position
(int32). Entries are kept in memory for bisection and appended to the file as they are made.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_right

from onceflow.storage.fs import FileSystem
from onceflow.storage.indexes.file import IndexFile

ENTRY = struct.Struct(">ii")


class OffsetIndex:
    def __init__(self, fs: FileSystem, path: str, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._fs = fs
        self.offsets = array("q")
        self.positions = array("q")
        self._file = IndexFile(fs, path)
        self._rebuilding = False  # entries kept in memory only until `rewrite`

    def __len__(self) -> int:
        return len(self.offsets)

    def load(self, log_size: int) -> bool:
        """Read the file; return False (and stay empty) when it is missing or not sane."""
        if not self._fs.exists(self.path):
            return False
        raw = self._fs.read_file(self.path)
        if len(raw) % ENTRY.size:
            return False
        offsets = array("q")
        positions = array("q")
        last_offset, last_pos = -1, -1
        for rel, pos in ENTRY.iter_unpack(raw):
            if rel <= last_offset or pos <= last_pos or pos >= log_size or rel < 0:
                return False
            offsets.append(self.base_offset + rel)
            positions.append(pos)
            last_offset, last_pos = rel, pos
        self.offsets, self.positions = offsets, positions
        return True

    def append(self, offset: int, position: int) -> None:
        if self.offsets and offset <= self.offsets[-1]:
            return
        self.offsets.append(offset)
        self.positions.append(position)
        if not self._rebuilding:
            self._file.append(ENTRY.pack(offset - self.base_offset, position))

    def start_rebuild(self) -> None:
        """Forget every entry; appends stay in memory until `rewrite` stores them."""
        self.close()
        self.offsets, self.positions = array("q"), array("q")
        self._rebuilding = True

    def lookup(self, offset: int) -> tuple[int, int]:
        """The last entry at or below `offset`, or the segment start."""
        i = bisect_right(self.offsets, offset)
        if i == 0:
            return self.base_offset, 0
        return self.offsets[i - 1], self.positions[i - 1]

    def rewrite(self, entries: list[tuple[int, int]]) -> None:
        """Replace the whole index (after a rebuild or a truncation)."""
        self.close()
        self._rebuilding = False
        self.offsets = array("q", (o for o, _ in entries))
        self.positions = array("q", (p for _, p in entries))
        self._file.replace(self._encode())

    def finish_rebuild(self) -> None:
        self.rewrite(list(zip(self.offsets, self.positions, strict=True)))

    def truncate_to_position(self, position: int) -> None:
        """Drop entries at or past `position`."""
        keep = bisect_right(self.positions, position - 1)
        if keep < len(self.positions):
            self.rewrite(list(zip(self.offsets[:keep], self.positions[:keep], strict=True)))

    def fsync(self) -> None:
        self._file.sync(self._encode)

    def _encode(self) -> bytes:
        return b"".join(
            ENTRY.pack(o - self.base_offset, p)
            for o, p in zip(self.offsets, self.positions, strict=True)
        )

    def close(self) -> None:
        self._file.close()
