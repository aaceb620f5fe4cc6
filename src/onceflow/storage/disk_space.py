"""The free-space guard of a log dir: client writes stop before the disk is full.

Below the threshold, produce requests are refused with a retriable error while the broker's
own writes go on: transaction markers, the transaction log and offset commits, which finish
what is in flight, so no transaction hangs because data filled the disk. The threshold is the
smaller of `onceflow.log.dir.min.free.bytes` and `onceflow.log.dir.min.free.percent` of the
file system, so a big disk does not keep a percentage idle and a small one is not refused
outright by an absolute default.

Free space is read with statvfs, not on every request: the guard counts the bytes written
since the last reading and reads again once they could have eaten half the margin left
above the threshold, or after a second, whichever comes first. Near the threshold that is
every request, far from it almost never.

The ballast (`onceflow.log.dir.ballast.bytes`, Redpanda's idea) is a file of reserved
space in the log dir. When a write finds the disk full anyway (another process filled it),
the guard deletes the ballast at once, so the broker's own writes that finish in-flight work
still find room, and makes a new one once free space is back above the threshold.

States, one log line per change:
    ok    free space at or above the threshold
    low   below it: client writes refused, the broker's own still written
    full  a write failed for lack of space (and was cut back); left once a reading finds
          the threshold met and more space than at the failure (by 1 MiB, or 1 % of a
          small disk), so a disk at its last bytes does not flap between full and ok; or
          after 10 s, for a failure statvfs cannot see (a quota, no inodes left)
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os

from onceflow.clock import Clock
from onceflow.storage.failures import OutOfSpace
from onceflow.storage.fs import DiskUsage, FileSystem

log = logging.getLogger(__name__)

BALLAST_FILE = "onceflow-ballast"
RECHECK_MS = 1000
FULL_EXIT_MARGIN = 1 << 20
FULL_HOLD_MS = 10_000


class DiskState(enum.Enum):
    OK = "ok"
    LOW = "low"
    FULL = "full"


class DiskSpaceGuard:
    def __init__(
        self,
        fs: FileSystem,
        path: str,
        clock: Clock,
        min_free_bytes: int,
        min_free_percent: float,
        ballast_bytes: int = 0,
    ) -> None:
        self._fs = fs
        self._path = path
        self.ballast_bytes = ballast_bytes
        self.ballast_path = os.path.join(path, BALLAST_FILE)
        self._has_ballast: bool | None = None  # unknown until first looked for
        self._clock = clock
        self.min_free_bytes = min_free_bytes
        self.min_free_percent = min_free_percent
        self.state = DiskState.OK
        self.usage = DiskUsage(0, 0)
        self._next_read_ms = 0  # statvfs is read again at this time, or ...
        self._read_after_bytes = 0  # ... once this much was written since the last reading
        self._written = 0  # bytes written since the last reading
        self._free_when_full = 0
        self._full_since_ms = 0

    @property
    def threshold(self) -> int:
        return int(min(self.min_free_bytes, self.usage.total * self.min_free_percent / 100))

    @property
    def estimated_free(self) -> int:
        return max(0, self.usage.free - self._written)

    def note_written(self, nbytes: int) -> None:
        self._written += nbytes

    def note_out_of_space(self) -> None:
        released = self._release_ballast()
        self._read()
        self._free_when_full = self.usage.free
        self._full_since_ms = self._clock.monotonic_ms()
        why = "a write failed: no space left on the device"
        self._set(DiskState.FULL, why + ("; the ballast was released" if released else ""))

    def _release_ballast(self) -> bool:
        if not self._fs.exists(self.ballast_path):
            return False
        try:
            self._fs.remove(self.ballast_path)
        except OSError as exc:
            log.warning("cannot release the ballast %s: %s", self.ballast_path, exc)
            return False
        self._has_ballast = False
        log.warning(
            "released the %d-byte ballast %s: the broker's own writes (markers, transaction "
            "log, offset commits) have room again; free space to resume produce",
            self.ballast_bytes,
            self.ballast_path,
        )
        return True

    def ensure_ballast(self) -> None:
        """Make the ballast if it is missing and the disk can spare it above the threshold."""
        if self.ballast_bytes <= 0 or self._has_ballast:
            return
        if self._has_ballast is None and self._fs.exists(self.ballast_path):
            self._has_ballast = True  # left by an earlier run
            return
        if self.usage.free - self.ballast_bytes < self.threshold:
            return  # not now: it would take the disk below the threshold
        try:
            self._fs.preallocate(self.ballast_path, self.ballast_bytes)
        except OSError as exc:
            log.warning("ballast %s not made: %s", self.ballast_path, exc)
            with contextlib.suppress(OSError):
                self._fs.remove(self.ballast_path)
            return
        self._has_ballast = True
        self._read()

    def refresh(self, force: bool = False) -> DiskState:
        """Read the free space if it is due, and move to the state it implies."""
        now = self._clock.monotonic_ms()
        # The produce path calls this per partition: two comparisons when nothing is due.
        if not force and now < self._next_read_ms and self._written < self._read_after_bytes:
            return self.state
        if not self._read():
            return self.state
        free = self.usage.free
        if self.state is DiskState.FULL:
            margin = min(FULL_EXIT_MARGIN, self.usage.total // 100)
            held = now - self._full_since_ms >= FULL_HOLD_MS
            if free < self._free_when_full + margin and not held:
                return self.state
        if free >= self.threshold:
            self._set(DiskState.OK, "free space is at or above the threshold")
            self.ensure_ballast()
        elif self.state is not DiskState.LOW:
            self._set(DiskState.LOW, "free space is below the threshold")
        return self.state

    def _read(self) -> bool:
        try:
            self.usage = self._fs.disk_usage(self._path)
        except OSError as exc:
            log.warning("cannot read the free space of %s: %s", self._path, exc)
            return False
        self._next_read_ms = self._clock.monotonic_ms() + RECHECK_MS
        self._read_after_bytes = (self.usage.free - self.threshold) // 2
        self._written = 0
        return True

    def admit_client_write(self) -> None:
        """Raise the retriable OutOfSpace unless client data may be written now."""
        if self.refresh() is DiskState.OK:
            return
        raise OutOfSpace(self.describe())

    def describe(self) -> str:
        usage = self.usage
        return (
            f"log dir {self._path} is {self.state.value}: {usage.free} bytes free of "
            f"{usage.total}, below the threshold of {self.threshold} bytes "
            "(onceflow.log.dir.min.free.bytes/percent); produce requests are refused until "
            "space is freed"
        )

    def _set(self, state: DiskState, why: str) -> None:
        if state is self.state:
            return
        previous, self.state = self.state, state
        usage = self.usage
        message = "log dir %s: %s -> %s (%s; %d of %d bytes free, threshold %d)"
        args = (self._path, previous.value, state.value, why, usage.free, usage.total)
        level = logging.INFO if state is DiskState.OK else logging.WARNING
        log.log(level, message, *args, self.threshold)
