"""The aborted transactions a read_committed fetch is told about: those overlapping
[fetch offset, end of the batches it read), never the whole history after it (issue 13).

Expected answers come from a model of the transactions the test wrote and from the raw
segment bytes (where each batch starts), never from the indexes being tested.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

import pytest

from onceflow.clock import ManualClock
from onceflow.records.batch import scan_batches, validate_produced_batches
from onceflow.records.builder import build_batch
from onceflow.storage.fs import SimFileSystem
from onceflow.storage.indexes import AbortedTxn
from onceflow.storage.indexes.txn import TxnIndex
from onceflow.storage.partition_log import LogConfig, PartitionLog, ReadResult
from onceflow.storage.recovery import open_partition

DIR = "/data/t-0"
LONG, SHORT, OTHER = 7, 8, 9  # producer ids


def open_log(fs: SimFileSystem, clean: bool = False, **overrides: int) -> PartitionLog:
    config = LogConfig(**{"index_interval_bytes": 4096, **overrides})  # type: ignore[arg-type]
    plog, _ = open_partition(fs, DIR, "t", 0, config, ManualClock(1_000_000), 0, clean)
    return plog


@dataclass
class Txn:
    producer_id: int
    first: int
    last: int = -1  # the marker's offset, once ended
    aborted: bool = False


@dataclass
class Writer:
    """Writes transactions the way a broker does (batches, then the coordinator's marker)
    and remembers them: the model."""

    plog: PartitionLog
    sequences: dict[int, int] = field(default_factory=dict)
    open: dict[int, Txn] = field(default_factory=dict)
    ended: list[Txn] = field(default_factory=list)

    def write(self, pid: int, count: int = 1, size: int = 20) -> int:
        seq = self.sequences.get(pid, 0)
        data = build_batch(
            [(b"k", b"v" * size, ()) for _ in range(count)],
            timestamp_ms=1_000_000,
            producer_id=pid,
            producer_epoch=0,
            base_sequence=seq,
            transactional=True,
        )
        self.sequences[pid] = seq + count
        first = self.plog.append_batches(
            data, validate_produced_batches(data, 1 << 20)
        ).first_offset
        self.open.setdefault(pid, Txn(pid, first))
        return first

    def end(self, pid: int, commit: bool) -> None:
        txn = self.open.pop(pid)
        txn.last = self.plog.append_marker(pid, 0, coordinator_epoch=0, commit=commit).first_offset
        txn.aborted = not commit
        self.ended.append(txn)

    def overlapping(self, fetch_offset: int, upper: int) -> list[tuple[int, int]]:
        return [
            (t.producer_id, t.first)
            for t in self.ended
            if t.aborted and t.last >= fetch_offset and t.first < upper
        ]


def read_end(plog: PartitionLog, read: ReadResult) -> int:
    """The first offset after the batches a read returned (one cut in two counts), from
    where the batches start in the segment's bytes."""
    region = read.region
    assert region is not None
    segment = next(s for s in plog.segments if s.log is region.file)
    batches, _ = scan_batches(segment.read_bytes(0, segment.size))
    cut = region.position + region.size
    return max(b.header.next_offset for b in batches if b.position < cut)


def committed_read(plog: PartitionLog, offset: int, max_bytes: int) -> ReadResult:
    return plog.read(offset, max_bytes, plog.last_stable_offset, True)


def pairs(entries: list[AbortedTxn]) -> list[tuple[int, int]]:
    return [(e.producer_id, e.first_offset) for e in entries]


def many_aborted(plog: PartitionLog, count: int = 200) -> Writer:
    """`count` aborted transactions of two producers, interleaved with committed ones."""
    writer = Writer(plog)
    for i in range(count):
        writer.write(SHORT, count=1 + i % 3)
        if i % 4 == 0:
            writer.write(OTHER)
        writer.end(SHORT, commit=False)
        if OTHER in writer.open and i % 4 == 2:
            writer.end(OTHER, commit=i % 8 == 2)
    if OTHER in writer.open:
        writer.end(OTHER, commit=True)
    plog.flush()
    return writer


@pytest.mark.parametrize("segment_bytes", [1 << 20, 3000])
def test_a_fetch_gets_only_the_aborted_transactions_overlapping_what_it_read(
    segment_bytes: int,
) -> None:
    plog = open_log(SimFileSystem(seed=1), segment_bytes=segment_bytes)
    writer = many_aborted(plog)
    assert len([t for t in writer.ended if t.aborted]) > 200
    for offset in range(0, plog.last_stable_offset, 7):
        for max_bytes in (1, 150, 700, 5000, 1 << 20):
            read = committed_read(plog, offset, max_bytes)
            got = plog.aborted_transactions(offset, read)
            assert pairs(got) == writer.overlapping(offset, read_end(plog, read)), (
                offset,
                max_bytes,
            )
    # The start of the log with a small fetch: a handful, not the 200 after it.
    read = committed_read(plog, 0, 500)
    assert 0 < len(plog.aborted_transactions(0, read)) < 10


def test_a_read_cut_inside_a_batch_counts_that_batch() -> None:
    plog = open_log(SimFileSystem(seed=2))
    writer = Writer(plog)
    for _ in range(3):
        writer.write(SHORT, count=5, size=100)
        writer.end(SHORT, commit=False)
    plog.flush()
    whole = committed_read(plog, 0, 1 << 20).region
    assert whole is not None
    sizes = [b.header.size for b in scan_batches(whole.read())[0]]
    # Cut in the middle of the second transaction's data batch (after one data + marker).
    read = committed_read(plog, 0, sizes[0] + sizes[1] + 10)
    assert read.end_offset is None  # max_bytes cut it
    assert pairs(plog.aborted_transactions(0, read)) == [
        (SHORT, writer.ended[0].first),
        (SHORT, writer.ended[1].first),
    ]
    # Exactly at a batch boundary: the second transaction is not read at all.
    read = committed_read(plog, 0, sizes[0] + sizes[1])
    assert pairs(plog.aborted_transactions(0, read)) == [(SHORT, writer.ended[0].first)]


def test_a_transaction_open_across_many_aborts_is_found_from_a_read_at_its_start() -> None:
    """The early stop never misses a long transaction aborted far after the read: every
    entry written while it was open has its first offset as stable offset."""
    plog = open_log(SimFileSystem(seed=3), segment_bytes=2000)
    writer = Writer(plog)
    writer.write(LONG)
    for _ in range(60):
        writer.write(SHORT)
        writer.end(SHORT, commit=False)
    writer.end(LONG, commit=False)
    for _ in range(60):
        writer.write(SHORT)
        writer.end(SHORT, commit=False)
    plog.flush()
    assert len(plog.segments) > 5
    read = committed_read(plog, 0, 300)
    got = pairs(plog.aborted_transactions(0, read))
    assert got == writer.overlapping(0, read_end(plog, read))
    assert (LONG, 0) in got and len(got) < 10
    # A read after the long transaction's last record but before its marker still gets it.
    marker = writer.ended[60].last
    read = committed_read(plog, marker - 2, 300)
    assert (LONG, 0) in pairs(plog.aborted_transactions(marker - 2, read))


class CountingList(list[AbortedTxn]):
    """Counts how many entries a search looks at."""

    looked = 0

    def __getitem__(self, index: Any) -> Any:  # type: ignore[override]
        CountingList.looked += 1
        return super().__getitem__(index)


def test_the_search_bisects_to_the_fetch_offset_and_stops_after_the_read() -> None:
    plog = open_log(SimFileSystem(seed=4))
    writer = many_aborted(plog, count=400)
    index = plog.active.txn_index
    index.entries = CountingList(index.entries)
    middle = writer.ended[len(writer.ended) // 2].first
    read = committed_read(plog, middle, 400)
    CountingList.looked = 0
    got = plog.aborted_transactions(middle, read)
    assert pairs(got) == writer.overlapping(middle, read_end(plog, read))
    # log2(400) to bisect, then the few overlapping entries and the one that stops it.
    assert CountingList.looked <= 9 + len(got) + 2


def test_a_read_past_every_abort_or_with_nothing_read_gets_none() -> None:
    plog = open_log(SimFileSystem(seed=5))
    writer = Writer(plog)
    writer.write(SHORT)
    writer.end(SHORT, commit=False)
    writer.write(SHORT)
    writer.end(SHORT, commit=True)
    plog.flush()
    assert plog.aborted_transactions(2, committed_read(plog, 2, 1)) == []
    assert plog.aborted_transactions(0, committed_read(plog, 0, 1)) != []
    empty = plog.read(plog.last_stable_offset, 100, plog.last_stable_offset, True)
    assert plog.aborted_transactions(plog.last_stable_offset, empty) == []


def test_collect_stops_at_the_first_entry_whose_stable_offset_reaches_the_bound() -> None:
    index = TxnIndex(SimFileSystem(seed=6), "/x.txnindex")
    index.entries = [
        AbortedTxn(1, 0, 5, 2),  # ends before the fetch offset
        AbortedTxn(2, 2, 10, 11),  # overlaps; its stable offset is past the bound: stop
        AbortedTxn(3, 6, 12, 13),  # would overlap, but only with a wrong stable offset
    ]
    out: list[AbortedTxn] = []
    assert index.collect(6, 9, out) is True
    assert out == [index.entries[1]]
    out = []
    assert index.collect(6, 20, out) is False
    assert out == index.entries[1:]


def interleaved(plog: PartitionLog) -> Writer:
    """Aborts landing while another transaction is open: their stable offsets are its
    first offset, not their marker's + 1."""
    writer = Writer(plog)
    writer.write(LONG)
    for _ in range(5):
        writer.write(SHORT)
        writer.end(SHORT, commit=False)
    writer.write(OTHER)
    writer.end(LONG, commit=True)
    writer.write(SHORT)
    writer.end(SHORT, commit=False)
    writer.end(OTHER, commit=False)
    plog.flush()
    return writer


def entries(plog: PartitionLog) -> list[AbortedTxn]:
    return [e for s in plog.segments for e in s.txn_index.entries]


def test_recovery_rebuilds_the_stable_offsets_the_leader_wrote() -> None:
    fs = SimFileSystem(seed=7)
    plog = open_log(fs, segment_bytes=600)
    interleaved(plog)
    written = entries(plog)
    assert written[0].last_stable_offset == 0  # LONG was open
    assert written[-2].last_stable_offset == written[-1].first_offset  # OTHER was open
    plog.close()
    for name in fs.listdir(DIR):
        if name.endswith((".snapshot", ".txnindex")):
            fs.remove(os.path.join(DIR, name))
    recovered = open_log(fs, segment_bytes=600)
    assert entries(recovered) == written


def test_stable_offsets_an_older_recovery_wrote_are_lowered_at_open(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fs = SimFileSystem(seed=8)
    plog = open_log(fs, segment_bytes=600)
    writer = Writer(plog)
    writer.write(LONG)
    for _ in range(30):
        writer.write(SHORT)
        writer.end(SHORT, commit=False)
    writer.end(LONG, commit=False)
    plog.flush()
    for segment in plog.segments:  # what the old rebuild wrote: the marker's offset + 1
        segment.txn_index.rewrite(
            [e._replace(last_stable_offset=e.last_offset + 1) for e in segment.txn_index.entries]
        )
    plog.close()
    with caplog.at_level(logging.WARNING, "onceflow.storage.partition_log"):
        reopened = open_log(fs, clean=True, segment_bytes=600)
    assert "had a stable offset past" in caplog.text
    read = committed_read(reopened, 0, 200)
    assert (LONG, 0) in pairs(reopened.aborted_transactions(0, read))
    lowered = entries(reopened)
    assert all(e.last_stable_offset == 0 for e in lowered[:-1])
    assert lowered[-1].last_stable_offset == lowered[-1].last_offset + 1


def test_a_read_stopped_by_the_lso_gets_no_abort_that_began_after_it() -> None:
    plog = open_log(SimFileSystem(seed=9))
    writer = Writer(plog)
    writer.write(SHORT)
    writer.end(SHORT, commit=False)
    writer.write(LONG)  # open: holds the LSO here
    writer.write(OTHER)
    writer.end(OTHER, commit=False)
    plog.flush()
    read = committed_read(plog, 0, 1 << 20)
    assert read.end_offset == plog.last_stable_offset == writer.open[LONG].first
    assert pairs(plog.aborted_transactions(0, read)) == [(SHORT, 0)]
