"""The aborted transactions a read_committed fetch returns, and the `.txnindex` stable
offsets that let the search for them stop early.

A fetch returns the transactions overlapping [fetch offset, end of the batches it read),
as Kafka's LocalLog.addAbortedTransactions does: never the whole history after the fetch
position. The search starts at the segment read from (an entry sits in its marker's
segment, so earlier ones end before the fetch offset), bisects to the first entry ending at
or after the fetch offset, and stops at the first entry whose last stable offset reaches
the end of the read (indexes/txn.py says why nothing later can overlap).

The end of the read is the read's limit (the LSO, the high watermark or the segment's end)
when it stopped there. When max_bytes cut it, it is found by a short walk of batch headers
from the offset-index entry before the cut; Kafka takes that entry's offset instead, which
may lie an index interval further and return a few more transactions.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence

from onceflow.storage.indexes import AbortedTxn
from onceflow.storage.producer_state import CompletedTxn
from onceflow.storage.segment import LogSegment

_NEVER = 1 << 63  # the end of a transaction still open


def overlapping(
    segments: Sequence[LogSegment], fetch_offset: int, read_end: Callable[[], int]
) -> list[AbortedTxn]:
    """Entries of the aborted transactions overlapping [fetch_offset, read_end()), from
    `segments` (the one read from and every later one). `read_end` is called only when
    some entry ends at or after the fetch offset."""
    out: list[AbortedTxn] = []
    upper: int | None = None
    for segment in segments:
        entries = segment.txn_index.entries
        if not entries or entries[-1].last_offset < fetch_offset:
            continue
        if upper is None:
            upper = read_end()
        if segment.txn_index.collect(fetch_offset, upper, out):
            break
    return out


def end_offset(segment: LogSegment, position: int, end: int) -> int:
    """The first offset after the batches in [position, end) of `segment`, `position`
    being a batch's start; a batch cut by `end` counts as read (clients drop its part)."""
    index = segment.offset_index
    slot = bisect_left(index.positions, end)
    start = max(position, index.positions[slot - 1]) if slot else position
    return segment.read_headers(start, end)[-1].header.next_offset


def index_entries(completed: Sequence[CompletedTxn], still_open: Iterable[int]) -> list[AbortedTxn]:
    """`.txnindex` entries of the ABORTs among `completed` (replayed markers, in log order),
    with the stable offsets the leader wrote: the first offset of the oldest other
    transaction open across the marker, else just past it. `still_open` are the first
    offsets of the transactions open after the last marker."""
    spans = sorted(
        [(c.first_offset, c.last_offset) for c in completed]
        + [(first, _NEVER) for first in still_open]
    )
    started: list[tuple[int, int]] = []  # a heap by first offset; ended ones leave lazily
    out: list[AbortedTxn] = []
    i = 0
    for txn in completed:
        marker = txn.last_offset
        while i < len(spans) and spans[i][0] < marker:
            heapq.heappush(started, spans[i])
            i += 1
        while started and started[0][1] <= marker:  # ended before, or by, this marker
            heapq.heappop(started)
        if txn.aborted:
            stable = started[0][0] if started else marker + 1
            out.append(AbortedTxn(txn.producer_id, txn.first_offset, marker, stable))
    return out


def clamp_stable_offsets(segments: Sequence[LogSegment]) -> int:
    """Lower every stable offset that passes the first offset of a later entry (or its own
    marker's next offset), rewriting those indexes; return how many were lowered. Entries
    an older recovery rebuilt (the marker's offset + 1, whatever was open) may do so, and
    the early stop would then miss a transaction."""
    bound = _NEVER
    lowered = 0
    for segment in reversed(segments):
        entries = list(segment.txn_index.entries)
        changed = False
        for i in range(len(entries) - 1, -1, -1):
            entry = entries[i]
            limit = min(bound, entry.last_offset + 1)
            if entry.last_stable_offset > limit:
                entries[i] = entry._replace(last_stable_offset=limit)
                changed = True
                lowered += 1
            bound = min(bound, entry.first_offset)
        if changed:
            segment.txn_index.rewrite(entries)
    return lowered
