"""Seeded runs of a partition under random disk faults, crashes and restarts.

Each run drives one partition through a LogManager on a SimFileSystem: an idempotent
producer, a transactional one whose transactions end in COMMIT or ABORT markers (as the
coordinator writes them, retried until written), group commits, segment rolls with producer
snapshots, checkpoints. Before each operation a seeded coin may inject a fault: a write that
fails part-way with ENOSPC or EIO (on the .log, an index, the .txnindex, a snapshot, the
checkpoint), a cut-back that fails (a torn write), or a failed fsync. Failures are handled
as the broker handles them: a producer retries the same batch after OutOfSpace, and an
offline log is left alone until the next crash and restart. Every so often, and whenever the
log went offline, the machine crashes (unsynced bytes are torn off at a random point, lost
pages become zeros) and the directory is recovered.

After every recovery:
- the files hold whole batches only, every acknowledged (flushed) batch is there byte for
  byte, and nothing was invented (storage_checks.check_log);
- the producer state equals a replay of the whole log;
- every ABORT marker in the log that ended a transaction is in the aborted-transaction
  index, so read_committed readers drop exactly the aborted records, and the last stable
  offset is the first offset of the transaction still open, if any;
- the idempotent producer's retry of its last acknowledged batch is a duplicate.
"""

from __future__ import annotations

import copy
import errno
import random
from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from onceflow.clock import ManualClock
from onceflow.records.batch import parse_header, scan_batches, validate_produced_batches
from onceflow.records.builder import build_batch
from onceflow.records.control import ControlType, build_control_batch, parse_control_record
from onceflow.storage.failures import LogOffline, OutOfSpace
from onceflow.storage.fs import Fault, SimFileSystem
from onceflow.storage.log_manager import LogManager
from onceflow.storage.partition_log import LogConfig, PartitionLog
from onceflow.storage.recovery import open_partition
from tests.simulation.storage_checks import Journal, check_log

ROOT = "/data"
DIR = f"{ROOT}/t-0"
IDEMPOTENT, TRANSACTIONAL = 1, 2
SEEDS = range(100)
STEPS = 300
FAULT_TARGETS = (".log", ".log", ".index", ".timeindex", ".txnindex", ".snapshot", "checkpoint")


def factory(overrides: Mapping[str, str]) -> LogConfig:
    return LogConfig(segment_bytes=1500, index_interval_bytes=150)


@dataclass
class Pending:
    """A batch a producer sent and must send again until it is appended."""

    data: bytes
    seq: int
    count: int


