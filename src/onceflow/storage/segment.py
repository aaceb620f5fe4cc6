"""LogSegment: one `<base offset>.log` file with its `.index` and `.timeindex`.

A segment only appends whole batches whose offsets were already assigned. It keeps the
sparse indexes current, answers "where is the batch holding offset X" by index lookup plus a
short scan of batch headers, and can rebuild its indexes from the log bytes alone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from onceflow.records.batch import (
    CURRENT_MAGIC,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    BatchHeader,
    parse_header,
    scan_batches,
)
from onceflow.storage.fs import FileHandle, FileSystem
from onceflow.storage.indexes import OffsetIndex, TimeIndex, TxnIndex

# How much to read at once when walking headers forward from an index entry.
_SCAN_WINDOW = 16 * 1024
# How much recovery reads at once while validating a segment.
_RECOVERY_WINDOW = 4 * 1024 * 1024


def segment_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


@dataclass(frozen=True, slots=True)
class BatchLocation:
    position: int
    header: BatchHeader


class LogSegment:
    def __init__(self, fs: FileSystem, directory: str, base_offset: int, index_interval: int):
        self.fs = fs
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval = index_interval
        self.log_path = os.path.join(directory, segment_name(base_offset, ".log"))
        self.log: FileHandle = fs.open(self.log_path)
        self.offset_index = OffsetIndex(
            fs, os.path.join(directory, segment_name(base_offset, ".index")), base_offset
        )
        self.time_index = TimeIndex(
            fs, os.path.join(directory, segment_name(base_offset, ".timeindex")), base_offset
        )
        self.txn_index = TxnIndex(
            fs, os.path.join(directory, segment_name(base_offset, ".txnindex"))
        )
        self.size = self.log.size()
        self.next_offset = base_offset  # one past the last offset held
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self.first_batch_timestamp: int | None = None
        self._bytes_since_index = 0

    # ---- appending -------------------------------------------------------------------

    def append(self, data: bytes | bytearray | memoryview, headers: list[BatchHeader]) -> int:
        """Append batches (offsets already assigned); return the position of the first."""
        start = self.size
        self.log.append(data)
        pos = start
        for header in headers:
            self._account(header, pos)
            pos += header.size
        self.size = pos
        return start

    def _account(self, header: BatchHeader, position: int) -> None:
        """Update indexes and counters for one batch written at `position`."""
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = header.max_timestamp
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = header.last_offset
        if self._bytes_since_index > self.index_interval:
            self.offset_index.append(header.last_offset, position)
            self.time_index.append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_index = 0
        self._bytes_since_index += header.size
        self.next_offset = header.next_offset

    # ---- reading ---------------------------------------------------------------------

    def find_batch(self, offset: int) -> BatchLocation | None:
        """The first batch whose last offset is at or above `offset`, or None."""
        _, pos = self.offset_index.lookup(offset)
        while pos < self.size:
            window = self.log.pread(min(_SCAN_WINDOW, self.size - pos), pos)
            cursor = 0
            while len(window) - cursor >= HEADER_SIZE:
                header = parse_header(window, cursor)
                if header.last_offset >= offset:
                    return BatchLocation(pos + cursor, header)
                cursor += header.size
            if cursor == 0:  # a header straddles the window; read it alone
                header = parse_header(self.log.pread(HEADER_SIZE, pos))
                if header.last_offset >= offset:
                    return BatchLocation(pos, header)
                cursor = header.size
            pos += cursor
        return None

    def position_of(self, offset: int) -> int:
        """The position of the batch starting at or holding `offset`, or the end."""
        location = self.find_batch(offset)
        return self.size if location is None else location.position

    def read_headers(self, start: int = 0, end: int | None = None) -> list[BatchLocation]:
        """Headers of every batch in [start, end), read in windows (one syscall per window,
        not per batch): producer-state replay walks whole segments with it."""
        end = self.size if end is None else end
        out: list[BatchLocation] = []
        pos = start
        while pos < end:
            window = self.log.pread(min(_SCAN_WINDOW, end - pos), pos)
            cursor = 0
            while len(window) - cursor >= HEADER_SIZE:
                header = parse_header(window, cursor)
                out.append(BatchLocation(pos + cursor, header))
                cursor += header.size
            if cursor == 0:  # a header straddles the window
                header = parse_header(self.log.pread(HEADER_SIZE, pos))
                out.append(BatchLocation(pos, header))
                cursor = header.size
            pos += cursor
        return out

    def read_bytes(self, position: int, size: int) -> bytes:
        return self.log.pread(size, position)

    # ---- recovery --------------------------------------------------------------------

    def load_indexes(self) -> bool:
        """Trust the index files after a clean shutdown, if they are sane.

        Sane means: well-formed files, the last offset-index entry names a real batch, the
        batches after it tile the file exactly, and the last time-index entry names a batch
        with that max timestamp. Anything else returns False and the caller rebuilds.
        """
        if not self.offset_index.load(max(self.size, 1)):
            return False
        start = self.offset_index.positions[-1] if self.offset_index.positions else 0
        tail = self._walk(start)
        if tail is None:
            return False
        if self.offset_index.offsets and (
            not tail or tail[0].last_offset != self.offset_index.offsets[-1]
        ):
            return False  # the entry does not point at the batch whose last offset it names
        self.next_offset = tail[-1].next_offset if tail else self.base_offset
        if not self.time_index.load(self.next_offset):
            return False
        # The max timestamp: the last time-index entry covers everything up to its index
        # point, so walk from the batch holding that entry's offset to the end. Taking only
        # the last batch (as before) forgot a larger timestamp between the last index entry
        # and the end, which made offset_for_timestamp and time retention wrong after a
        # clean restart.
        if self.time_index.offsets:
            entry_ts, entry_offset = self.time_index.timestamps[-1], self.time_index.offsets[-1]
            walked = self._walk(self.offset_index.lookup(entry_offset)[1])
            if walked is None:
                return False
            holder = next((h for h in walked if h.last_offset >= entry_offset), None)
            if holder is None or holder.base_offset > entry_offset:
                return False
            if holder.max_timestamp != entry_ts:
                return False  # the entry names a timestamp that batch does not have
            self.max_timestamp, self.offset_of_max_timestamp = entry_ts, entry_offset
        else:
            walked = self._walk(0)
            if walked is None:
                return False
        for header in walked:
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp = header.max_timestamp
                self.offset_of_max_timestamp = header.last_offset
        if self.size:
            self.first_batch_timestamp = parse_header(self.log.pread(HEADER_SIZE, 0)).max_timestamp
        self._bytes_since_index = self.size - start
        return True

    def _walk(self, start: int) -> list[BatchHeader] | None:
        """Headers of the batches from `start` to the end, or None if they do not tile it."""
        out: list[BatchHeader] = []
        pos = start
        while pos < self.size:
            raw = self.log.pread(HEADER_SIZE, pos)
            if len(raw) < HEADER_SIZE or raw[MAGIC_OFFSET] != CURRENT_MAGIC:
                return None
            header = parse_header(raw)
            if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + header.size > self.size:
                return None
            out.append(header)
            pos += header.size
        return out

    def recover(self) -> tuple[list[BatchLocation], int]:
        """Validate every batch, truncate a torn or corrupt tail, rebuild both indexes.

        Returns the valid batches and the number of bytes truncated.
        """
        scanned = self._scan_valid()
        valid_end = scanned[-1].position + scanned[-1].header.size if scanned else 0
        truncated = self.size - valid_end
        if truncated:
            self.log.truncate(valid_end)
            self.size = valid_end
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = self.base_offset
        self.first_batch_timestamp = None
        self._bytes_since_index = 0
        # Rebuilt in memory and stored once, and only if the file differs: after a crash
        # every partition recovers its active segment, and rewriting each unchanged index
        # cost two fsyncs apiece at startup.
        self.offset_index.start_rebuild()
        self.time_index.start_rebuild()
        for batch in scanned:
            self._account(batch.header, batch.position)
        self.offset_index.finish_rebuild()
        self.time_index.finish_rebuild()
        return scanned, truncated

    def _scan_valid(self) -> list[BatchLocation]:
        """Walk the file in windows, checking each batch's length and CRC."""
        out: list[BatchLocation] = []
        pos = 0
        while pos < self.size:
            window = self.log.pread(min(_RECOVERY_WINDOW, self.size - pos), pos)
            batches, end = scan_batches(window)
            if end == 0 and len(window) >= HEADER_SIZE:
                # The first batch is larger than the window: read exactly that batch.
                size = parse_header(window).size
                if 0 < size <= self.size - pos and size > len(window):
                    window = self.log.pread(size, pos)
                    batches, end = scan_batches(window)
            if end == 0:
                break
            out.extend(BatchLocation(pos + b.position, b.header) for b in batches)
            pos += end
            if end < len(window) and len(window) - end >= HEADER_SIZE:
                size = parse_header(window, end).size
                if end + size <= len(window):
                    break  # the batch fit in the window, so it is corrupt: stop here
        return out

    def truncate_to(self, offset: int) -> None:
        """Drop every batch at or above `offset` (which must be a batch boundary)."""
        position = self.position_of(offset)
        if position >= self.size:
            return
        self.log.truncate(position)
        self.size = position
        self.recover()

    # ---- lifecycle -------------------------------------------------------------------

    def fsync_data(self) -> None:
        """Sync the record bytes only: what a group commit needs. The indexes of a segment
        at or past the recovery point are rebuilt by recovery after a crash, so syncing
        them on every commit (as `fsync` does) would triple the fsyncs for nothing."""
        self.log.fsync()

    def fsync(self) -> None:
        """Sync everything: before the recovery point moves past this segment (a roll) and
        at clean shutdown, when the next start trusts the index files."""
        self.log.fsync()
        self.offset_index.fsync()
        self.time_index.fsync()
        self.txn_index.fsync()

    def close(self) -> None:
        self.log.close()
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()

    def delete(self, close: bool = True) -> None:
        """Remove the files. With close=False the descriptors stay open, so a response
        still being sent from this segment reads the unlinked file to its end."""
        if close:
            self.close()
        paths = (self.log_path, self.offset_index.path, self.time_index.path, self.txn_index.path)
        for path in paths:
            self.fs.remove(path)
