"""Kafka's offset checkpoint files: a version line (0), a count, then one `topic partition
offset` line per partition, replaced atomically (Kafka's OffsetCheckpointFile).

log-start-offset-checkpoint is one: the log start offset of each partition where it is past
the first segment's base (DeleteRecords moved it), so that no restart or crash brings
deleted records back.
"""

from __future__ import annotations

from collections.abc import Mapping

from onceflow.storage.fs import FileSystem

LOG_START_CHECKPOINT = "log-start-offset-checkpoint"

Offsets = dict[tuple[str, int], int]


def encode(offsets: Mapping[tuple[str, int], int]) -> bytes:
    lines = [f"{t} {p} {offset}" for (t, p), offset in offsets.items()]
    return ("\n".join(["0", str(len(lines)), *lines]) + "\n").encode()


def decode(data: bytes) -> Offsets:
    """Raises ValueError (or IndexError, UnicodeDecodeError) for a file it cannot read."""
    lines = data.decode().splitlines()
    if lines[0] != "0":
        raise ValueError(f"unknown checkpoint version {lines[0]!r}")
    count = int(lines[1])
    offsets: Offsets = {}
    for line in lines[2 : 2 + count]:
        topic, partition, offset = line.rsplit(" ", 2)
        offsets[(topic, int(partition))] = int(offset)
    if len(offsets) != count:
        raise ValueError(f"{count} entries announced, {len(offsets)} found")
    return offsets


def write(fs: FileSystem, path: str, offsets: Mapping[tuple[str, int], int]) -> None:
    fs.write_file_atomic(path, encode(offsets))


def read(fs: FileSystem, path: str) -> Offsets:
    """The file's offsets; {} when there is none. Raises as decode() for a bad one."""
    if not fs.exists(path):
        return {}
    return decode(fs.read_file(path))
