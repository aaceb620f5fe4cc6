"""One share-partition's in-flight records (Kafka's SharePartition), sans-IO.

The share-partition start offset (SPSO) is the first offset not yet in a terminal state;
the end offset (SPEO + 1, `end_offset` here) the first offset never fetched. Between them
the records are kept as runs: contiguous offsets with one state, delivery count, holder and
lock deadline. A fetch acquires whole log batches as one run (Kafka's batch-optimized mode),
so the work per fetch is per batch, never per record; an acknowledgement of part of a run
splits it at the edges only. Time is given (`now_ms`), never read.

Records of aborted transactions and control batches are archived as they are first met, so
they are never delivered (read_committed); records above the last stable offset are never
read, so an open transaction's records wait.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

from onceflow.coordinator.share.runs import (
    ACQUIRE_BATCH_OPTIMIZED,
    ACQUIRE_RECORD_LIMIT,
    PENDING_TARGETS,
    TYPES,
    AcquiredRange,
    FetchedBatch,
    Run,
    ShareLimits,
    StateBatch,
    coalesce,
    type_runs,
)
from onceflow.coordinator.share.state import AcknowledgeType, RecordState, check
from onceflow.errors import ErrorCode

__all__ = [
    "ACQUIRE_BATCH_OPTIMIZED",
    "ACQUIRE_RECORD_LIMIT",
    "PENDING_TARGETS",
    "AcquiredRange",
    "FetchedBatch",
    "Run",
    "ShareLimits",
    "SharePartition",
    "StateBatch",
    "type_runs",
]


class SharePartition:
    def __init__(self, start_offset: int, limits: ShareLimits) -> None:
        self.start_offset = start_offset
        self.end_offset = start_offset
        self.limits = limits
        self.runs: list[Run] = []
        self.acquired_count = 0  # records in state Acquired
        self.redelivered_total = 0  # acquisitions past the first, for metrics

    # -- queries

    def next_fetch_offset(self) -> int:
        """Where the next fetch reads: the first Available in-flight record, else the end."""
        for run in self.runs:
            if run.state is RecordState.AVAILABLE:
                return run.first
        return self.end_offset

    def has_available(self) -> bool:
        return any(r.state is RecordState.AVAILABLE for r in self.runs)

    def next_deadline(self) -> int | None:
        deadlines = [r.deadline_ms for r in self.runs if r.state is RecordState.ACQUIRED]
        return min(deadlines) if deadlines else None

    def state_batches(self) -> list[StateBatch]:
        """The durable view: an Acquired run is written as Available (its lock dies with
        the broker) with its delivery count, so a crash redelivers it, never loses it."""
        out = []
        for r in self.runs:
            state = RecordState.AVAILABLE if r.state is RecordState.ACQUIRED else r.state
            out.append(StateBatch(r.first, r.last, state, r.delivery_count))
        return out

    def restore(self, start_offset: int, batches: Iterable[StateBatch]) -> None:
        self.start_offset = start_offset
        self.runs = [
            Run(b.first, b.last, RecordState(b.state), b.delivery_count)
            for b in batches
            if b.last >= start_offset
        ]
        if self.runs and self.runs[0].first < start_offset:
            self.runs[0].first = start_offset
        self.end_offset = max([start_offset] + [r.last + 1 for r in self.runs])
        self.acquired_count = 0
        self._advance_start()

    # -- acquiring

    def acquire(
        self,
        member: str,
        batches: Sequence[FetchedBatch],
        max_records: int,
        now_ms: int,
        mode: int = ACQUIRE_BATCH_OPTIMIZED,
    ) -> list[AcquiredRange]:
        """Acquire for `member` what the fetched batches hold: Available in-flight records
        again, and offsets past the end for the first time. Batch-optimized mode stops after
        the batch that reaches `max_records`; record-limit mode stops at it exactly."""
        out: list[AcquiredRange] = []
        budget = max_records
        deadline = now_ms + self.limits.lock_duration_ms
        for batch in batches:
            if budget <= 0 or self.acquired_count >= self.limits.max_record_locks:
                break
            first, last = max(batch.first, self.start_offset), batch.last
            if last < first:
                continue
            if first < self.end_offset:
                budget = self._reacquire(
                    member, first, min(last, self.end_offset - 1), budget, deadline, mode, out
                )
            if last < self.end_offset or budget <= 0:
                continue
            new_first = self.end_offset
            if batch.first > new_first:  # offsets no batch holds (compaction, deletion)
                self.runs.append(Run(new_first, batch.first - 1, RecordState.ARCHIVED))
                new_first = batch.first
            if batch.skip:
                self.runs.append(Run(new_first, last, RecordState.ARCHIVED))
                self.end_offset = last + 1
                continue
            if mode == ACQUIRE_RECORD_LIMIT:
                last = min(last, new_first + budget - 1)
            run = Run(new_first, last, RecordState.ACQUIRED, 1, member, deadline)
            self.runs.append(run)
            self.end_offset = last + 1
            self.acquired_count += run.size
            budget -= run.size
            out.append(AcquiredRange(run.first, run.last, 1))
        self._advance_start()
        return coalesce(out)

    def _reacquire(
        self,
        member: str,
        first: int,
        last: int,
        budget: int,
        deadline: int,
        mode: int,
        out: list[AcquiredRange],
    ) -> int:
        for run in self._runs_between(first, last):
            if budget <= 0:
                break
            if run.state is not RecordState.AVAILABLE:
                continue
            if mode == ACQUIRE_RECORD_LIMIT and run.size > budget:
                self._split_at(run.first + budget)
            check(run.state, RecordState.ACQUIRED)
            run.state = RecordState.ACQUIRED
            run.delivery_count += 1
            run.member = member
            run.deadline_ms = deadline
            self.acquired_count += run.size
            self.redelivered_total += run.size
            budget -= run.size
            out.append(AcquiredRange(run.first, run.last, run.delivery_count))
        return budget

    # -- acknowledging

    def acknowledge(
        self, member: str, first: int, last: int, types: Sequence[int], now_ms: int
    ) -> ErrorCode:
        """Apply one acknowledgement batch: one type for the whole range, or one per offset.
        Nothing changes unless every offset is Acquired by `member` (a gap may also name
        an offset already archived), as Kafka validates a batch before applying it."""
        if last < first or not types or len(types) not in (1, last - first + 1):
            return ErrorCode.invalid_request
        if any(t not in TYPES for t in types):
            return ErrorCode.invalid_request
        if first < self.start_offset or last >= self.end_offset:
            return ErrorCode.invalid_record_state
        pieces = type_runs(first, last, types)
        for lo, hi, kind in pieces:
            for run in self._runs_between(lo, hi):
                held = run.state is RecordState.ACQUIRED and run.member == member
                gap_ok = kind is AcknowledgeType.GAP and run.state is RecordState.ARCHIVED
                if not (held or gap_ok) or (held and run.pending is not None):
                    return ErrorCode.invalid_record_state
        for lo, hi, kind in pieces:
            self._split_at(lo)
            self._split_at(hi + 1)
            for run in self._runs_between(lo, hi):
                if run.state is RecordState.ACQUIRED:
                    self._apply(run, kind, now_ms)
        self._advance_start()
        return ErrorCode.none

    def _apply(self, run: Run, kind: AcknowledgeType, now_ms: int) -> None:
        if kind is AcknowledgeType.RENEW:
            run.deadline_ms = now_ms + self.limits.lock_duration_ms
            return
        if kind is AcknowledgeType.ACCEPT:
            self._settle(run, RecordState.ACKNOWLEDGED)
        elif kind is AcknowledgeType.RELEASE:
            self._release(run)
        else:  # REJECT, GAP
            self._settle(run, RecordState.ARCHIVED)

    def _settle(self, run: Run, state: RecordState) -> None:
        check(run.state, state)
        if run.state is RecordState.ACQUIRED:
            self.acquired_count -= run.size
        run.state = state
        run.member = None
        run.pending = None

    def _release(self, run: Run) -> None:
        """Back to Available, or Archived once delivered `delivery_count_limit` times."""
        if run.delivery_count >= self.limits.delivery_count_limit:
            self._settle(run, RecordState.ARCHIVED)
        else:
            self._settle(run, RecordState.AVAILABLE)

    # -- transactional acknowledgements (beyond Kafka)

    def acknowledge_pending(
        self,
        member: str,
        pieces: Sequence[tuple[int, int, AcknowledgeType]],
        producer_id: int,
    ) -> ErrorCode:
        """Record acknowledgements that take effect when `producer_id`'s transaction
        commits: the records stay Acquired, their lock held until `complete_pending`.
        Nothing changes unless every piece is valid."""
        for first, last, kind in pieces:
            if kind not in PENDING_TARGETS:
                return ErrorCode.invalid_request
            if last < first or first < self.start_offset or last >= self.end_offset:
                return ErrorCode.invalid_record_state
            for run in self._runs_between(first, last):
                if run.state is not RecordState.ACQUIRED or run.member != member:
                    return ErrorCode.invalid_record_state
                if run.pending is not None and run.pending[0] != producer_id:
                    return ErrorCode.invalid_record_state
        for first, last, kind in pieces:
            self.mark_pending(first, last, producer_id, PENDING_TARGETS[kind])
        return ErrorCode.none

    def mark_pending(
        self, first: int, last: int, producer_id: int, target: RecordState, member: str = ""
    ) -> None:
        """Tie [first, last] to a transaction (recovery gives `member`: the records were
        held when the broker stopped, and stay held until the transaction ends; records
        past the end, whose acquisition was never written, were delivered once)."""
        if member and last >= self.end_offset:
            if first > self.end_offset:
                self.runs.append(Run(self.end_offset, first - 1, RecordState.AVAILABLE))
            tail = Run(max(first, self.end_offset), last, RecordState.AVAILABLE, 1)
            self.runs.append(tail)
            self.end_offset = last + 1
        self._split_at(first)
        self._split_at(last + 1)
        for run in self._runs_between(first, last):
            if member and run.state is RecordState.AVAILABLE:
                run.state = RecordState.ACQUIRED
                run.member = member
                self.acquired_count += run.size
            if run.state is RecordState.ACQUIRED:
                run.pending = (producer_id, target)

    def force_states(self, ranges: Iterable[tuple[int, int, RecordState]]) -> None:
        """Replay a committed transactional acknowledgement (loading the state log, or the
        share coordinator applying its marker). Offsets past the end were acquired for the
        first time (an acquisition is not written): they were delivered once."""
        for first, last, state in ranges:
            if last < self.start_offset:
                continue
            if last >= self.end_offset:
                if first > self.end_offset:
                    self.runs.append(Run(self.end_offset, first - 1, RecordState.AVAILABLE))
                self.runs.append(Run(max(first, self.end_offset), last, RecordState.AVAILABLE, 1))
                self.end_offset = last + 1
            first = max(first, self.start_offset)
            self._split_at(first)
            self._split_at(last + 1)
            for run in self._runs_between(first, last):
                if not run.state.terminal:
                    if run.state is RecordState.ACQUIRED:
                        self.acquired_count -= run.size
                    run.state, run.member, run.pending = state, None, None
        self._advance_start()

    def complete_pending(self, producer_id: int, commit: bool) -> int:
        """The transaction ended: on commit its acknowledgements take effect; on abort the
        records are released (a new delivery, as a consumer that failed). Returns records."""
        done = 0
        for run in self.runs:
            if run.pending is None or run.pending[0] != producer_id:
                continue
            target = run.pending[1]
            run.pending = None
            done += run.size
            if commit and target is not RecordState.AVAILABLE:
                self._settle(run, target)
            else:
                self._release(run)
        self._advance_start()
        return done

    def resolve_pending(self, start_offset: int, decided: Sequence[StateBatch]) -> int:
        """Settle pending runs from their share coordinator's view (its start offset and
        batches, the records still tied to an open transaction shown Acquired): a
        transaction ended there when its records are no longer Acquired. Terminal there
        (or below its start offset): committed; anything else (Available, or never
        written): released, as an abort. Returns the records settled."""
        spans = [(r.first, r.last) for r in self.runs if r.pending is not None]
        edges = [start_offset] + [e for b in decided for e in (b.first, b.last + 1)]
        for edge in edges:
            if any(lo < edge <= hi for lo, hi in spans):
                self._split_at(edge)
        firsts = [b.first for b in decided]
        done = 0
        for run in self.runs:
            if run.pending is None:
                continue
            i = bisect.bisect_right(firsts, run.first) - 1
            there = decided[i].state if i >= 0 and decided[i].last >= run.first else None
            if run.last < start_offset:  # done there: the target, if a terminal one
                target = run.pending[1]
                there = target if target.terminal else RecordState.ARCHIVED
            if there is RecordState.ACQUIRED:
                continue  # still open
            run.pending = None
            done += run.size
            if there is not None and there.terminal:
                self._settle(run, there)
            else:
                self._release(run)
        self._advance_start()
        return done

    def pending_producers(self) -> set[int]:
        return {r.pending[0] for r in self.runs if r.pending is not None}

    # -- locks and members

    def expire_locks(self, now_ms: int) -> int:
        """Release every Acquired run whose lock ran out (a pending transactional
        acknowledgement keeps its lock: the transaction decides). Returns records."""
        released = 0
        for run in self.runs:
            if (
                run.state is RecordState.ACQUIRED
                and run.pending is None
                and run.deadline_ms <= now_ms
            ):
                released += run.size
                self._release(run)
        if released:
            self._advance_start()
        return released

    def release_member(self, member: str) -> int:
        """A member left or was fenced: what it holds is released (not its pending
        transactional acknowledgements, which the transaction's end decides)."""
        released = 0
        for run in self.runs:
            if run.state is RecordState.ACQUIRED and run.member == member and run.pending is None:
                released += run.size
                self._release(run)
        if released:
            self._advance_start()
        return released

    def reset_start(self, offset: int) -> None:
        """Move the start offset (AlterShareGroupOffsets, or the log start passing it):
        everything in flight is forgotten when it moves forward past it."""
        self.runs = [r for r in self.runs if r.last >= offset] if offset > self.start_offset else []
        if self.runs and self.runs[0].first < offset:
            self._split_at(offset)
            self.runs = [r for r in self.runs if r.first >= offset]
        self.acquired_count = sum(r.size for r in self.runs if r.state is RecordState.ACQUIRED)
        self.start_offset = offset
        self.end_offset = max([offset] + [r.last + 1 for r in self.runs])
        self._advance_start()

    # -- runs

    def _runs_between(self, first: int, last: int) -> list[Run]:
        i = max(0, bisect.bisect_right(self.runs, first, key=lambda r: r.first) - 1)
        out = []
        for run in self.runs[i:]:
            if run.first > last:
                break
            if run.last >= first:
                out.append(run)
        return out

    def _split_at(self, offset: int) -> None:
        """Make a run start at `offset` (if a run spans it)."""
        i = bisect.bisect_right(self.runs, offset, key=lambda r: r.first) - 1
        if i < 0:
            return
        run = self.runs[i]
        if run.first < offset <= run.last:
            tail = Run(
                offset,
                run.last,
                run.state,
                run.delivery_count,
                run.member,
                run.deadline_ms,
                run.pending,
            )
            run.last = offset - 1
            self.runs.insert(i + 1, tail)

    def _advance_start(self) -> None:
        drop = 0
        for run in self.runs:
            if not run.state.terminal:
                break
            drop += 1
        if drop:
            self.start_offset = self.runs[drop - 1].last + 1
            del self.runs[:drop]
        if not self.runs:
            self.start_offset = self.end_offset = max(self.start_offset, self.end_offset)
