"""The group coordinator loads and unloads single `__consumer_offsets` partitions at run time.

On a cluster the coordinator of a group is the broker leading the group's partition, and
that leadership moves: `load_partition` replays one partition (COORDINATOR_LOAD_IN_PROGRESS
meanwhile), `unload` forgets its groups (NOT_COORDINATOR from then on). Two coordinators on
one InMemoryOffsetsLog stand for two brokers that lead the same partition in turn.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, TypeVar

import pytest

from onceflow.clock import ManualClock
from onceflow.coordinator.group import (
    GroupCoordinator,
    GroupCoordinatorConfig,
    InMemoryOffsetsLog,
    OffsetCommitEntry,
    TopicPartition,
)
from onceflow.coordinator.group.log import LogEntry
from onceflow.coordinator.group.results import JoinResult, SyncResult
from onceflow.errors import ErrorCode
from onceflow.protocol.txn_support import TxnSupport

T = TypeVar("T")
TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
PARTITIONS = 3
PID = 7000
EPOCH = 0
MINUTE = 60_000


def run(make_coro: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(make_coro())


def config(**overrides: Any) -> GroupCoordinatorConfig:
    settings: dict[str, Any] = {
        "offsets_topic_num_partitions": PARTITIONS,
        "group_initial_rebalance_delay_ms": 0,
    }
    settings.update(overrides)
    return GroupCoordinatorConfig(**settings)


def broker(
    log: InMemoryOffsetsLog, clock: ManualClock | None = None, **overrides: Any
) -> GroupCoordinator:
    """A coordinator as a broker of a cluster makes it: nothing served until loaded."""
    return GroupCoordinator(log, clock or ManualClock(), config(**overrides), serve_all=False)


def groups_in(partition: int, count: int) -> list[str]:
    """Group ids whose __consumer_offsets partition is `partition`."""
    probe = GroupCoordinator(InMemoryOffsetsLog(), ManualClock(), config())
    found = [f"g{i}" for i in range(200) if probe.partition_for(f"g{i}") == partition]
    return found[:count]


G, H = groups_in(0, 2)
(ELSEWHERE,) = groups_in(1, 1)


def subscription(*topics: str) -> bytes:
    out = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        out += struct.pack(">h", len(topic)) + topic.encode()
    return out + struct.pack(">i", -1)


async def commit(
    coord: GroupCoordinator, group: str, offsets: dict[TopicPartition, int]
) -> dict[TopicPartition, ErrorCode]:
    entries = {tp: OffsetCommitEntry(offset) for tp, offset in offsets.items()}
    return await coord.commit_offsets(group, "", -1, entries)


async def txn_commit(
    coord: GroupCoordinator, group: str, offsets: dict[TopicPartition, int]
) -> dict[TopicPartition, ErrorCode]:
    entries = {tp: OffsetCommitEntry(offset) for tp, offset in offsets.items()}
    return await coord.txn_offset_commit("tx", group, PID, EPOCH, "", -1, None, entries)


def offsets_of(coord: GroupCoordinator, group: str) -> dict[TopicPartition, int]:
    fetched = coord.fetch_offsets(group, None)
    assert fetched.error is ErrorCode.none
    return {tp: f.offset for tp, f in fetched.partitions.items()}


def join(
    coord: GroupCoordinator, group: str, member_id: str = ""
) -> Coroutine[Any, Any, JoinResult]:
    return coord.join_group(
        group,
        member_id,
        protocol_type="consumer",
        protocols=[("range", subscription("t"))],
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
    )


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


class GatedLog(InMemoryOffsetsLog):
    """Reads wait for `gate` (a broker catching up on the partition, say), and see the log
    as it was when the read began; appends wait for `append_gate` when it is set."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.gate.set()
        self.append_gate: asyncio.Event | None = None
        self.reads: list[int] = []

    async def append(
        self,
        partition: int,
        batch: bytes,
        transactional_id: str | None = None,
        support: TxnSupport = TxnSupport.DEFAULT_ERROR,
    ) -> int:
        if self.append_gate is not None:
            await self.append_gate.wait()
        return await super().append(partition, batch, transactional_id, support)

    def read(self, partition: int) -> AsyncIterator[LogEntry]:  # type: ignore[override]
        self.reads.append(partition)
        snapshot = list(super().read(partition))

        async def entries() -> AsyncIterator[LogEntry]:
            await self.gate.wait()
            for entry in snapshot:
                yield entry

        return entries()


