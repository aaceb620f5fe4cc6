"""A stateful Hypothesis test of PartitionLog against a model: the batches it was given.

Rules append random batches, flush, roll, read at random offsets, look up timestamps, close
cleanly and reopen, and crash (SimFileSystem.crash: unsynced bytes torn at a seeded point)
and reopen. After every reopen the whole log is checked against the journal of appends:
flushed batches survive byte for byte, offsets are contiguous, nothing after a torn batch is
served, and the indexes equal a rebuild from the .log alone.
"""

from __future__ import annotations

import itertools

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)
from tests.simulation.storage_checks import Journal, StoredBatch, check_log

from onceflow.clock import ManualClock
from onceflow.records.batch import scan_batches, validate_produced_batches
from onceflow.records.builder import build_batch
from onceflow.storage.fs import SimFileSystem
from onceflow.storage.partition_log import LogConfig, PartitionLog
from onceflow.storage.recovery import open_partition

DIR = "/data/t-0"
RECORD = st.tuples(st.none() | st.binary(max_size=8), st.binary(max_size=40))
BATCH = st.tuples(st.lists(RECORD, min_size=1, max_size=4), st.integers(-3_000, 3_000))


class PartitionLogMachine(RuleBasedStateMachine):
    plog: PartitionLog

    @initialize(
        seed=st.integers(0, 1 << 16),
        segment_bytes=st.sampled_from([250, 600, 1 << 20]),
        interval=st.sampled_from([1, 150, 4096]),
        durable=st.booleans(),
    )
    def open(self, seed: int, segment_bytes: int, interval: int, durable: bool) -> None:
        self.fs = SimFileSystem(seed=seed)
        self.clock = ManualClock()
        self.config = LogConfig(
            segment_bytes=segment_bytes, index_interval_bytes=interval, durable=durable
        )
        self.journal = Journal()
        self.recovery_point = 0  # the last "checkpointed" flushed offset
        self.plog, _ = open_partition(
            self.fs, DIR, "t", 0, self.config, self.clock, 0, clean_shutdown=False
        )

    # ---- the model -----------------------------------------------------------------------

    def model(self) -> list[StoredBatch]:
        """Every batch the log holds now, in offset order (no retention in this test)."""
        return sorted(self.journal.attempted.values(), key=lambda b: b.base)

    # ---- rules ---------------------------------------------------------------------------

    @rule(
        batches=st.lists(BATCH, min_size=1, max_size=3),
        advance=st.sampled_from([0, 0, 1, 100, 5_000]),
    )
    def append(
        self, batches: list[tuple[list[tuple[bytes | None, bytes]], int]], advance: int
    ) -> None:
        self.clock.advance(advance)
        data = b"".join(
            build_batch([(k, v, []) for k, v in records], timestamp_ms=self.clock.now_ms() + skew)
            for records, skew in batches
        )
        headers = validate_produced_batches(data, 1 << 20)
        start = self.plog.log_end_offset
        self.journal.intend(self.plog, data, headers)
        result = self.plog.append_batches(data, headers)
        count = sum(len(records) for records, _ in batches)
        assert (result.first_offset, result.last_offset) == (start, start + count - 1)
        assert self.plog.log_end_offset == start + count

    @rule()
    def flush(self) -> None:
        self.plog.flush()
        assert self.plog.flushed_offset == self.plog.log_end_offset
        self.journal.acked = self.plog.flushed_offset

    @rule()
    def checkpoint(self) -> None:
        self.recovery_point = self.plog.flushed_offset

    @rule()
    def roll(self) -> None:
        before = len(self.plog.segments)
        was_empty = self.plog.active.size == 0
        self.plog.roll()
        assert len(self.plog.segments) == before + (0 if was_empty else 1)
        assert self.plog.active.base_offset == self.plog.log_end_offset or was_empty

    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        plog = self.plog
        offset = data.draw(st.integers(plog.log_start_offset, plog.log_end_offset), "offset")
        max_bytes = data.draw(st.integers(1, 2_000), "max_bytes")
        min_one = data.draw(st.booleans(), "min_one")
        hw = plog.high_watermark
        result = plog.read(offset, max_bytes, hw, min_one)
        assert result.high_watermark == hw
        visible = [b for b in self.model() if b.next <= hw]
        holder = next((i for i, b in enumerate(visible) if b.next > offset), None)
        if holder is None:
            assert result.region is None
            return
        assert result.region is not None
        got = result.region.read()
        first = visible[holder]
        # Starts at the batch holding the offset and is a prefix of what follows it.
        expected = b"".join(b.data for b in visible[holder:])
        assert expected.startswith(got)
        assert got[: len(first.data)] == first.data[: len(got)]
        if min_one:
            assert len(got) >= len(first.data), "min_one returns the first batch whole"
        assert len(got) <= max(max_bytes, len(first.data) if min_one else 0)
        # Cut by max_bytes or not, every whole batch in it is a real one.
        batches, _ = scan_batches(got)
        assert [got[b.position : b.position + b.header.size] for b in batches] == [
            b.data for b in visible[holder : holder + len(batches)]
        ]

    @rule(data=st.data())
    def offset_for_timestamp(self, data: st.DataObject) -> None:
        hw = self.plog.high_watermark
        stamps = [
            (batch.base, scan_batches(batch.data)[0][0].header.max_timestamp)
            for batch in self.model()
            if batch.base < hw
        ]
        # Aim at and just around real timestamps, where off-by-one answers hide.
        near = [ts + d for _, ts in stamps for d in (-1, 0, 1)]
        now = self.clock.now_ms()
        target = data.draw(
            st.sampled_from(near) if near else st.integers(now - 5_000, now + 5_000), "timestamp"
        )
        expected = next(((base, ts) for base, ts in stamps if ts >= target), None)
        assert self.plog.offset_for_timestamp(target) == expected

    @rule()
    def clean_restart(self) -> None:
        self.plog.flush()
        self.journal.acked = self.plog.flushed_offset
        self.plog.close()
        self.plog, _ = open_partition(
            self.fs, DIR, "t", 0, self.config, self.clock, self.journal.acked, True
        )
        self.recovery_point = self.journal.acked
        check_log(self.plog, self.journal)

    @rule()
    def crash_and_recover(self) -> None:
        self.fs.crash()
        self.plog, _ = open_partition(
            self.fs, DIR, "t", 0, self.config, self.clock, self.recovery_point, False
        )
        check_log(self.plog, self.journal)
        self.journal.forget_from(self.plog.log_end_offset)
        self.journal.acked = self.plog.flushed_offset

    # ---- invariants ----------------------------------------------------------------------

    @invariant()
    def offsets_are_ordered(self) -> None:
        plog = self.plog
        assert plog.log_start_offset <= plog.high_watermark <= plog.log_end_offset
        assert plog.flushed_offset <= plog.log_end_offset
        if plog.config.durable:
            assert plog.high_watermark <= plog.flushed_offset
        model = self.model()
        assert plog.log_end_offset == (model[-1].next if model else 0)
        for prev, nxt in itertools.pairwise(model):
            assert nxt.base == prev.next


# At least 150 examples (about a second); HYPOTHESIS_PROFILE=thorough (tests/property/conftest.py)
# raises it for long runs.
PartitionLogMachine.TestCase.settings = settings(
    max_examples=max(settings().max_examples, 150), stateful_step_count=30, deadline=None
)
test_partition_log_against_model = PartitionLogMachine.TestCase
