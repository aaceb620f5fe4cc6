"""The FileSystem seam: every storage write goes through it.

`RealFileSystem` is the os module. `SimFileSystem` keeps files in memory and, at a simulated
crash, drops what was never fsynced (TigerBeetle-style): unsynced tails are cut at a seeded
random point, and files whose directory entry was never synced disappear. Recovery code is
tested against it at every step, and it injects the faults a real disk has: a write that
fails part-way (ENOSPC, EIO), a full file system, a failed fsync.

Appends are all-or-nothing: a write that fails part-way is cut back to where it started
before the error is raised, so no later write can follow a torn one. When even that cut
fails, `TornWrite` says the file holds a torn tail and must not be written again.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

# Errors after which the disk is only short of space: the failed write was cut back, and
# writing again once space is free is safe. Any other error is a failing disk.
SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


class TornWrite(OSError):
    """A write failed part-way and cutting the partial bytes off failed too: the file ends
    in a torn write, so nothing may be appended to it any more."""


def is_out_of_space(exc: BaseException) -> bool:
    """True for a write refused for lack of space and cleanly cut back (retry later)."""
    return isinstance(exc, OSError) and not isinstance(exc, TornWrite) and exc.errno in SPACE_ERRNOS


class DiskUsage(NamedTuple):
    total: int  # bytes of the file system
    free: int  # bytes the broker may still write (what statvfs grants unprivileged users)


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
    def disk_usage(self, path: str) -> DiskUsage:
        """Size and free space of the file system holding `path`."""
        ...

    def preallocate(self, path: str, size: int) -> None:
        """Create a file holding `size` bytes of disk (a ballast), durably, or nothing."""
        ...


def append_whole(
    write: Callable[[memoryview], int], cut: Callable[[int], None], size: int, data: object
) -> int:
    """Write all of `data` at the end of a file of `size` bytes, or none of it.

    `write` may write less than asked (a full disk does) and raises on an error; on an error
    after a partial write, `cut` truncates the file back to `size`. Returns the bytes written.
    """
    view = memoryview(data)  # type: ignore[arg-type]
    written = 0
    try:
        while written < len(view):
            written += write(view[written:])
    except OSError as exc:
        if written:
            try:
                cut(size)
            except OSError as undo:
                raise TornWrite(
                    exc.errno, f"{exc.strerror}; cutting the partial write back failed: {undo}"
                ) from exc
        raise
    return written


class RealFile:
    __slots__ = ("_fd", "_size", "path")

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        self._size = os.fstat(self._fd).st_size

    def append(self, data: bytes | bytearray | memoryview) -> None:
        fd = self._fd
        self._size += append_whole(
            lambda view: os.write(fd, view), lambda size: os.ftruncate(fd, size), self._size, data
        )

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
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except OSError:
            # The old file is untouched; a partial temporary file would only take space.
            with contextlib.suppress(OSError):
                os.remove(tmp)
            raise
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

    def disk_usage(self, path: str) -> DiskUsage:
        st = os.statvfs(path)
        return DiskUsage(st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize)

    def preallocate(self, path: str, size: int) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            os.posix_fallocate(fd, 0, size)  # blocks allocated, nothing written
            os.fsync(fd)
        except OSError:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.remove(path)
            raise
        os.close(fd)
        self.fsync_dir(os.path.dirname(path) or ".")


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
    __slots__ = ("data", "durable", "lost")

    def __init__(self) -> None:
        self.data = bytearray()
        self.durable = 0  # bytes of `data` known to be on disk
        # Ranges whose fsync failed: Linux marks such pages clean without writing them, so
        # a later fsync "succeeds" and a crash still finds zeros there (PostgreSQL, 2018).
        self.lost: list[tuple[int, int]] = []


@dataclass
class Fault:
    """One injected failure: the `nth` matching operation from now on fails with the errno `error`.

    `op` is "write" (an append or a whole-file write), "fsync" (files and directories) or
    "truncate"; `path` limits it to paths containing that text. A failing append first
    writes `keep` of its bytes, as a real disk that fills up mid-write does.
    """

    op: str
    nth: int = 1
    error: int = errno.EIO
    keep: float = 0.5
    path: str = ""
    repeat: bool = False  # every matching operation from the nth on fails
    seen: int = 0

    def hits(self, op: str, path: str) -> bool:
        if op != self.op or self.path not in path:
            return False
        self.seen += 1
        return self.seen == self.nth or (self.repeat and self.seen > self.nth)


class SimFile:
    def __init__(self, fs: SimFileSystem, path: str, inode: _SimInode) -> None:
        self._fs = fs
        self.path = path
        self._inode = inode
        self._closed = False

    def append(self, data: bytes | bytearray | memoryview) -> None:
        self._fs.step(f"append {self.path}")
        failure = self._fs.write_failure(self.path, len(data))  # (bytes that fit, errno)
        inode = self._inode

        def write(view: memoryview) -> int:
            nonlocal failure
            if failure is None:
                inode.data += view
                return len(view)
            room, error = failure
            if room > 0:  # a short write first, the error on the next call (as write(2))
                inode.data += view[:room]
                failure = (0, error)
                return room
            raise OSError(error, os.strerror(error), self.path)

        append_whole(write, self.truncate, len(inode.data), data)

    def pread(self, size: int, position: int) -> bytes:
        return bytes(self._inode.data[position : position + size])

    def size(self) -> int:
        return len(self._inode.data)

    def fsync(self) -> None:
        self._fs.step(f"fsync {self.path}")
        inode = self._inode
        error = self._fs.fault_errno("fsync", self.path)
        if error is not None:
            if len(inode.data) > inode.durable:
                inode.lost.append((inode.durable, len(inode.data)))
            raise OSError(error, os.strerror(error), self.path)
        inode.durable = len(inode.data)

    def truncate(self, size: int) -> None:
        self._fs.step(f"truncate {self.path}")
        error = self._fs.fault_errno("truncate", self.path)
        if error is not None:
            raise OSError(error, os.strerror(error), self.path)
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

    def __init__(
        self, seed: int = 0, crash_at_step: int | None = None, capacity: int | None = None
    ) -> None:
        self.capacity = capacity  # bytes all files together may hold; None: unlimited
        self.faults: list[Fault] = []
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

    def inject(self, fault: Fault) -> Fault:
        self.faults.append(fault)
        return fault

    def _hit(self, op: str, path: str) -> Fault | None:
        for fault in self.faults:
            if fault.hits(op, path):
                return fault
        return None

    def fault_errno(self, op: str, path: str) -> int | None:
        """The errno an operation fails with, if an injected fault hits it."""
        fault = self._hit(op, path)
        return None if fault is None else fault.error

    def used(self) -> int:
        return sum(len(inode.data) for inode in {id(i): i for i in self._files.values()}.values())

    def write_failure(self, path: str, size: int) -> tuple[int, int] | None:
        """For a write of `size` bytes: (bytes written before the error, errno), or None."""
        fault = self._hit("write", path)
        if fault is not None:
            return min(size, int(size * fault.keep)), fault.error
        if self.capacity is not None and self.used() + size > self.capacity:
            return max(0, self.capacity - self.used()), errno.ENOSPC
        return None

    def disk_usage(self, path: str) -> DiskUsage:
        total = self.capacity if self.capacity is not None else 1 << 40
        return DiskUsage(total, max(0, total - self.used()))

    def preallocate(self, path: str, size: int) -> None:
        self.write_file_atomic(path, bytes(size))

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
            for lo, hi in inode.lost:  # written, "synced" later, but never on the disk
                if lo < len(inode.data):
                    inode.data[lo : min(hi, len(inode.data))] = bytes(min(hi, len(inode.data)) - lo)
            inode.lost = []
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
        # A whole-file write fails before the rename: the old content stays.
        failure = self.write_failure(path + ".tmp", len(data))
        if failure is None and (error := self.fault_errno("fsync", path + ".tmp")) is not None:
            failure = (0, error)
        if failure is not None:
            raise OSError(failure[1], os.strerror(failure[1]), path + ".tmp")
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
        error = self.fault_errno("fsync", path.rstrip("/") + "/")
        if error is not None:
            raise OSError(error, os.strerror(error), path)
        prefix = path.rstrip("/") + "/"
        for p, inode in self._files.items():
            if p.startswith(prefix) and "/" not in p[len(prefix) :]:
                self._durable_names[p] = inode

    def isdir(self, path: str) -> bool:
        return path.rstrip("/") in self._dirs
