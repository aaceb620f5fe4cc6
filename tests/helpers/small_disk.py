"""A real, small file system for disk-full tests: a tmpfs mounted at a fresh directory.

The tests run as root here. Where mounting is impossible (no root, no tmpfs) the test fails
with a message that starts "environment:", never skips: a disk-full guarantee that was not
checked must not look like one that held.

Mount it exactly at the broker's data dir: BrokerProcess writes its log next to the data dir
(in the parent), which then stays on the big disk and never fills up.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

FILLER = "filler"
CHUNK = 64 * 1024


class SmallDisk:
    def __init__(self, path: Path, size_mib: int) -> None:
        self.path = path
        self.size_mib = size_mib

    @property
    def free(self) -> int:
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def grow(self, size_mib: int) -> None:
        """Make the file system bigger while everything on it keeps running."""
        _run("mount", "-o", f"remount,size={size_mib}m", str(self.path))
        self.size_mib = size_mib

    def fill(self, leave: int = 0, name: str = FILLER) -> Path:
        """Another process's data: a file that takes free space down to `leave` bytes
        (0: until the file system refuses a write)."""
        filler = self.path / name
        with open(filler, "ab") as f:
            while True:
                room = self.free - leave
                if room <= 0:
                    break
                try:
                    f.write(b"\0" * min(CHUNK, room))
                    f.flush()
                except OSError:
                    break
            with contextlib.suppress(OSError):
                os.fsync(f.fileno())
        return filler

    def unfill(self, name: str = FILLER) -> None:
        (self.path / name).unlink(missing_ok=True)


def _run(*cmd: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.fail(
            f"environment: `{' '.join(cmd)}` failed ({done.stderr.strip() or done.returncode}); "
            "the disk-full tests need root and tmpfs (run them as root on Linux)"
        )


@contextlib.contextmanager
def small_disk(path: Path, size_mib: int) -> Iterator[SmallDisk]:
    """Mount a tmpfs of `size_mib` MiB at `path`; unmount it afterwards."""
    path.mkdir(parents=True, exist_ok=True)
    _run("mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(path))
    try:
        yield SmallDisk(path, size_mib)
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)
