"""The FileSystem seam: every storage write goes through it.

`RealFileSystem` is the os module. `SimFileSystem` keeps files in memory and, at a simulated
crash, drops what was never fsynced (TigerBeetle-style): unsynced tails are cut at a seeded
random point, and files whose directory entry was never synced disappear. Recovery code is
tested against it at every step.
"""

from __future__ import annotations

import contextlib
import os
import random
from typing import Protocol


class FileHandle(Protocol):
    """An open file that is appended to, read at positions and synced."""

    path: str

    def append(self, data: bytes | bytearray | memoryview) -> None: ...
    def pread(self, size: int, position: int) -> bytes: ...
    def size(self) -> int: ...
    def fsync(self) -> None: ...
    def truncate(self, size: int) -> None: ...
    def close(self) -> None: ...
    def fileno(self) -> int | None:
        """The OS descriptor for zero-copy sendfile, or None for in-memory files."""
        ...


class FileSystem(Protocol):
    def open(self, path: str) -> FileHandle:
        """Open for appending and reading, creating the file if missing."""
        ...

    def read_file(self, path: str) -> bytes: ...
    def write_file_atomic(self, path: str, data: bytes) -> None:
        """Replace a small file so a crash leaves the old or the new content, never a mix."""
        ...

    def exists(self, path: str) -> bool: ...
    def listdir(self, path: str) -> list[str]: ...
    def makedirs(self, path: str) -> None: ...
    def remove(self, path: str) -> None: ...
    def rename(self, src: str, dst: str) -> None: ...
    def rmtree(self, path: str) -> None: ...
    def fsync_dir(self, path: str) -> None: ...
    def isdir(self, path: str) -> bool: ...


