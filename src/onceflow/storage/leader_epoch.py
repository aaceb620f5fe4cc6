"""The leader epochs of one partition: where in the log each leader's term began.

Every batch a leader appends carries its leader epoch (`partitionLeaderEpoch`), and the
cache keeps one (epoch, start offset) entry per epoch, the offset of its first batch. A
follower that rejoins asks its leader where its own latest epoch ended there
(OffsetsForLeaderEpoch, KIP-279) and truncates whatever it has beyond that point, instead of
trusting its high watermark (KIP-101: the high watermark can lose acknowledged data or let
replicas diverge).

The entries are persisted in `<partition dir>/leader-epoch-checkpoint`, Kafka's checkpoint
format: a version line (`0`), a line with the number of entries, then one `epoch
start_offset` line per entry, oldest first. Like the indexes, the file is derived data: the
epochs are in the batch headers, so a missing, torn or corrupt file, or one that does not
match the log, is rebuilt from them when the partition is opened.

The file is written whole (atomically) at every change, before the batches that start a new
epoch are written, so after a crash it may claim an epoch whose data was lost, never lack
one whose data survived; opening the log drops entries at or past the log end. (A new log's
first entry waits for the next change, roll or close: until then there is no file, which
makes a restart rebuild the entries, so nothing is lost by waiting.) When the file cannot
be written it is removed (and rebuilt at the next start): a stale file could look valid.
Only if even that fails is the owner told, and the partition goes offline.
"""

from __future__ import annotations

import bisect
import logging
import os
from collections.abc import Callable, Iterable
from typing import NamedTuple

from onceflow.records.batch import BatchHeader
from onceflow.storage.fs import FileSystem

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "leader-epoch-checkpoint"
CHECKPOINT_VERSION = 0
# OffsetsForLeaderEpoch's answer when an epoch is unknown (Kafka's UNDEFINED_EPOCH and
# UNDEFINED_EPOCH_OFFSET); also the partitionLeaderEpoch of batches written without one.
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int  # the first offset written in this epoch


def encode_checkpoint(entries: Iterable[EpochEntry]) -> bytes:
    lines = [f"{e.epoch} {e.start_offset}" for e in entries]
    return "".join(
        f"{line}\n" for line in [str(CHECKPOINT_VERSION), str(len(lines)), *lines]
    ).encode()


def decode_checkpoint(data: bytes) -> list[EpochEntry]:
    """Parse a whole checkpoint; raise ValueError for anything else (torn, corrupt, unknown
    version, entries not strictly increasing in both epoch and offset)."""
    text = data.decode("ascii")  # UnicodeDecodeError is a ValueError
    if not text.endswith("\n"):
        raise ValueError("no final newline (torn)")
    lines = text[:-1].split("\n")
    if len(lines) < 2 or lines[0] != str(CHECKPOINT_VERSION):
        raise ValueError(f"unknown version {lines[0]!r}")
    if not lines[1].isdigit() or int(lines[1]) != len(lines) - 2:
        raise ValueError(f"count {lines[1]!r} does not match {len(lines) - 2} entries")
    entries: list[EpochEntry] = []
    for line in lines[2:]:
        epoch, sep, offset = line.partition(" ")
        if not sep or not epoch.isdigit() or not offset.isdigit():
            raise ValueError(f"malformed entry {line!r}")
        entry = EpochEntry(int(epoch), int(offset))
        if entries and (
            entry.epoch <= entries[-1].epoch or entry.start_offset <= entries[-1].start_offset
        ):
            raise ValueError(f"entry {line!r} does not follow {entries[-1]}")
        entries.append(entry)
    return entries