# ---------------------------------------------------------------- serving one partition


def test_nothing_is_served_until_a_partition_is_loaded() -> None:
    async def scenario() -> None:
        coord = broker(InMemoryOffsetsLog())
        assert coord.loaded_partitions == frozenset() and not coord.owns(G)
        assert await commit(coord, G, {TP0: 1}) == {TP0: ErrorCode.not_coordinator}
        assert coord.fetch_offsets(G, None).error is ErrorCode.not_coordinator
        assert coord.heartbeat(G, "m", 1) is ErrorCode.not_coordinator
        assert (await join(coord, G)).error is ErrorCode.not_coordinator
        await coord.load_partition(0)
        assert coord.loaded_partitions == frozenset({0})
        assert coord.owns(G) and not coord.owns(ELSEWHERE)
        assert coord.coordinator_error(G) is ErrorCode.none
        assert coord.coordinator_error(ELSEWHERE) is ErrorCode.not_coordinator
        assert await commit(coord, G, {TP0: 1}) == {TP0: ErrorCode.none}
        assert await commit(coord, ELSEWHERE, {TP0: 1}) == {TP0: ErrorCode.not_coordinator}

    run(scenario)


def test_a_single_broker_still_serves_everything_after_load() -> None:
    async def scenario() -> None:
        log = InMemoryOffsetsLog()
        coord = GroupCoordinator(log, ManualClock(), config())
        assert coord.coordinator_error(G) is ErrorCode.coordinator_load_in_progress
        assert await commit(coord, G, {TP0: 1}) == {TP0: ErrorCode.coordinator_load_in_progress}
        await coord.load()
        assert coord.loaded_partitions == frozenset(range(PARTITIONS))
        assert coord.loading_partitions == frozenset()
        assert await commit(coord, G, {TP0: 1}) == {TP0: ErrorCode.none}
        assert await commit(coord, ELSEWHERE, {TP0: 2}) == {TP0: ErrorCode.none}
        # A storage fault unloads one partition: the others are still served.
        coord.unload(0)
        assert coord.coordinator_error(G) is ErrorCode.not_coordinator
        assert offsets_of(coord, ELSEWHERE) == {TP0: 2}

    run(scenario)


def test_the_first_load_partition_leaves_the_single_broker_initial_state() -> None:
    """A broker that finds out at start that it is one of a cluster: partitions it does not
    lead answer NOT_COORDINATOR, not COORDINATOR_LOAD_IN_PROGRESS for ever."""

    async def scenario() -> None:
        coord = GroupCoordinator(InMemoryOffsetsLog(), ManualClock(), config())
        await coord.load_partition(0)
        assert coord.coordinator_error(G) is ErrorCode.none
        assert coord.coordinator_error(ELSEWHERE) is ErrorCode.not_coordinator
        assert coord.list_groups()[0] is ErrorCode.none

    run(scenario)


# ---------------------------------------------------------------- unloading


