"""A stateful Hypothesis test of the aborted transactions a read_committed fetch returns.

Three transactional producers write, commit and abort in random interleavings over small
segments; the log rolls and restarts (cleanly, without producer snapshots, without
snapshots or `.txnindex` files, so recovery replays and rebuilds them). The model is the
list of transactions written. Checked after every step: each `.txnindex` entry carries the
stable offset Kafka writes (the first offset of the oldest other transaction open across
its marker, else the marker's + 1), whether the leader wrote it or recovery rebuilt it;
and a read at any offset with any max_bytes is told exactly the aborted transactions
overlapping [fetch offset, end of the batches it read).
"""

from __future__ import annotations

import os

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from onceflow.clock import ManualClock
from onceflow.records.batch import scan_batches, validate_produced_batches
from onceflow.records.builder import build_batch
from onceflow.storage.fs import SimFileSystem
from onceflow.storage.indexes import AbortedTxn
from onceflow.storage.partition_log import LogConfig, PartitionLog
from onceflow.storage.recovery import open_partition

DIR = "/data/t-0"
PRODUCERS = (1, 2, 3)


class AbortedRangeMachine(RuleBasedStateMachine):
    plog: PartitionLog

    @initialize(
        seed=st.integers(0, 1 << 16),
        segment_bytes=st.sampled_from([400, 1500, 1 << 20]),
        interval=st.sampled_from([1, 150, 4096]),
    )
    def open(self, seed: int, segment_bytes: int, interval: int) -> None:
        self.fs = SimFileSystem(seed=seed)
        self.config = LogConfig(
            segment_bytes=segment_bytes, index_interval_bytes=interval, durable=False
        )
        self.sequences = dict.fromkeys(PRODUCERS, 0)
        self.open_txns: dict[int, int] = {}  # producer id -> first offset
        self.expected: list[AbortedTxn] = []  # the .txnindex entries Kafka would hold
        self.plog = self.reopen(clean=False)

    def reopen(self, clean: bool) -> PartitionLog:
        plog, _ = open_partition(self.fs, DIR, "t", 0, self.config, ManualClock(), 0, clean)
        return plog

    @rule(
        pid=st.sampled_from(PRODUCERS),
        count=st.integers(1, 3),
        size=st.integers(0, 80),
    )
    def write(self, pid: int, count: int, size: int) -> None:
        data = build_batch(
            [(None, b"v" * size, ()) for _ in range(count)],
            timestamp_ms=0,
            producer_id=pid,
            producer_epoch=0,
            base_sequence=self.sequences[pid],
            transactional=True,
        )
        self.sequences[pid] += count
        result = self.plog.append_batches(data, validate_produced_batches(data, 1 << 20))
        self.open_txns.setdefault(pid, result.first_offset)

    @precondition(lambda self: bool(self.open_txns))
    @rule(data=st.data(), commit=st.sampled_from([False, False, True]))
    def end(self, data: st.DataObject, commit: bool) -> None:
        pid = data.draw(st.sampled_from(sorted(self.open_txns)), "pid")
        marker = self.plog.append_marker(pid, 0, coordinator_epoch=0, commit=commit).first_offset
        first = self.open_txns.pop(pid, None)
        if first is not None and not commit:
            others = self.open_txns.values()
            stable = min(others) if others else marker + 1
            self.expected.append(AbortedTxn(pid, first, marker, stable))

    @rule()
    def roll(self) -> None:
        self.plog.roll()

    @rule(forget=st.sampled_from([(), (".snapshot",), (".snapshot", ".txnindex")]))
    def restart(self, forget: tuple[str, ...]) -> None:
        self.plog.flush()
        self.plog.close()
        for name in self.fs.listdir(DIR):
            if name.endswith(forget):
                self.fs.remove(os.path.join(DIR, name))
        self.plog = self.reopen(clean=True)

    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        plog = self.plog
        lso = plog.last_stable_offset
        offset = data.draw(st.integers(plog.log_start_offset, lso), "offset")
        max_bytes = data.draw(st.integers(1, 3000), "max_bytes")
        read = plog.read(offset, max_bytes, lso, data.draw(st.booleans(), "min_one"))
        got = plog.aborted_transactions(offset, read)
        if read.region is None:
            assert got == []
            return
        segment = next(s for s in plog.segments if s.log is read.region.file)
        batches, _ = scan_batches(segment.read_bytes(0, segment.size))
        cut = read.region.position + read.region.size
        end = max(b.header.next_offset for b in batches if b.position < cut)
        assert got == [e for e in self.expected if e.last_offset >= offset and e.first_offset < end]

    @invariant()
    def entries_carry_kafkas_stable_offsets(self) -> None:
        entries = [e for s in self.plog.segments for e in s.txn_index.entries]
        assert entries == self.expected


AbortedRangeMachine.TestCase.settings = settings(
    max_examples=max(settings().max_examples, 100), stateful_step_count=60, deadline=None
)
test_aborted_transactions_of_a_read_against_model = AbortedRangeMachine.TestCase
