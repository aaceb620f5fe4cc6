"""A stateful Hypothesis test of producer state against a model: the batches the log holds.

Several producers send batches in random interleavings: the next batch, retries of recent
and old batches, gaps, stale epochs, epoch bumps (good and bad), unknown producers, two
batches in one request, and transaction markers for the transactional one. The log is
flushed, rolled, cleanly restarted, and crashed (SimFileSystem.crash tears unsynced tails)
and reopened with `open_partition`.

The model is a list of the accepted batches in offset order. Producer state is a fold over
it, and the decision for a request (append, duplicate with its first offsets, or Kafka's
error) is read off that fold. After every step:

- the partition's producer state equals the model's;
- on a copy of the disk, reopening (newest snapshot plus the tail) and reopening with every
  snapshot deleted (a replay of the whole log) both give that same state.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from onceflow.clock import ManualClock
from onceflow.errors import ErrorCode, KafkaError
from onceflow.records.batch import validate_produced_batches
from onceflow.records.builder import build_batch
from onceflow.storage.fs import SimFileSystem
from onceflow.storage.partition_log import LogConfig, PartitionLog
from onceflow.storage.producer_state import (
    NO_MARKER,
    NO_TXN,
    BatchMetadata,
    ProducerEntry,
)
from onceflow.storage.recovery import open_partition

DIR = "/data/t-0"
PIDS = (1, 2, 3)
TXN_PID = 3  # sends transactional batches; markers end its transactions
MODULUS = 1 << 31
KINDS = ("next", "next", "next", "retry", "gap", "stale", "bump", "bad_bump", "unknown")


@dataclass(frozen=True)
class Sent:
    """One batch as a client sent it (exact bytes, so a retry is byte for byte the same)."""

    pid: int
    epoch: int
    first_seq: int
    count: int
    timestamp: int
    data: bytes

    @property
    def last_seq(self) -> int:
        return (self.first_seq + self.count - 1) % MODULUS


@dataclass(frozen=True)
class Stored:
    """A batch or marker the model says is in the log."""

    pid: int
    epoch: int
    base: int
    count: int
    timestamp: int
    first_seq: int = -1
    transactional: bool = False
    marker: bool = False

    @property
    def last(self) -> int:
        return self.base + self.count - 1


@dataclass
class ModelEntry:
    epoch: int
    batches: list[BatchMetadata] = field(default_factory=list)
    last_timestamp: int = -1
    txn_first_offset: int = NO_TXN
    coordinator_epoch: int = -1
    last_marker_offset: int = NO_MARKER

    def copy(self) -> ModelEntry:
        return ModelEntry(
            self.epoch,
            list(self.batches),
            self.last_timestamp,
            self.txn_first_offset,
            self.coordinator_epoch,
            self.last_marker_offset,
        )

    @property
    def next_seq(self) -> int:
        return (self.batches[-1].last_seq + 1) % MODULUS if self.batches else 0


def fold(state: dict[int, ModelEntry], item: Stored) -> None:
    """The model's state change for one stored batch or marker."""
    old = state.get(item.pid)
    if old is None or item.epoch > old.epoch:
        entry = ModelEntry(item.epoch)
        if old is not None:
            entry.txn_first_offset = old.txn_first_offset
            entry.coordinator_epoch = -1 if item.marker else old.coordinator_epoch
    else:
        entry = old.copy()
    entry.last_timestamp = item.timestamp
    if item.marker:
        entry.txn_first_offset = NO_TXN
        entry.coordinator_epoch = 0
        entry.last_marker_offset = item.base
    else:
        last_seq = (item.first_seq + item.count - 1) % MODULUS
        meta = BatchMetadata(item.first_seq, last_seq, item.last, item.count - 1, item.timestamp)
        entry.batches = [*entry.batches, meta][-5:]
        if item.transactional and entry.txn_first_offset == NO_TXN:
            entry.txn_first_offset = item.base
    state[item.pid] = entry


def as_producers(state: dict[int, ModelEntry]) -> dict[int, ProducerEntry]:
    out = {}
    for pid, m in state.items():
        entry = ProducerEntry(
            pid,
            m.epoch,
            coordinator_epoch=m.coordinator_epoch,
            last_timestamp=m.last_timestamp,
            txn_first_offset=m.txn_first_offset,
            last_marker_offset=m.last_marker_offset,
        )
        entry.batches.extend(m.batches)
        out[pid] = entry
    return out


Decision = tuple[str, int, int] | tuple[str, ErrorCode]