def test_unload_forgets_groups_answers_parked_requests_and_stops_timers() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        log = InMemoryOffsetsLog()
        coord = broker(log, clock)
        await coord.load_partition(0)
        await coord.load_partition(1)
        # G: Stable with member a; b's join is parked until a rejoins.
        a = await join(coord, G)
        await coord.sync_group(G, a.generation_id, a.member_id, assignments={})
        parked_join = asyncio.ensure_future(join(coord, G))
        # H: a rebalance with two members; the follower's sync waits for the leader.
        first = await join(coord, H)
        await coord.sync_group(H, first.generation_id, first.member_id, assignments={})
        second_join = asyncio.ensure_future(join(coord, H))
        await settle()
        rejoined = await join(coord, H, first.member_id)
        second = await second_join
        follower = second if rejoined.leader_id != second.member_id else rejoined
        parked_sync = asyncio.ensure_future(
            coord.sync_group(H, follower.generation_id, follower.member_id)
        )
        await settle()
        assert not parked_join.done() and not parked_sync.done()
        await commit(coord, G, {TP0: 5})
        await commit(coord, ELSEWHERE, {TP0: 6})

        coord.unload(0)
        assert (await asyncio.wait_for(parked_join, 1)).error is ErrorCode.not_coordinator
        assert await asyncio.wait_for(parked_sync, 1) == SyncResult(ErrorCode.not_coordinator)
        assert coord.loaded_partitions == frozenset({1})
        assert coord.group(G) is None and coord.group(H) is None
        assert coord.fetch_offsets(G, None).error is ErrorCode.not_coordinator
        assert coord.heartbeat(G, a.member_id, a.generation_id) is ErrorCode.not_coordinator
        assert coord.describe_group(G).error is ErrorCode.not_coordinator
        assert (await join(coord, G)).error is ErrorCode.not_coordinator
        assert [g.group_id for g in coord.list_groups()[1]] == [ELSEWHERE]
        assert offsets_of(coord, ELSEWHERE) == {TP0: 6}
        # Timers stop: expired sessions would have emptied the groups and written them.
        appends = len(log.appends)
        clock.advance(10 * MINUTE)
        await coord.poll()
        assert len(log.appends) == appends

    run(scenario)


def test_offsets_written_by_the_next_leader_are_seen_after_a_reload() -> None:
    async def scenario() -> None:
        log = InMemoryOffsetsLog()
        here, there = broker(log), broker(log)
        await here.load_partition(0)
        assert await commit(here, G, {TP0: 5}) == {TP0: ErrorCode.none}
        here.unload(0)
        assert here.fetch_offsets(G, None).error is ErrorCode.not_coordinator
        # The other broker leads partition 0 meanwhile: it sees 5 and commits more.
        await there.load_partition(0)
        assert offsets_of(there, G) == {TP0: 5}
        assert await commit(there, G, {TP0: 9, TP1: 3}) == {
            TP0: ErrorCode.none,
            TP1: ErrorCode.none,
        }
        await txn_commit(there, H, {TP0: 40})
        there.unload(0)
        # Back here: everything from the log, nothing stale.
        await here.load_partition(0)
        assert offsets_of(here, G) == {TP0: 9, TP1: 3}
        pending = here.fetch_offsets(H, [TP0], require_stable=True).partitions[TP0]
        assert pending.error is ErrorCode.unstable_offset_commit
        log.write_marker(0, PID, commit=True)
        here.complete_txn(PID, True, 0)
        assert offsets_of(here, H) == {TP0: 40}

    run(scenario)


def test_a_newer_epoch_reloads_and_an_older_one_is_ignored() -> None:
    """A broker that missed its unload (it was paused while leadership went elsewhere and
    came back) must not keep serving what it had in memory."""

    async def scenario() -> None:
        log = InMemoryOffsetsLog()
        here, there = broker(log), broker(log)
        await here.load_partition(0, coordinator_epoch=1)
        await commit(here, G, {TP0: 5})
        await there.load_partition(0, coordinator_epoch=2)
        await commit(there, G, {TP0: 9})
        await here.load_partition(0, coordinator_epoch=1)  # a duplicate: nothing to do
        assert offsets_of(here, G) == {TP0: 5}
        await here.load_partition(0, coordinator_epoch=3)
        assert offsets_of(here, G) == {TP0: 9}
        here.unload(0, coordinator_epoch=2)  # older than the load it would undo
        assert here.owns(G)
        await here.load_partition(0, coordinator_epoch=2)
        assert here.owns(G) and offsets_of(here, G) == {TP0: 9}
        here.unload(0, coordinator_epoch=4)
        assert not here.owns(G)

    run(scenario)


# ---------------------------------------------------------------- while loading


