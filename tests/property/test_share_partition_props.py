"""The share-partition state machine against a per-offset model (Hypothesis, stateful):
random fetches, acknowledgements, lock expiries, members leaving and transactional
acknowledgements. Each offset's state, delivery count and holder must be the model's, the
runs must tile [start, end) with the start never terminal, and what a member is handed
must be exactly what the model says is available."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from onceflow.coordinator.share.partition import FetchedBatch, ShareLimits, SharePartition
from onceflow.coordinator.share.state import AcknowledgeType, RecordState
from onceflow.errors import ErrorCode

LOG = [
    FetchedBatch(0, 3, False),
    FetchedBatch(4, 4, True),
    FetchedBatch(5, 9, False),
    FetchedBatch(12, 15, False),
    FetchedBatch(16, 19, False),
]  # 10-11: a gap
LIMIT = 3
LOCK = 100
MEMBERS = ("a", "b", "c")


@dataclass
class Offset:
    state: RecordState = RecordState.AVAILABLE
    count: int = 0
    member: str | None = None
    deadline: int = 0
    pending: tuple[int, RecordState] | None = None


class ShareMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.sp = SharePartition(0, ShareLimits(LOCK, LIMIT, max_record_locks=1000))
        self.model: dict[int, Offset] = {}
        self.end = 0
        self.now = 0

    # -- the model's own rules

    def _release(self, o: Offset) -> None:
        o.state = RecordState.ARCHIVED if o.count >= LIMIT else RecordState.AVAILABLE
        o.member, o.pending = None, None

    def _batches_from(self, offset: int) -> list[FetchedBatch]:
        return [b for b in LOG if b.last >= offset]

    # -- rules

    @rule(member=st.sampled_from(MEMBERS), max_records=st.integers(1, 12))
    def fetch(self, member: str, max_records: int) -> None:
        batches = self._batches_from(self.sp.next_fetch_offset())
        got = self.sp.acquire(member, batches, max_records, self.now)
        handed = {o for r in got for o in range(r.first, r.last + 1)}
        for o in handed:
            m = self.model.setdefault(o, Offset())
            assert m.state is RecordState.AVAILABLE, f"offset {o} handed out while {m.state}"
            m.state, m.member, m.deadline = RecordState.ACQUIRED, member, self.now + LOCK
            m.count += 1
            assert m.count == next(r.delivery_count for r in got if r.first <= o <= r.last)
        for b in batches:  # what the fetch went past for the first time
            for o in range(max(b.first, self.end), b.last + 1):
                if (
                    o not in handed
                    and o not in self.model
                    and (b.skip or o < min(handed, default=o))
                ):
                    pass
        self.end = max([self.end, self.sp.end_offset])
        for o in range(0, self.end):
            if o not in self.model:  # gaps and skipped batches: archived when passed
                self.model[o] = Offset(RecordState.ARCHIVED)

    @rule(
        member=st.sampled_from(MEMBERS),
        first=st.integers(0, 20),
        length=st.integers(1, 6),
        kind=st.sampled_from([1, 2, 3, 4, 0]),
    )
    def acknowledge(self, member: str, first: int, length: int, kind: int) -> None:
        last = first + length - 1
        start = self.sp.start_offset
        error = self.sp.acknowledge(member, first, last, [kind], self.now)
        offsets = [self.model.get(o) for o in range(first, last + 1)]
        held = all(
            o is not None
            and (
                (o.state is RecordState.ACQUIRED and o.member == member and o.pending is None)
                or (kind == 0 and o.state is RecordState.ARCHIVED)
            )
            for o in offsets
        )
        in_window = first >= start and last < self.end
        if not (held and in_window):
            assert error is not ErrorCode.none
            return
        assert error is ErrorCode.none
        for o in offsets:
            assert o is not None
            if o.state is not RecordState.ACQUIRED:
                continue
            if kind == 4:
                o.deadline = self.now + LOCK
            elif kind == 1:
                o.state, o.member = RecordState.ACKNOWLEDGED, None
            elif kind == 2:
                self._release(o)
            else:
                o.state, o.member = RecordState.ARCHIVED, None

    @rule(
        member=st.sampled_from(MEMBERS),
        first=st.integers(0, 20),
        length=st.integers(1, 4),
        producer=st.integers(1, 2),
    )
    def acknowledge_in_transaction(
        self, member: str, first: int, length: int, producer: int
    ) -> None:
        last = first + length - 1
        start = self.sp.start_offset
        error = self.sp.acknowledge_pending(
            member, [(first, last, AcknowledgeType.ACCEPT)], producer
        )
        offsets = [self.model.get(o) for o in range(first, last + 1)]
        ok = (
            first >= start
            and last < self.end
            and all(
                o is not None
                and o.state is RecordState.ACQUIRED
                and o.member == member
                and (o.pending is None or o.pending[0] == producer)
                for o in offsets
            )
        )
        assert (error is ErrorCode.none) == ok
        if ok:
            for o in offsets:
                assert o is not None
                o.pending = (producer, RecordState.ACKNOWLEDGED)

    @rule(producer=st.integers(1, 2), commit=st.booleans())
    def end_transaction(self, producer: int, commit: bool) -> None:
        self.sp.complete_pending(producer, commit)
        for o in self.model.values():
            if o.pending is not None and o.pending[0] == producer:
                if commit:
                    o.state, o.member, o.pending = RecordState.ACKNOWLEDGED, None, None
                else:
                    self._release(o)

    @rule(step=st.integers(1, 150))
    def time_passes(self, step: int) -> None:
        self.now += step
        self.sp.expire_locks(self.now)
        for o in self.model.values():
            if o.state is RecordState.ACQUIRED and o.pending is None and o.deadline <= self.now:
                self._release(o)

    @rule(member=st.sampled_from(MEMBERS))
    def member_leaves(self, member: str) -> None:
        self.sp.release_member(member)
        for o in self.model.values():
            if o.state is RecordState.ACQUIRED and o.member == member and o.pending is None:
                self._release(o)

    # -- what must hold

    @invariant()
    def matches_the_model(self) -> None:
        sp = self.sp
        expected_start = next(
            (o for o in range(self.end) if not self.model[o].state.terminal), self.end
        )
        assert sp.start_offset == expected_start
        assert sp.end_offset == self.end or not sp.runs
        position = sp.start_offset
        for run in sp.runs:
            assert run.first == position, "runs must tile [start, end)"
            position = run.last + 1
            for o in range(run.first, run.last + 1):
                m = self.model[o]
                assert (
                    run.state,
                    run.delivery_count if run.state is not RecordState.ARCHIVED or m.count else 0,
                ) == (
                    m.state,
                    m.count if run.state is not RecordState.ARCHIVED or m.count else 0,
                ), o
                assert run.member == m.member and run.pending == m.pending, o
        assert sp.acquired_count == sum(
            1
            for o in range(sp.start_offset, self.end)
            if self.model[o].state is RecordState.ACQUIRED
        )


ShareMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
TestShareMachine = ShareMachine.TestCase
