"""Crash at every step of a storage operation, recover from the files alone, check invariants.

Each scenario runs once without a crash to count its mutating file-system steps, then once
per step with `SimFileSystem(crash_at_step=...)`: the step raises SimulatedCrash before it
happens, `crash()` drops every unsynced byte (tearing tails at a seeded point) and every
unsynced directory entry, and a new LogManager loads the directory. `check_log` then checks
the recovery guarantees against a journal of what the scenario appended and had acked:

- the log opens, and every batch flushed before the crash is present byte for byte;
- offsets are contiguous from the log start, across segments;
- no partial or corrupt batch is left in a segment, so none can be read;
- the indexes in memory and on disk equal a rebuild from the .log bytes alone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import pytest

from onceflow.clock import ManualClock
from onceflow.records.batch import validate_produced_batches
from onceflow.records.builder import build_batch
from onceflow.storage.fs import SimFileSystem, SimulatedCrash
from onceflow.storage.log_manager import LogManager
from onceflow.storage.partition_log import LogConfig, PartitionLog
from tests.simulation.storage_checks import Journal, check_log

SEEDS = tuple(range(8))  # each seed tears unsynced tails at different points
ROOT = "/data"
MINUTE = 60_000
HOUR = 60 * MINUTE


def factory(overrides: Mapping[str, str]) -> LogConfig:
    return LogConfig(
        segment_bytes=int(overrides.get("segment.bytes", 1 << 20)),
        retention_ms=int(overrides.get("retention.ms", -1)),
        index_interval_bytes=int(overrides.get("index.interval.bytes", 100)),
    )


@dataclass
class World:
    """One simulated machine: a disk, a clock, and what the test knows it has done."""

    seed: int
    crash_after: int | None = None  # crash at this step after `arm()`; None: never
    fs: SimFileSystem = field(init=False)
    clock: ManualClock = field(default_factory=ManualClock)
    journals: dict[tuple[str, int], Journal] = field(default_factory=dict)
    must_exist: set[str] = field(default_factory=set)
    armed_at: int = 0
    retention_ceiling: int = 0
    last_manager: LogManager | None = None

    def __post_init__(self) -> None:
        self.fs = SimFileSystem(seed=self.seed)

    def arm(self) -> None:
        """Start counting steps: the crash window opens here."""
        self.armed_at = self.fs.steps
        if self.crash_after is not None:
            self.fs.crash_at_step = self.fs.steps + self.crash_after

    def manager(self) -> LogManager:
        self.last_manager = LogManager(self.fs, ROOT, self.clock, factory)
        return self.last_manager

    def created(self, lm: LogManager, topic: str) -> None:
        self.must_exist.add(topic)
        for p in range(lm.topics[topic].partitions):
            self.journals[(topic, p)] = Journal()

    def append(self, lm: LogManager, topic: str, partition: int = 0, records: int = 1) -> None:
        plog = _log(lm, topic, partition)
        data = build_batch(
            [(b"key-%d" % i, b"value-%d" % plog.log_end_offset * 3, []) for i in range(records)],
            timestamp_ms=self.clock.now_ms(),
        )
        headers = validate_produced_batches(data, 1 << 20)
        self.journals[(topic, partition)].intend(plog, data, headers)
        plog.append_batches(data, headers)

    def flush(self, lm: LogManager, topic: str, partition: int = 0) -> None:
        """A group commit's flush, as the broker does it: record bytes only, indexes left
        unsynced (recovery must rebuild them)."""
        plog = _log(lm, topic, partition)
        plan = plog.prepare_flush()
        if plan is not None:
            plan.execute()
            plog.complete_flush(plan)
        self.journals[(topic, partition)].acked = plog.flushed_offset

    def flush_all(self, lm: LogManager) -> None:
        lm.flush_all()
        for (topic, partition), journal in self.journals.items():
            journal.acked = _log(lm, topic, partition).flushed_offset


def _log(lm: LogManager, topic: str, partition: int) -> PartitionLog:
    plog = lm.get(topic, partition)
    assert plog is not None, f"{topic}-{partition} is not open"
    return plog


Scenario = Callable[[World], None]


def count_steps(scenario: Scenario) -> int:
    world = World(seed=0)
    scenario(world)
    return world.fs.steps - world.armed_at


def crash_and_recover(scenario: Scenario, seed: int, step: int, **extra: int) -> World:
    """Run `scenario` until it crashes at `step` of its window, then lose what was unsynced."""
    world = World(seed=seed, crash_after=step)
    for key, value in extra.items():
        setattr(world, key, value)
    with contextlib.suppress(SimulatedCrash):
        scenario(world)
    world.fs.crash()
    return world


def reopen_and_check(world: World) -> LogManager:
    """Load the directory as a restarted broker would and check every partition."""
    lm = world.manager()
    lm.load()
    check_manager(world, lm)
    # The recovered log is usable: appends continue the offsets and survive a clean restart.
    for topic, partition in world.journals:
        if lm.get(topic, partition) is not None:
            world.append(lm, topic, partition)
            world.flush(lm, topic, partition)
    check_manager(world, lm)
    lm.shutdown()
    again = world.manager()
    again.load()
    assert again.clean_start
    check_manager(world, again)
    return again


def check_manager(world: World, lm: LogManager) -> None:
    assert world.must_exist <= set(lm.topics), "a created topic was lost"
    for name, info in lm.topics.items():
        for p in range(info.partitions):
            plog = _log(lm, name, p)
            journal = world.journals.get((name, p))
            if journal is None:
                # Created in the crash window, before create_topic returned: still empty.
                journal = world.journals[(name, p)] = Journal()
            check_log(plog, journal)
    for journal_key in world.journals:
        if journal_key[0] in lm.topics:
            journal = world.journals[journal_key]
            journal.forget_from(_log(lm, *journal_key).log_end_offset)


# ---- scenarios ---------------------------------------------------------------------------


def appends_and_flushes(world: World) -> None:
    lm = world.manager()
    lm.load()
    lm.create_topic("t", 1)
    world.created(lm, "t")
    world.arm()
    for records in (1, 3, 2):
        world.append(lm, "t", records=records)
    world.flush(lm, "t")
    world.append(lm, "t", records=5)
    world.append(lm, "t")
    lm.checkpoint_recovery_points()
    world.append(lm, "t", records=2)
    world.flush(lm, "t")
    for records in (1, 4, 1, 2):
        world.append(lm, "t", records=records)
    world.flush(lm, "t")
    world.append(lm, "t", records=3)


def segment_rolls(world: World) -> None:
    lm = world.manager()
    lm.load()
    lm.create_topic("t", 1, {"segment.bytes": "450"})
    world.created(lm, "t")
    world.arm()
    for _ in range(3):
        world.append(lm, "t")
    world.flush(lm, "t")
    for records in (2, 1, 1, 3):  # rolls on size, with unflushed data on both sides
        world.append(lm, "t", records=records)
    _log(lm, "t", 0).roll()  # an explicit roll with unflushed data in the old segment
    world.append(lm, "t")
    lm.checkpoint_recovery_points()
    world.flush(lm, "t")
    lm.checkpoint_recovery_points()
    for _ in range(5):
        world.append(lm, "t")
    world.flush(lm, "t")
    world.append(lm, "t")


def retention_deletes(world: World) -> None:
    lm = world.manager()
    lm.load()
    lm.create_topic("t", 1, {"segment.bytes": "450", "retention.ms": str(HOUR)})
    world.created(lm, "t")
    for _ in range(16):
        world.append(lm, "t")
        world.clock.advance(10 * MINUTE)
    world.flush(lm, "t")
    lm.checkpoint_recovery_points()
    world.append(lm, "t")  # unflushed: retention must leave it alone
    world.arm()
    world.journals[("t", 0)].max_log_start = world.retention_ceiling
    lm.enforce_retention()
    world.append(lm, "t")
    world.flush(lm, "t")
    lm.checkpoint_recovery_points()
    world.append(lm, "t")


def manager_lifecycle(world: World) -> None:
    world.arm()  # from the very first step: load, create, append, shut down
    lm = world.manager()
    lm.load()
    lm.create_topic("a", 2)
    world.created(lm, "a")
    world.append(lm, "a", 0, records=2)
    world.append(lm, "a", 1)
    world.flush_all(lm)
    lm.create_topic("b", 1, {"segment.bytes": "300"})
    world.created(lm, "b")
    for _ in range(5):
        world.append(lm, "b")
    world.append(lm, "a", 0)
    world.flush_all(lm)
    lm.checkpoint_recovery_points()
    world.append(lm, "a", 1, records=3)
    lm.shutdown()
    for (topic, partition), journal in world.journals.items():
        journal.acked = _log(lm, topic, partition).log_end_offset


def delete_and_recreate(world: World) -> None:
    lm = world.manager()
    lm.load()
    lm.create_topic("t", 1, {"segment.bytes": "300"})
    world.created(lm, "t")
    for _ in range(12):
        world.append(lm, "t")
    world.flush(lm, "t")
    lm.shutdown()  # checkpoints a recovery point of 12 for t-0
    lm = world.manager()
    lm.load()
    world.arm()
    lm.delete_topic("t")
    world.must_exist.discard("t")
    world.journals[("t", 0)] = Journal()  # if t exists again, it must be the new one
    lm.create_topic("t", 1, {"segment.bytes": "300"})
    world.created(lm, "t")
    for _ in range(4):
        world.append(lm, "t")
    world.flush(lm, "t")
    for _ in range(6):  # unflushed, across rolls: must be scanned, not trusted
        world.append(lm, "t")


SCENARIOS: dict[str, Scenario] = {
    "appends_and_flushes": appends_and_flushes,
    "segment_rolls": segment_rolls,
    "retention_deletes": retention_deletes,
    "manager_lifecycle": manager_lifecycle,
    "delete_and_recreate": delete_and_recreate,
}


def _start_after_clean_run() -> int:
    """Where retention moves the log start when nothing crashes."""
    world = World(seed=0, retention_ceiling=1 << 62)
    retention_deletes(world)
    assert world.last_manager is not None
    return _log(world.last_manager, "t", 0).log_start_offset


def _check_scenario(name: str, seed: int) -> int:
    scenario = SCENARIOS[name]
    extra: dict[str, int] = {}
    if name == "retention_deletes":
        extra["retention_ceiling"] = _start_after_clean_run()
        assert extra["retention_ceiling"] > 0, "the scenario must delete something"
    steps = count_steps(scenario)
    assert steps > 5
    for step in range(1, steps + 2):  # the last one never fires: crash after the scenario
        world = crash_and_recover(scenario, seed, step, **extra)
        try:
            reopen_and_check(world)
        except AssertionError as exc:
            raise AssertionError(f"{name}, seed {seed}, crash at step {step}: {exc}") from exc
    return steps


@pytest.mark.parametrize("seed", SEEDS)
def test_crash_during_appends_and_flushes_keeps_every_flushed_batch(seed: int) -> None:
    _check_scenario("appends_and_flushes", seed)


@pytest.mark.parametrize("seed", SEEDS)
def test_crash_during_a_segment_roll_leaves_no_offset_gap(seed: int) -> None:
    _check_scenario("segment_rolls", seed)


@pytest.mark.parametrize("seed", SEEDS)
def test_crash_during_retention_never_loses_retained_or_unflushed_data(seed: int) -> None:
    _check_scenario("retention_deletes", seed)


@pytest.mark.parametrize("seed", SEEDS)
def test_crash_during_topic_creation_and_clean_shutdown_recovers_every_topic(seed: int) -> None:
    _check_scenario("manager_lifecycle", seed)


@pytest.mark.parametrize("seed", SEEDS)
def test_crash_after_delete_and_recreate_never_trusts_the_old_recovery_point(seed: int) -> None:
    _check_scenario("delete_and_recreate", seed)


@pytest.mark.parametrize("seed", SEEDS[:2])
@pytest.mark.parametrize("name", ["segment_rolls", "manager_lifecycle"])
def test_crash_during_recovery_then_recovering_again_is_still_correct(name: str, seed: int) -> None:
    """Recovery writes too (truncations, index rebuilds, its own flush); crash there as well.

    manager_lifecycle ends with a clean shutdown, so this also crashes a clean start that
    has to rebuild indexes whose directory entries were never synced.
    """
    scenario = SCENARIOS[name]
    steps = count_steps(scenario)
    for step in range(1, steps + 2):
        probe = crash_and_recover(scenario, seed, step)
        before = probe.fs.steps
        probe.manager().load()
        recovery_steps = probe.fs.steps - before
        for again in range(1, recovery_steps + 1):
            world = crash_and_recover(scenario, seed, step)
            world.fs.crash_at_step = world.fs.steps + again
            with contextlib.suppress(SimulatedCrash):
                world.manager().load()
            world.fs.crash()
            try:
                reopen_and_check(world)
            except AssertionError as exc:
                raise AssertionError(
                    f"{name}: crash at step {step}, then at recovery step {again}: {exc}"
                ) from exc