def test_a_partition_being_loaded_answers_coordinator_load_in_progress() -> None:
    async def scenario() -> None:
        log = GatedLog()
        writer = broker(log)
        await writer.load_partition(0)
        await commit(writer, G, {TP0: 5})
        writer.unload(0)

        coord = broker(log)
        await coord.load_partition(1)
        log.gate.clear()
        loading = asyncio.ensure_future(coord.load_partition(0))
        await settle()
        reads = log.reads.count(0)
        assert not loading.done()
        assert coord.loading(G) and not coord.owns(G)
        assert coord.loading_partitions == frozenset({0})
        assert coord.coordinator_error(G) is ErrorCode.coordinator_load_in_progress
        assert await commit(coord, G, {TP0: 6}) == {TP0: ErrorCode.coordinator_load_in_progress}
        assert coord.fetch_offsets(G, None).error is ErrorCode.coordinator_load_in_progress
        assert coord.describe_group(G).error is ErrorCode.coordinator_load_in_progress
        assert (await join(coord, G)).error is ErrorCode.coordinator_load_in_progress
        # Kafka's answers for members of a group that is not known yet.
        assert coord.heartbeat(G, "m", 1) is ErrorCode.none
        assert (await coord.sync_group(G, 1, "m")).error is ErrorCode.rebalance_in_progress
        assert coord.list_groups()[0] is ErrorCode.coordinator_load_in_progress
        assert coord.coordinator_error(ELSEWHERE) is ErrorCode.none
        # A second call while it loads does not start another read.
        await coord.load_partition(0)
        assert log.reads.count(0) == reads

        log.gate.set()
        await loading
        assert coord.owns(G) and not coord.loading(G)
        assert offsets_of(coord, G) == {TP0: 5}
        assert coord.list_groups()[0] is ErrorCode.none

    run(scenario)


def test_a_marker_reported_while_loading_settles_the_offsets_it_read() -> None:
    """The read may end before a marker the broker writes during the load; the coordinator
    is told of the marker (complete_txn) and must apply it once it has installed the read."""

    async def scenario() -> None:
        log = GatedLog()
        writer = broker(log)
        await writer.load_partition(0)
        await txn_commit(writer, G, {TP0: 40})
        writer.unload(0)

        coord = broker(log)
        log.gate.clear()
        loading = asyncio.ensure_future(coord.load_partition(0))
        await settle()
        log.write_marker(0, PID, commit=True)  # after the read's snapshot
        coord.complete_txn(PID, True, 0)
        log.gate.set()
        await loading
        assert offsets_of(coord, G) == {TP0: 40}
        assert coord.fetch_offsets(G, [TP0], require_stable=True).partitions[TP0].error is (
            ErrorCode.none
        )

    run(scenario)


def test_an_unload_during_the_load_installs_nothing() -> None:
    async def scenario() -> None:
        log = GatedLog()
        writer = broker(log)
        await writer.load_partition(0)
        await commit(writer, G, {TP0: 5})
        writer.unload(0)

        coord = broker(log)
        log.gate.clear()
        loading = asyncio.ensure_future(coord.load_partition(0))
        await settle()
        coord.unload(0)
        assert coord.coordinator_error(G) is ErrorCode.not_coordinator
        log.gate.set()
        await loading
        assert not coord.owns(G) and coord.group(G) is None
        assert coord.coordinator_error(G) is ErrorCode.not_coordinator
        await coord.load_partition(0)
        assert offsets_of(coord, G) == {TP0: 5}

    run(scenario)


def test_a_failed_read_leaves_the_partition_unserved() -> None:
    class BrokenLog(InMemoryOffsetsLog):
        def read(self, partition: int) -> Any:
            raise OSError("the disk is gone")

    async def scenario() -> None:
        coord = broker(BrokenLog())
        with pytest.raises(OSError):
            await coord.load_partition(0)
        assert coord.coordinator_error(G) is ErrorCode.not_coordinator

    run(scenario)


# ---------------------------------------------------------------- per-partition state