def decide(state: dict[int, ModelEntry], request: list[Sent], end: int) -> Decision:
    """Kafka's answer to a Produce request of these batches, from the model alone.

    Duplicates are found in the stored state only, among the batches after the producer's
    last marker (an ended transaction's batch is never retried); each batch is checked
    against the state the earlier batches of the request leave; one bad batch rejects them
    all.
    """
    planned = {pid: e.copy() for pid, e in state.items()}
    offset = end
    for sent in request:
        stored = state.get(sent.pid)
        if stored is not None and stored.epoch == sent.epoch:
            for b in stored.batches:
                if (b.first_seq, b.last_seq) == (
                    sent.first_seq,
                    sent.last_seq,
                ) and b.last_offset > stored.last_marker_offset:
                    return ("duplicate", b.last_offset - b.offset_delta, b.last_offset)
        entry = planned.get(sent.pid)
        if entry is None:
            if sent.first_seq != 0:
                return ("error", ErrorCode.unknown_producer_id)
        elif sent.epoch < entry.epoch:
            return ("error", ErrorCode.invalid_producer_epoch)
        elif sent.epoch > entry.epoch:
            if sent.first_seq != 0:
                return ("error", ErrorCode.out_of_order_sequence_number)
        elif sent.first_seq != entry.next_seq:
            return ("error", ErrorCode.out_of_order_sequence_number)
        fold(planned, as_stored(sent, offset))
        offset += sent.count
    return ("appended", end, offset - 1)


def as_stored(sent: Sent, base: int) -> Stored:
    return Stored(
        sent.pid,
        sent.epoch,
        base,
        sent.count,
        sent.timestamp,
        sent.first_seq,
        transactional=sent.pid == TXN_PID,
    )


def reopen(fs: SimFileSystem, config: LogConfig, *, keep_snapshots: bool) -> PartitionLog:
    """Open a copy of the disk as it is now (nothing lost), with or without its snapshots."""
    clone = copy.deepcopy(fs)
    if not keep_snapshots:
        for name in clone.listdir(DIR):
            if name.endswith(".snapshot"):
                clone.remove(f"{DIR}/{name}")
    plog, _ = open_partition(clone, DIR, "t", 0, config, ManualClock(0), 0, False)
    return plog