@dataclass
class World:
    seed: int
    rng: random.Random = field(init=False)
    fs: SimFileSystem = field(init=False)
    clock: ManualClock = field(default_factory=ManualClock)
    journal: Journal = field(default_factory=Journal)
    lm: LogManager | None = None
    next_seq: dict[int, int] = field(default_factory=lambda: {IDEMPOTENT: 0, TRANSACTIONAL: 0})
    pending: dict[int, Pending] = field(default_factory=dict)
    txn_open: bool = False
    marker_due: bool | None = None  # commit (True) or abort (False) being retried
    last_acked: tuple[bytes, int] | None = None  # the idempotent producer's, and its offset
    crashes: int = 0
    faults: int = 0
    offline_seen: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.fs = SimFileSystem(seed=self.seed)

    def open(self) -> None:
        self.lm = LogManager(self.fs, ROOT, self.clock, factory)
        self.lm.load()
        if "t" not in self.lm.topics:
            self.lm.create_topic("t", 1)

    @property
    def plog(self) -> PartitionLog:
        assert self.lm is not None
        plog = self.lm.get("t", 0)
        assert plog is not None
        return plog

    # ---- what the clients and the coordinator do -------------------------------------

    def batch(self, pid: int, count: int) -> Pending:
        pending = self.pending.get(pid)
        if pending is None:
            seq = self.next_seq[pid]
            data = build_batch(
                [(None, b"%d-%d-%d" % (pid, seq, i), ()) for i in range(count)],
                timestamp_ms=self.clock.now_ms(),
                producer_id=pid,
                producer_epoch=0,
                base_sequence=seq,
                transactional=pid == TRANSACTIONAL,
            )
            pending = self.pending[pid] = Pending(data, seq, count)
        return pending

    def send(self, pid: int) -> None:
        pending = self.batch(pid, self.rng.randint(1, 4))
        plog = self.plog
        headers = validate_produced_batches(pending.data, 1 << 20)
        self.journal.intend(plog, pending.data, headers)
        try:
            result = plog.append_batches(pending.data, headers)
        except OutOfSpace:
            return  # retried as it is, like librdkafka after KAFKA_STORAGE_ERROR
        del self.pending[pid]
        self.next_seq[pid] = pending.seq + pending.count
        if pid == TRANSACTIONAL:
            self.txn_open = True
        elif not result.duplicate:
            self.last_acked = (pending.data, result.first_offset)

    def end_txn(self) -> None:
        if self.marker_due is None:
            if not self.txn_open or TRANSACTIONAL in self.pending:
                return
            self.marker_due = self.rng.random() < 0.5
        plog = self.plog
        marker = build_control_batch(
            ControlType.COMMIT if self.marker_due else ControlType.ABORT,
            producer_id=TRANSACTIONAL,
            producer_epoch=0,
            coordinator_epoch=0,
            timestamp_ms=self.clock.now_ms(),
        )
        self.journal.intend(plog, marker, [parse_header(marker)])  # the bytes it appends
        try:
            plog.append_marker(TRANSACTIONAL, 0, 0, commit=self.marker_due)
        except OutOfSpace:
            return  # the coordinator retries
        self.marker_due = None
        self.txn_open = False

    def flush(self) -> None:
        plog = self.plog
        plog.flush()
        self.journal.acked = plog.flushed_offset

    def checkpoint(self) -> None:
        assert self.lm is not None
        self.lm.checkpoint_recovery_points()

    # ---- faults and crashes ----------------------------------------------------------

    def maybe_inject(self) -> None:
        if self.rng.random() > 0.12:
            return
        self.faults += 1
        kind = self.rng.random()
        target = self.rng.choice(FAULT_TARGETS)
        if kind < 0.55:
            error = errno.ENOSPC
            self.fs.inject(Fault("write", path=target, error=error, keep=self.rng.random()))
        elif kind < 0.7:
            self.fs.inject(Fault("write", path=target, error=errno.EIO, keep=self.rng.random()))
        elif kind < 0.8:
            self.fs.inject(Fault("write", path=target, error=errno.ENOSPC, keep=0.5))
            self.fs.inject(Fault("truncate", path=target))
        else:
            self.fs.inject(Fault("fsync", path=target if target != "checkpoint" else "/t-0/"))

    def crash_and_recover(self) -> None:
        self.crashes += 1
        self.fs.faults.clear()
        self.fs.crash()
        self.pending.clear()  # the clients start over from what the broker kept
        self.open()
        plog = self.plog
        self.journal.forget_from(plog.log_end_offset)
        # What survived decides where the producers are: a batch that was never acked may
        # be there, and then the producer must not send that sequence again.
        state = plog.producer_state.producers
        for pid in (IDEMPOTENT, TRANSACTIONAL):
            entry = state.get(pid)
            self.next_seq[pid] = entry.last_seq + 1 if entry is not None else 0
        self.txn_open = TRANSACTIONAL in plog.producer_state.ongoing
        if self.marker_due is not None and not self.txn_open:
            self.marker_due = None  # the coordinator's marker made it before the crash
        if self.last_acked is not None and self.last_acked[1] >= plog.log_end_offset:
            self.last_acked = None  # appended, never acknowledged, lost in the crash
        self.check()

    def step(self) -> None:
        self.maybe_inject()
        action = self.rng.random()
        try:
            if action < 0.4:
                self.send(IDEMPOTENT)
            elif action < 0.65:
                self.send(TRANSACTIONAL)
            elif action < 0.75:
                self.end_txn()
            elif action < 0.95:
                self.flush()
            else:
                self.checkpoint()
        except LogOffline:
            self.offline_seen += 1
            self.crash_and_recover()
            return
        if self.rng.random() < 0.03:
            self.crash_and_recover()

    # ---- the checks ------------------------------------------------------------------

    def check(self) -> None:
        plog = self.plog
        check_log(plog, self.journal)
        assert plog.producer_state.producers == full_replay(self.fs)
        check_aborted_index(plog)
        if self.last_acked is not None:
            data, offset = self.last_acked
            again = plog.append_batches(data, validate_produced_batches(data, 1 << 20))
            assert again.duplicate and again.first_offset == offset


def full_replay(fs: SimFileSystem) -> dict[int, object]:
    clone = copy.deepcopy(fs)
    for name in clone.listdir(DIR):
        if name.endswith(".snapshot"):
            clone.remove(f"{DIR}/{name}")
    plog, _ = open_partition(clone, DIR, "t", 0, factory({}), ManualClock(), 0, False)
    return dict(plog.producer_state.producers)


def check_aborted_index(plog: PartitionLog) -> None:
    """The aborted transactions a read_committed fetch is told about are exactly those an
    ABORT marker in the log ended; the LSO is the open transaction's first offset."""
    open_first: int | None = None
    aborted: list[tuple[int, int]] = []
    for segment in plog.segments:
        raw = segment.read_bytes(0, segment.size)
        found, _ = scan_batches(raw)
        for b in found:
            h = b.header
            if h.producer_id != TRANSACTIONAL:
                continue
            if h.is_control:
                kind, _ = parse_control_record(raw[b.position : b.position + h.size])
                if open_first is not None and kind == ControlType.ABORT:
                    aborted.append((TRANSACTIONAL, open_first))
                open_first = None
            elif open_first is None:
                open_first = h.base_offset
    assert plog.aborted_between(0, plog.log_end_offset) == aborted
    expected_lso = plog.high_watermark if open_first is None else open_first
    assert plog.last_stable_offset == min(expected_lso, plog.high_watermark)


@pytest.mark.parametrize("seed", SEEDS)
def test_random_disk_faults_never_lose_or_tear_what_was_acknowledged(seed: int) -> None:
    world = World(seed)
    world.open()
    for _ in range(STEPS):
        world.step()
    world.crash_and_recover()
    assert world.faults > 0