def test_a_commit_in_flight_at_unload_is_read_by_the_reload() -> None:
    """The reload reads only after appends already under way: the transactional commit a
    request was writing when leadership left and came back is pending after the reload,
    and its marker settles it in the reloaded group."""

    async def scenario() -> None:
        log = GatedLog()
        coord = broker(log)
        await coord.load_partition(0)
        log.append_gate = asyncio.Event()
        writing = asyncio.ensure_future(txn_commit(coord, G, {TP0: 40}))
        await settle()
        coord.unload(0)
        reloading = asyncio.ensure_future(coord.load_partition(0))
        await settle()
        assert not reloading.done() and coord.loading(G)
        log.append_gate.set()
        assert await writing == {TP0: ErrorCode.none}  # it is in the log: Kafka says so too
        await reloading
        pending = coord.fetch_offsets(G, [TP0], require_stable=True).partitions[TP0]
        assert pending.error is ErrorCode.unstable_offset_commit
        log.write_marker(0, PID, commit=True)
        coord.complete_txn(PID, True, 0)
        assert offsets_of(coord, G) == {TP0: 40}

    run(scenario)


def test_pending_transactional_offsets_follow_the_partition() -> None:
    async def scenario() -> None:
        log = InMemoryOffsetsLog()
        coord = broker(log)
        await coord.load_partition(0)
        await coord.load_partition(1)
        await txn_commit(coord, G, {TP0: 10})
        await txn_commit(coord, ELSEWHERE, {TP0: 20})
        coord.unload(0)
        # The marker lands while partition 0 is not served here: nothing to do for it
        # now, and partition 1's group is settled as usual.
        log.write_marker(0, PID, commit=True)
        coord.complete_txn(PID, True, 0)
        log.write_marker(1, PID, commit=True)
        coord.complete_txn(PID, True, 1)
        assert offsets_of(coord, ELSEWHERE) == {TP0: 20}
        await coord.load_partition(0)  # the replay finds the marker
        assert offsets_of(coord, G) == {TP0: 10}

    run(scenario)


def test_offsets_expire_only_where_served_and_again_after_a_reload() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        log = InMemoryOffsetsLog()
        coord = broker(
            log,
            clock,
            offsets_retention_ms=10 * MINUTE,
            offsets_retention_check_interval_ms=MINUTE,
        )
        clock.advance(MINUTE)
        await coord.poll()  # nothing loaded: no timer, nothing written
        assert log.appends == []
        await coord.load_partition(0)
        await coord.load_partition(1)
        await commit(coord, G, {TP0: 5})
        await commit(coord, ELSEWHERE, {TP0: 6})
        coord.unload(0)
        clock.advance(11 * MINUTE)
        await coord.poll()
        # Partition 1's offsets expired; partition 0 is not ours to write tombstones in.
        assert coord.fetch_offsets(ELSEWHERE, None).partitions == {}
        assert [p for p, _ in log.appends].count(0) == 1
        await coord.load_partition(0)
        assert offsets_of(coord, G) == {TP0: 5}  # loaded as the log has it
        clock.advance(MINUTE)
        await coord.poll()
        assert coord.fetch_offsets(G, None).partitions == {}
        assert [p for p, _ in log.appends].count(0) == 2  # its tombstone

    run(scenario)


def test_an_unload_during_the_expiry_sweep_writes_no_tombstone_there() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        log = GatedLog()
        coord = broker(log, clock, offsets_retention_ms=10 * MINUTE)
        await coord.load_partition(0)
        await coord.load_partition(1)
        await commit(coord, ELSEWHERE, {TP0: 6})  # swept first
        await commit(coord, G, {TP0: 5})
        clock.advance(11 * MINUTE)
        log.append_gate = asyncio.Event()
        sweeping = asyncio.ensure_future(coord.expire_offsets())
        await settle()
        coord.unload(0)  # while the sweep writes partition 1's tombstone
        log.append_gate.set()
        assert await sweeping == 2  # the offset and the emptied group: one batch
        assert [p for p, _ in log.appends] == [1, 0, 1]  # the commits, then that batch

    run(scenario)