class RealFile:
    __slots__ = ("_fd", "_size", "path")

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        self._size = os.fstat(self._fd).st_size

    def append(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        written = 0
        while written < len(view):
            written += os.write(self._fd, view[written:])
        self._size += written

    def pread(self, size: int, position: int) -> bytes:
        return os.pread(self._fd, size, position)

    def size(self) -> int:
        return self._size

    def fsync(self) -> None:
        if self._fd >= 0:  # a closed (replaced or deleted) segment has nothing left to sync
            os.fdatasync(self._fd)

    def truncate(self, size: int) -> None:
        os.ftruncate(self._fd, size)
        self._size = size

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def fileno(self) -> int | None:
        return self._fd


class RealFileSystem:
    def open(self, path: str) -> FileHandle:
        return RealFile(path)

    def read_file(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def write_file_atomic(self, path: str, data: bytes) -> None:
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        self.fsync_dir(os.path.dirname(path) or ".")

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(path))

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def remove(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def rmtree(self, path: str) -> None:
        import shutil

        shutil.rmtree(path, ignore_errors=True)

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def isdir(self, path: str) -> bool:
        return os.path.isdir(path)


def write_if_changed(fs: FileSystem, path: str, data: bytes) -> None:
    """`write_file_atomic`, or only an fsync when the file already holds exactly `data`
    (durable either way). Recovery rebuilds the indexes of every partition's active segment,
    and most come out unchanged: this spares each a temporary file, a rename and a
    directory sync."""
    if fs.exists(path) and fs.read_file(path) == data:
        handle = fs.open(path)
        try:
            handle.fsync()
        finally:
            handle.close()
        return
    fs.write_file_atomic(path, data)


class _SimInode:
    __slots__ = ("data", "durable")

    def __init__(self) -> None:
        self.data = bytearray()
        self.durable = 0  # bytes of `data` known to be on disk


class SimFile:
    def __init__(self, fs: SimFileSystem, path: str, inode: _SimInode) -> None:
        self._fs = fs
        self.path = path
        self._inode = inode
        self._closed = False

    def append(self, data: bytes | bytearray | memoryview) -> None:
        self._fs.step(f"append {self.path}")
        self._inode.data += data

    def pread(self, size: int, position: int) -> bytes:
        return bytes(self._inode.data[position : position + size])

    def size(self) -> int:
        return len(self._inode.data)

    def fsync(self) -> None:
        self._fs.step(f"fsync {self.path}")
        self._inode.durable = len(self._inode.data)

    def truncate(self, size: int) -> None:
        self._fs.step(f"truncate {self.path}")
        del self._inode.data[size:]
        self._inode.durable = min(self._inode.durable, size)

    def close(self) -> None:
        self._closed = True

    def fileno(self) -> int | None:
        return None


class SimulatedCrash(Exception):
    """Raised by SimFileSystem at the step chosen for a crash."""


class SimFileSystem:
    """An in-memory file system that forgets unsynced writes at a simulated crash.

    `crash_at_step` makes the N-th mutating operation raise SimulatedCrash before it runs,
    which lets a test crash at every step of an operation in turn.
    """

    def __init__(self, seed: int = 0, crash_at_step: int | None = None) -> None:
        self._rng = random.Random(seed)
        self._files: dict[str, _SimInode] = {}
        self._durable_names: dict[str, _SimInode] = {}
        self._dirs: set[str] = {"/"}
        self.steps = 0
        self.crash_at_step = crash_at_step

    def step(self, what: str) -> None:
        self.steps += 1
        if self.crash_at_step is not None and self.steps == self.crash_at_step:
            raise SimulatedCrash(what)

    def crash(self) -> None:
        """Lose every unsynced byte (tails cut at a random point) and unsynced names."""
        self.crash_at_step = None
        survivors: dict[str, _SimInode] = {}
        for path, inode in self._durable_names.items():
            keep = inode.durable
            pending = len(inode.data) - keep
            if pending > 0:
                keep += self._rng.randint(0, pending)  # a torn write keeps some prefix
            del inode.data[keep:]
            inode.durable = len(inode.data)
            survivors[path] = inode
        self._files = dict(survivors)
        self._durable_names = dict(survivors)

    def open(self, path: str) -> FileHandle:
        inode = self._files.get(path)
        if inode is None:
            self.step(f"create {path}")
            inode = _SimInode()
            self._files[path] = inode
        return SimFile(self, path, inode)

    def read_file(self, path: str) -> bytes:
        inode = self._files.get(path)
        if inode is None:
            raise FileNotFoundError(path)
        return bytes(inode.data)

    def write_file_atomic(self, path: str, data: bytes) -> None:
        self.step(f"write {path}")
        inode = _SimInode()
        inode.data += data
        inode.durable = len(data)
        self._files[path] = inode
        self._durable_names[path] = inode

    def exists(self, path: str) -> bool:
        return path in self._files or path in self._dirs

    def listdir(self, path: str) -> list[str]:
        prefix = path.rstrip("/") + "/"
        names = {p[len(prefix) :].split("/", 1)[0] for p in self._files if p.startswith(prefix)}
        names |= {d[len(prefix) :].split("/", 1)[0] for d in self._dirs if d.startswith(prefix)}
        names.discard("")
        return sorted(names)

    def makedirs(self, path: str) -> None:
        self._dirs.add(path.rstrip("/"))

    def remove(self, path: str) -> None:
        self.step(f"remove {path}")
        self._files.pop(path, None)
        self._durable_names.pop(path, None)

    def rename(self, src: str, dst: str) -> None:
        self.step(f"rename {src}")
        inode = self._files.pop(src)
        self._files[dst] = inode
        if self._durable_names.pop(src, None) is not None:
            self._durable_names[dst] = inode

    def rmtree(self, path: str) -> None:
        prefix = path.rstrip("/") + "/"
        for p in [p for p in self._files if p.startswith(prefix)]:
            self._files.pop(p, None)
            self._durable_names.pop(p, None)
        self._dirs = {d for d in self._dirs if d != path and not d.startswith(prefix)}

    def fsync_dir(self, path: str) -> None:
        self.step(f"fsync dir {path}")
        prefix = path.rstrip("/") + "/"
        for p, inode in self._files.items():
            if p.startswith(prefix) and "/" not in p[len(prefix) :]:
                self._durable_names[p] = inode

    def isdir(self, path: str) -> bool:
        return path.rstrip("/") in self._dirs
