"""Crash at every step around producer-state snapshots; recovery must rebuild the same state.

Each scenario runs once without a crash to count the mutating file-system steps in its
window, then once per step with `SimFileSystem(crash_at_step=...)` (and once past the end,
crashing after the window). The windows cover a segment roll with its snapshot, a clean
shutdown (flush, checkpoint, a snapshot per partition, the clean-shutdown marker), and
appends after the newest snapshot (so recovery replays a tail, in the snapshot's segment or
after it). With `torn`, a crash while writing a snapshot leaves a durable prefix of it, as a
writer that is not atomic would (Kafka's is not): recovery must reject it.

After each crash a new LogManager loads the directory, and for the partition:

- the log passes the storage checks (flushed batches survive, whole batches only);
- the producer state equals a replay of the whole log (on a copy of the disk with every
  snapshot deleted) and the last five surviving batches of each producer;
- a retry of each producer's last acknowledged (flushed) batch, and of every later batch
  that survived, is answered as a duplicate with its original offsets, appending nothing;
- the producers carry on in sequence, and all of it survives a clean restart.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import pytest

from onceflow.clock import ManualClock
from onceflow.records.batch import validate_produced_batches
from onceflow.records.builder import build_batch
from onceflow.storage.fs import SimFileSystem, SimulatedCrash
from onceflow.storage.log_manager import LogManager
from onceflow.storage.partition_log import LogConfig, PartitionLog
from onceflow.storage.producer_state import ProducerEntry, encode
from onceflow.storage.recovery import open_partition
from tests.simulation.storage_checks import Journal, check_log

ROOT = "/data"
DIR = f"{ROOT}/t-0"
SEEDS = (0, 1, 2)  # each tears unsynced tails (and torn snapshots) at different points
PIDS = (1, 2)


def factory(overrides: Mapping[str, str]) -> LogConfig:
    return LogConfig(
        segment_bytes=int(overrides.get("segment.bytes", 1 << 20)), index_interval_bytes=100
    )


@dataclass
class Sent:
    pid: int
    epoch: int
    seq: int
    count: int
    data: bytes  # as the client sent it: a retry is these bytes again
    base: int

    @property
    def next(self) -> int:
        return self.base + self.count


@dataclass
class World:
    seed: int
    crash_after: int | None = None
    torn: bool = False
    fs: SimFileSystem = field(init=False)
    clock: ManualClock = field(default_factory=ManualClock)
    journal: Journal = field(default_factory=Journal)
    sent: list[Sent] = field(default_factory=list)
    epochs: dict[int, int] = field(default_factory=lambda: dict.fromkeys(PIDS, 0))
    acked: int = 0  # every offset below this was flushed
    armed_at: int = 0
    lm: LogManager | None = None

    def __post_init__(self) -> None:
        self.fs = SimFileSystem(seed=self.seed)

    def arm(self) -> None:
        self.armed_at = self.fs.steps
        if self.crash_after is not None:
            self.fs.crash_at_step = self.fs.steps + self.crash_after

    def manager(self) -> LogManager:
        self.lm = LogManager(self.fs, ROOT, self.clock, factory)
        self.lm.load()
        return self.lm

    @property
    def plog(self) -> PartitionLog:
        assert self.lm is not None
        plog = self.lm.get("t", 0)
        assert plog is not None
        return plog

    def next_seq(self, pid: int) -> int:
        mine = [s for s in self.sent if s.pid == pid and s.epoch == self.epochs[pid]]
        return mine[-1].seq + mine[-1].count if mine else 0

    def send(self, pid: int, count: int = 1) -> None:
        """The producer's next batch; pid 0 is a plain (non-idempotent) writer."""
        self.clock.advance(7)
        plog = self.plog
        if pid == 0:
            data = build_batch([(b"k", b"plain", ())], timestamp_ms=self.clock.now_ms())
        else:
            data = build_batch(
                [(None, b"%d-%d" % (pid, i), ()) for i in range(count)],
                timestamp_ms=self.clock.now_ms(),
                producer_id=pid,
                producer_epoch=self.epochs[pid],
                base_sequence=self.next_seq(pid),
            )
        headers = validate_produced_batches(data, 1 << 20)
        self.journal.intend(plog, data, headers)
        if pid:
            self.sent.append(
                Sent(pid, self.epochs[pid], self.next_seq(pid), count, data, plog.log_end_offset)
            )
        result = plog.append_batches(data, headers)
        assert not result.duplicate

    def bump(self, pid: int) -> None:
        self.epochs[pid] += 1

    def flush(self) -> None:
        """A group commit's flush: record bytes only, as the broker does it."""
        plan = self.plog.prepare_flush()
        if plan is not None:
            plan.execute()
            self.plog.complete_flush(plan)
        self.acked = self.journal.acked = self.plog.flushed_offset


