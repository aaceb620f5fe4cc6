"""Producer ids that no earlier producer ever had, also across restarts.

Like Kafka's controller, ids are handed out in blocks, and the end of a block is made durable
before any id from it is used. After a crash the unused rest of the current block is skipped,
never reused. Alone, the block is recorded in the data dir; on a cluster, blocks come from
ZooKeeper (`allocate_block`), so no two brokers ever hand out the same id.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from onceflow.storage.fs import FileSystem

#: Given a block size, the next block [start, end] reserved for this broker for ever.
BlockSource = Callable[[int], tuple[int, int]]

BLOCK_SIZE = 1000
STATE_FILE = "producer-id-block"


class ProducerIdManager:
    def __init__(self, fs: FileSystem, directory: str, block_size: int = BLOCK_SIZE) -> None:
        self._fs = fs
        self._path = os.path.join(directory, STATE_FILE)
        self._block_size = block_size
        self._next = 0
        self._block_end = 0  # ids below this are reserved on disk
        self.allocate_block: BlockSource | None = None

    def load(self) -> None:
        if self._fs.exists(self._path):
            text = self._fs.read_file(self._path).decode().strip()
            try:
                reserved = int(text.rsplit("=", 1)[-1])
            except ValueError as exc:
                raise RuntimeError(f"{self._path} is corrupt: {text!r}") from exc
            self._next = self._block_end = reserved

    def next_id(self) -> int:
        if self._next >= self._block_end and self.allocate_block is not None:
            start, end = self.allocate_block(self._block_size)
            self._next, self._block_end = start, end + 1
        elif self._next >= self._block_end:
            end = self._next + self._block_size
            self._fs.write_file_atomic(self._path, f"next.block.start={end}\n".encode())
            self._block_end = end
        producer_id = self._next
        self._next += 1
        return producer_id