class LeaderEpochCache:
    """Kafka's LeaderEpochFileCache: (epoch, start offset) entries, both strictly increasing.

    Every change is written to the checkpoint before the method returns, except the first
    entry of a cache with no file (see `_changed`). `on_failure` is called (instead of
    raising) when the file could neither be written nor removed; the partition log sets it
    to take itself offline.
    """

    def __init__(self, fs: FileSystem, directory: str) -> None:
        self.fs = fs
        self.path = os.path.join(directory, CHECKPOINT_FILE)
        self._entries: list[EpochEntry] = []
        self.on_failure: Callable[[OSError], None] | None = None
        self._failing = False  # one warning per run of failed writes
        self._stored_empty = True  # the file is absent or holds no entries
        self._deferred = False  # memory holds entries the (empty or absent) file lacks

    # ---- reading ---------------------------------------------------------------------

    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    @property
    def latest_epoch(self) -> int | None:
        """The epoch of the newest entry, or None (no epochs: empty log or old data)."""
        return self._entries[-1].epoch if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    def start_of_latest(self) -> int:
        """Where the latest epoch began (Kafka's leaderEpochStartOffset), or -1 if none."""
        return self._entries[-1].start_offset if self._entries else UNDEFINED_EPOCH_OFFSET

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch for one partition: (epoch, end offset), Kafka's semantics.

        - UNDEFINED_EPOCH asked, or an epoch above every entry (also: no entries):
          (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET).
        - The latest epoch: (it, the log end offset), since it is still being written.
        - Otherwise the largest epoch at or below the one asked, ending where the next
          higher epoch starts. When the request is below the first entry (that data was
          deleted), the requested epoch itself comes back with the first entry's start
          offset, so the follower truncates no further than the leader's oldest data
          (Kafka's code does this; its older javadoc still says UNDEFINED).
        """
        if requested_epoch == UNDEFINED_EPOCH:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        entries = self._entries
        if entries and entries[-1].epoch == requested_epoch:
            return requested_epoch, log_end_offset
        higher = bisect.bisect_right([e.epoch for e in entries], requested_epoch)
        if higher == len(entries):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested_epoch, entries[0].start_offset
        return entries[higher - 1].epoch, entries[higher].start_offset

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch the batch at `offset` was written in, or None if before every entry."""
        starts = [e.start_offset for e in self._entries]
        index = bisect.bisect_right(starts, offset)
        return self._entries[index - 1].epoch if index else None

    # ---- changes ---------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset`; False if nothing changed.

        Kafka's semantics: the same epoch again at a later offset changes nothing (the
        epoch started earlier). Anything else is appended after removing the entries it
        contradicts, those of an epoch at or above it or starting at or after it: the new
        entry is the truth (a leader's log its followers copy), the removed ones were never
        committed. Negative epochs or offsets are the caller's bug (ValueError).
        """
        was_empty = not self._entries
        if not self._assign(epoch, start_offset):
            return False
        self._changed(was_empty)
        return True

    def assign_all(self, pairs: Iterable[tuple[int, int]]) -> bool:
        """`assign` for several (epoch, start offset) pairs in order, with one file write."""
        was_empty = not self._entries
        changed = False
        for epoch, start_offset in pairs:
            changed = self._assign(epoch, start_offset) or changed
        if changed:
            self._changed(was_empty)
        return changed

    def _assign(self, epoch: int, start_offset: int) -> bool:
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        entries = self._entries
        if entries and entries[-1].epoch == epoch and start_offset >= entries[-1].start_offset:
            return False
        removed: list[EpochEntry] = []
        while entries and (entries[-1].epoch >= epoch or entries[-1].start_offset >= start_offset):
            removed.append(entries.pop())
        if len(removed) > 1 or (removed and removed[0].start_offset != start_offset):
            # Replacing one entry at the same offset is normal (a leader that wrote nothing
            # in its epoch before the next one); anything more means divergent history.
            log.warning(
                "%s: epoch entry (%d, %d) replaces conflicting entries %s",
                self.path,
                epoch,
                start_offset,
                [tuple(e) for e in reversed(removed)],
            )
        entries.append(EpochEntry(epoch, start_offset))
        return True

    def truncate_from_end(self, end_offset: int) -> bool:
        """Remove the entries starting at or after `end_offset` (the log was cut there)."""
        if end_offset < 0 or not _cut_end(self._entries, end_offset):
            return False
        self._persist()
        return True

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log now starts at `start_offset`: drop the entries of epochs that ended at or
        before it, and move the start of the epoch holding it up to it (an entry starting
        exactly there is kept as it is)."""
        if not _cut_start(self._entries, start_offset):
            return False
        self._persist()
        return True

    def clear(self) -> None:
        """Forget every entry (the log was emptied and starts afresh); the file goes."""
        self._entries = []
        self._deferred = False
        try:
            self.fs.remove(self.path)
        except OSError as exc:
            self._fail(exc)
            return
        self._stored_empty = True

    def restore(self, entries: list[EpochEntry]) -> None:
        """Put back entries saved before a change whose append then failed."""
        if entries != self._entries:
            self._entries = list(entries)
            self._changed(not entries)

    def flush_deferred(self) -> None:
        """Write a first entry whose write was deferred (see `_changed`): at a roll and at
        close, so a restart seldom needs to walk the log."""
        if self._deferred:
            self._persist()

    # ---- the file --------------------------------------------------------------------

    def load(
        self,
        log_start_offset: int,
        log_end_offset: int,
        last_batch_epoch: int | None,
        headers: Callable[[], Iterable[BatchHeader]],
    ) -> bool:
        """Read the checkpoint, or rebuild the entries from the log; True when rebuilt.

        The file is trusted after cutting it to the log (entries at or past the log end
        are dropped, the first is moved up to the log start) if the newest entry is the
        epoch of the log's last batch (`last_batch_epoch`; None for an empty log). Anything
        else (no file, a torn or corrupt one, one that lacks the last epoch) is rebuilt by
        walking every batch header: an entry wherever the epoch rises. The result is
        written back only if it differs from the file.
        """
        raw: bytes | None = None
        entries: list[EpochEntry] | None = None
        reason = "missing"
        if self.fs.exists(self.path):
            try:
                raw = self.fs.read_file(self.path)
                entries = decode_checkpoint(raw)
            except (OSError, ValueError) as exc:
                reason = f"unreadable ({exc})"
        if entries is not None:
            self._entries = entries
            _cut_end(self._entries, log_end_offset)
            _cut_start(self._entries, log_start_offset)
            if (
                last_batch_epoch is not None
                and last_batch_epoch >= 0
                and self.latest_epoch != last_batch_epoch
            ):
                reason = (
                    f"stale (its latest epoch is {self.latest_epoch}, the log's last batch "
                    f"has {last_batch_epoch})"
                )
                entries = None
        rebuilt = entries is None
        if rebuilt:
            self._entries = []
            latest = UNDEFINED_EPOCH
            for header in headers():
                epoch = header.partition_leader_epoch
                if epoch > latest:
                    self._entries.append(EpochEntry(epoch, header.base_offset))
                    latest = epoch
            _cut_end(self._entries, log_end_offset)
            _cut_start(self._entries, log_start_offset)
            if raw is not None or self._entries:
                log.info(
                    "%s is %s: rebuilt from the log (%d entries)",
                    self.path,
                    reason,
                    len(self._entries),
                )
        if encode_checkpoint(self._entries) != raw and (raw is not None or self._entries):
            # Should even the removal fail, the old file stays: the next start reads it and
            # comes to the same conclusion as this one.
            self._store()
        else:
            self._stored_empty = not self._entries
        return rebuilt

    def _changed(self, was_empty: bool) -> None:
        """Persist a change, except the first entry of a cache whose file holds none: that
        file already makes the next start rebuild the entries from the log, which is as
        right as writing them. So a new partition's first append costs no extra file (and
        fsync); the entry is written at the next change, roll or close, or by the next
        start. Every later change is written before the call returns, as Kafka does."""
        if was_empty and self._stored_empty:
            self._deferred = bool(self._entries)
        else:
            self._persist()

    def _persist(self) -> None:
        failure = self._store()
        if failure is not None:
            self._fail(failure)

    def _fail(self, exc: OSError) -> None:
        if self.on_failure is None:
            raise exc
        self.on_failure(exc)

    def _store(self) -> OSError | None:
        """Write the entries whole, or else remove the file so the next start rebuilds it
        (a stale file could look valid); return the error if even the removal failed."""
        try:
            self.fs.write_file_atomic(self.path, encode_checkpoint(self._entries))
        except OSError as exc:
            if not self._failing:
                log.warning(
                    "%s not written (%s): removed, it is rebuilt from the log at the next start",
                    self.path,
                    exc,
                )
            self._failing = True
            try:
                self.fs.remove(self.path)
            except OSError as undo:
                return undo
            self._stored_empty = True
            self._deferred = bool(self._entries)  # tried again at the next roll or close
            return None
        if self._failing:
            log.info("%s written again", self.path)
        self._failing = False
        self._stored_empty = not self._entries
        self._deferred = False
        return None


def _cut_end(entries: list[EpochEntry], end_offset: int) -> bool:
    """Drop the entries starting at or after `end_offset`, in place; True if any were."""
    cut = False
    while entries and entries[-1].start_offset >= end_offset:
        entries.pop()
        cut = True
    return cut


def _cut_start(entries: list[EpochEntry], start_offset: int) -> bool:
    """Make the entries begin at `start_offset`, in place (Kafka's truncateFromStart); True
    if they changed."""
    covered = bisect.bisect_right([e.start_offset for e in entries], start_offset)
    if covered == 0 or (covered == 1 and entries[0].start_offset == start_offset):
        return False
    entries[:covered] = [EpochEntry(entries[covered - 1].epoch, start_offset)]
    return True