Scenario = Callable[[World], None]


def setup(world: World, segment_bytes: int = 1 << 20) -> None:
    lm = world.manager()
    lm.create_topic("t", 1, {"segment.bytes": str(segment_bytes)})


# ---- scenarios ---------------------------------------------------------------------------
# Between two flushes a producer sends at most four batches, so its last acknowledged
# batch is always among the last five a retry is matched against.


def roll_with_snapshot(world: World) -> None:
    setup(world, segment_bytes=400)
    world.send(1, 2)
    world.send(2)
    world.send(1)
    world.flush()
    world.arm()
    world.send(1, 2)
    world.send(2, 3)
    world.plog.roll()  # an explicit roll with unflushed data: fsync, new segment, snapshot
    world.send(1)
    world.flush()
    for pid, count in ((2, 1), (0, 1), (1, 3), (2, 2), (1, 1)):  # rolls on size
        world.send(pid, count)
    world.flush()
    world.bump(2)
    world.send(2, 2)  # the new epoch starts at 0 and reaches the next snapshot
    world.plog.roll()
    world.send(1)
    world.flush()
    world.send(2)


def clean_shutdown(world: World) -> None:
    setup(world, segment_bytes=600)
    for pid, count in ((1, 2), (2, 1), (1, 1), (2, 3), (1, 1)):
        world.send(pid, count)
    world.flush()
    for pid, count in ((2, 1), (1, 3), (2, 1), (1, 1)):
        world.send(pid, count)
    world.flush()
    world.send(1)
    world.send(2, 2)  # unflushed: shutdown flushes it
    world.arm()
    assert world.lm is not None
    world.lm.shutdown()
    world.acked = world.journal.acked = world.plog.log_end_offset


def appends_after_a_roll_snapshot(world: World) -> None:
    setup(world)
    for pid, count in ((1, 2), (2, 1), (1, 1)):
        world.send(pid, count)
    world.plog.roll()
    world.flush()
    world.arm()
    world.send(2, 2)
    world.send(1)
    world.send(0)
    world.flush()
    world.bump(1)
    world.send(1, 3)
    world.send(2)
    world.flush()
    world.send(1)
    world.send(2, 2)


def appends_after_a_shutdown_snapshot(world: World) -> None:
    # The shutdown snapshot sits in the middle of the active segment: recovery replays
    # from that position, not from the segment's start.
    setup(world)
    for pid, count in ((1, 2), (2, 1), (1, 1), (2, 1)):
        world.send(pid, count)
    world.flush()
    assert world.lm is not None
    world.lm.shutdown()
    world.manager()
    world.arm()
    world.send(2, 2)
    world.send(1)
    world.flush()
    world.send(1, 2)
    world.send(2)
    world.flush()
    world.send(2)
    world.send(1)


SCENARIOS: dict[str, Scenario] = {
    "roll with snapshot": roll_with_snapshot,
    "clean shutdown": clean_shutdown,
    "appends after a roll snapshot": appends_after_a_roll_snapshot,
    "appends after a shutdown snapshot": appends_after_a_shutdown_snapshot,
}


# ---- crash, recover, check ---------------------------------------------------------------


def count_steps(scenario: Scenario) -> int:
    world = World(seed=0)
    scenario(world)
    return world.fs.steps - world.armed_at


def crash_and_recover(scenario: Scenario, seed: int, step: int, torn: bool) -> World:
    world = World(seed=seed, crash_after=step, torn=torn)
    crashed_writing: str | None = None
    state: dict[int, ProducerEntry] = {}
    try:
        scenario(world)
    except SimulatedCrash as exc:
        what = str(exc)
        if what.startswith("write ") and what.endswith(".snapshot"):
            # A snapshot's content is the state at the moment it is taken.
            crashed_writing = what.removeprefix("write ")
            state = {pid: e.copy() for pid, e in world.plog.producer_state.producers.items()}
    world.fs.crash()
    if torn and crashed_writing is not None:
        data = encode(state)
        cut = world.fs.steps % len(data)  # deterministic per step; never the whole file
        world.fs.write_file_atomic(crashed_writing, data[:cut])
    return world