class ProducerStateMachine(RuleBasedStateMachine):
    plog: PartitionLog

    @initialize(seed=st.integers(0, 1 << 16), segment_bytes=st.sampled_from([300, 800, 1 << 20]))
    def open(self, seed: int, segment_bytes: int) -> None:
        self.fs = SimFileSystem(seed=seed)
        self.clock = ManualClock(0)
        self.config = LogConfig(segment_bytes=segment_bytes)
        self.plog, _ = open_partition(
            self.fs, DIR, "t", 0, self.config, self.clock, 0, clean_shutdown=False
        )
        self.stored: list[Stored] = []
        self.sent: list[Sent] = []
        self.epochs = dict.fromkeys(PIDS, 0)  # each client's current epoch
        self.next_unknown = 100
        self.recovery_point = 0

    # ---- the model -----------------------------------------------------------------------

    def model(self) -> dict[int, ModelEntry]:
        state: dict[int, ModelEntry] = {}
        for item in self.stored:
            fold(state, item)
        return state

    @property
    def end(self) -> int:
        return self.stored[-1].last + 1 if self.stored else 0

    def make(self, pid: int, epoch: int, seq: int, count: int) -> Sent:
        ts = self.clock.now_ms()
        data = build_batch(
            [(None, b"%d-%d" % (pid, i), ()) for i in range(count)],
            timestamp_ms=ts,
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq % MODULUS,
            transactional=pid == TXN_PID,
        )
        return Sent(pid, epoch, seq % MODULUS, count, ts, data)

    def expected_next(self, pid: int, epoch: int) -> int:
        entry = self.model().get(pid)
        return entry.next_seq if entry is not None and entry.epoch == epoch else 0

    def produce(self, request: list[Sent]) -> None:
        expected = decide(self.model(), request, self.end)
        event(f"{len(request)} batches: {expected[0]} {getattr(expected[1], 'name', '')}")
        data = b"".join(s.data for s in request)
        before = self.plog.log_end_offset
        try:
            result = self.plog.append_batches(data, validate_produced_batches(data, 1 << 20))
        except KafkaError as exc:
            assert expected == ("error", exc.code), f"got {exc.code!r}, model says {expected}"
            assert self.plog.log_end_offset == before
            return
        finally:
            self.sent.extend(s for s in request if s not in self.sent)
        got = (
            "duplicate" if result.duplicate else "appended",
            result.first_offset,
            result.last_offset,
        )
        assert got == expected, f"got {got}, model says {expected}"
        if result.duplicate:
            assert self.plog.log_end_offset == before, "a duplicate appended something"
        else:
            offset = before
            for s in request:
                self.stored.append(as_stored(s, offset))
                offset += s.count

    # ---- rules ---------------------------------------------------------------------------

    @rule(
        pid=st.sampled_from(PIDS),
        kind=st.sampled_from(KINDS),
        count=st.integers(1, 3),
        skip=st.integers(1, 3),
        pick=st.integers(0, 1 << 16),
        advance=st.sampled_from([0, 1, 1_000]),
    )
    def send(self, pid: int, kind: str, count: int, skip: int, pick: int, advance: int) -> None:
        self.clock.advance(advance)
        epoch = self.epochs[pid]
        mine = [s for s in self.sent if s.pid == pid]
        if kind == "retry" and mine:
            # Any earlier batch: one of the last five, an older one, one the log lost in a
            # crash, or one that was rejected.
            recent = mine[-1 - (pick // 2) % min(6, len(mine))]
            sent = recent if pick % 2 else mine[(pick // 2) % len(mine)]
        elif kind == "gap":
            sent = self.make(pid, epoch, self.expected_next(pid, epoch) + skip, count)
        elif kind == "stale" and epoch > 0:
            sent = self.make(pid, epoch - 1, self.expected_next(pid, epoch - 1), count)
        elif kind == "bump":
            self.epochs[pid] = epoch + 1
            sent = self.make(pid, epoch + 1, 0, count)
        elif kind == "bad_bump":
            sent = self.make(pid, epoch + 1, skip, count)
        elif kind == "unknown":
            self.next_unknown += 1
            sent = self.make(self.next_unknown, 0, skip, count)
        else:
            sent = self.make(pid, epoch, self.expected_next(pid, epoch), count)
        self.produce([sent])

    @rule(
        pids=st.lists(st.sampled_from(PIDS), min_size=2, max_size=3),
        gap_at=st.integers(0, 6),
        repeat=st.sampled_from([False, False, False, True]),
    )
    def send_request_of_several(self, pids: list[int], gap_at: int, repeat: bool) -> None:
        """Several batches in one request; the one at `gap_at` (if any) skips a sequence,
        and with `repeat` the last one is sent twice (out of order: no duplicate yet)."""
        planned = self.model()
        request = []
        for i, pid in enumerate(pids):
            epoch = self.epochs[pid]
            entry = planned.get(pid)
            seq = entry.next_seq if entry is not None and entry.epoch == epoch else 0
            sent = self.make(pid, epoch, seq + (i == gap_at), 1 + i % 2)
            fold(planned, as_stored(sent, 0))
            request.append(sent)
        if repeat:
            request.append(request[-1])
        self.produce(request)

    @rule(commit=st.booleans())
    def marker(self, commit: bool) -> None:
        """The coordinator ends the transactional producer's transaction here."""
        epoch = self.epochs[TXN_PID]
        entry = self.model().get(TXN_PID)
        if entry is not None and epoch < entry.epoch:
            return  # the client's bump was lost in a crash; the coordinator would know
        result = self.plog.append_marker(TXN_PID, epoch, 0, commit)
        assert result.first_offset == self.end
        self.stored.append(Stored(TXN_PID, epoch, self.end, 1, self.clock.now_ms(), marker=True))

    @rule()
    def flush(self) -> None:
        self.plog.flush()

    @rule()
    def checkpoint(self) -> None:
        self.recovery_point = self.plog.flushed_offset

    @rule()
    def roll(self) -> None:
        self.plog.roll()

    @rule()
    def clean_restart(self) -> None:
        self.plog.flush()
        self.plog.close()
        end = self.plog.log_end_offset
        self.plog, stats = open_partition(
            self.fs, DIR, "t", 0, self.config, self.clock, end, clean_shutdown=True
        )
        assert stats.batches_replayed == 0, "the shutdown snapshot is at the log end"
        self.recovery_point = end

    @rule()
    def crash_restart(self) -> None:
        acked = self.plog.flushed_offset
        self.fs.crash()
        self.plog, _ = open_partition(
            self.fs, DIR, "t", 0, self.config, self.clock, self.recovery_point, False
        )
        end = self.plog.log_end_offset
        assert end >= acked, "flushed batches were lost"
        boundaries = {0} | {s.last + 1 for s in self.stored}
        assert end in boundaries, "the recovered log ends inside a batch"
        self.stored = [s for s in self.stored if s.base < end]

    # ---- invariants ----------------------------------------------------------------------

    @invariant()
    def state_matches_the_model_and_both_rebuilds(self) -> None:
        if not hasattr(self, "plog"):
            return
        expected = as_producers(self.model())
        state = self.plog.producer_state
        assert self.plog.log_end_offset == self.end
        assert state.producers == expected
        assert state.ongoing == {
            pid: e.txn_first_offset for pid, e in expected.items() if e.txn_first_offset != NO_TXN
        }
        from_snapshot = reopen(self.fs, self.config, keep_snapshots=True)
        assert from_snapshot.producer_state.producers == expected, "snapshot + tail differs"
        from_log = reopen(self.fs, self.config, keep_snapshots=False)
        assert from_log.producer_state.producers == expected, "a whole-log replay differs"


# The profile's example count (60 by default, about 2 s; HYPOTHESIS_PROFILE=thorough in
# tests/property/conftest.py raises it for long runs).
ProducerStateMachine.TestCase.settings = settings(
    max_examples=settings().max_examples, stateful_step_count=40, deadline=None
)
test_producer_state_against_model = ProducerStateMachine.TestCase