def full_replay(fs: SimFileSystem) -> dict[int, ProducerEntry]:
    """The producer state of the whole log: a copy of the disk without its snapshots."""
    clone = copy.deepcopy(fs)
    for name in clone.listdir(DIR):
        if name.endswith(".snapshot"):
            clone.remove(f"{DIR}/{name}")
    plog, _ = open_partition(clone, DIR, "t", 0, factory({}), ManualClock(), 0, False)
    return plog.producer_state.producers


def check_producer_state(world: World) -> None:
    plog = world.plog
    end = plog.log_end_offset
    survivors = [s for s in world.sent if s.base < end]
    assert all(s.next <= end for s in survivors), "the log ends inside a batch"
    state = plog.producer_state.producers
    assert state == full_replay(world.fs), "snapshot + tail differs from a whole-log replay"
    assert sorted(state) == sorted({s.pid for s in survivors})
    for pid, entry in state.items():
        mine = [s for s in survivors if s.pid == pid]
        recent = [s for s in mine if s.epoch == mine[-1].epoch][-5:]
        assert entry.epoch == mine[-1].epoch
        assert [(b.first_seq, b.last_offset) for b in entry.batches] == [
            (s.seq, s.next - 1) for s in recent
        ]
        acked = [s for s in mine if s.next <= world.acked]
        if acked and acked[-1].epoch == entry.epoch:
            assert acked[-1] in recent, "scenario sends too much between flushes"
            first = recent.index(acked[-1])
        else:
            first = 0
        for s in recent[first:]:
            result = plog.append_batches(s.data, validate_produced_batches(s.data, 1 << 20))
            assert result.duplicate, f"retry of {pid}:{s.seq} was appended again"
            assert (result.first_offset, result.last_offset) == (s.base, s.next - 1)
            assert plog.log_end_offset == end
    # The survivors are the truth now; the producers carry on after them.
    world.sent = survivors
    for pid in state:
        world.epochs[pid] = state[pid].epoch
        world.send(pid, 2)
    world.flush()


def recover_and_check(world: World) -> None:
    lm = world.manager()
    plog = world.plog
    check_log(plog, world.journal)
    world.journal.forget_from(plog.log_end_offset)
    assert plog.log_end_offset >= world.acked, "acknowledged batches were lost"
    check_producer_state(world)
    # A clean restart after recovery keeps the state: it loads the shutdown snapshot.
    before = {pid: e.copy() for pid, e in world.plog.producer_state.producers.items()}
    lm.shutdown()
    world.manager()
    assert world.plog.producer_state.producers == before
    check_producer_state(world)


@pytest.mark.parametrize("torn", [False, True], ids=["atomic", "torn"])
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_crash_at_every_step(name: str, torn: bool) -> None:
    scenario = SCENARIOS[name]
    steps = count_steps(scenario)
    assert steps > 0
    for seed in SEEDS:
        for step in range(1, steps + 2):  # steps + 1: the window completes, then a crash
            world = crash_and_recover(scenario, seed, step, torn)
            try:
                recover_and_check(world)
            except AssertionError as exc:
                raise AssertionError(f"{name}, seed {seed}, crash at step {step}: {exc}") from exc


def test_a_torn_snapshot_is_really_written_and_skipped() -> None:
    """The torn variant does reach a snapshot write, and leaves a file recovery rejects."""
    steps = count_steps(roll_with_snapshot)
    torn_seen = 0
    for step in range(1, steps + 1):
        world = crash_and_recover(roll_with_snapshot, 0, step, torn=True)
        names = [n for n in world.fs.listdir(DIR) if n.endswith(".snapshot")]
        bad = [n for n in names if not _readable(world.fs.read_file(f"{DIR}/{n}"))]
        torn_seen += len(bad)
        world.manager()
        left = [n for n in world.fs.listdir(DIR) if n.endswith(".snapshot")]
        assert not set(bad) & set(left), "a torn snapshot survived recovery"
    assert torn_seen >= 2


def _readable(data: bytes) -> bool:
    from onceflow.storage.producer_state import decode

    with contextlib.suppress(ValueError):
        decode(data)
        return True
    return False
