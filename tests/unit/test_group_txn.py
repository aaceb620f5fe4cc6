"""Transactional offset commits in the group coordinator: pending, commit, abort, reload.

TxnOffsetCommit writes one transactional batch; the offsets stay invisible until the broker
reports the transaction's COMMIT marker (`complete_txn`), and an ABORT drops them. Replaying
`__consumer_offsets` with its markers must rebuild exactly the same state.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

from onceflow.clock import ManualClock
from onceflow.coordinator.group import (
    GroupCoordinator,
    GroupCoordinatorConfig,
    InMemoryOffsetsLog,
    OffsetCommitEntry,
    TopicPartition,
)
from onceflow.coordinator.group.log import LogEntry
from onceflow.coordinator.group.offsets import OffsetKey, decode_key, decode_offset_value
from onceflow.errors import ErrorCode, KafkaError
from onceflow.protocol.txn_support import TxnSupport
from onceflow.records.batch import parse_header

T = TypeVar("T")
TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
PID = 4000
OTHER_PID = 4001
EPOCH = 3
MINUTE = 60_000


def run(make_coro: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(make_coro())


def make(**config: Any) -> tuple[GroupCoordinator, ManualClock, InMemoryOffsetsLog]:
    clock = ManualClock()
    log = InMemoryOffsetsLog()
    settings = {"offsets_topic_num_partitions": 3, "group_initial_rebalance_delay_ms": 0}
    settings.update(config)
    return GroupCoordinator(log, clock, GroupCoordinatorConfig(**settings)), clock, log


async def txn_commit(
    coord: GroupCoordinator,
    offsets: dict[TopicPartition, int],
    *,
    group: str = "g",
    producer_id: int = PID,
    member_id: str = "",
    generation_id: int = -1,
    instance_id: str | None = None,
    metadata: str = "txn",
) -> dict[TopicPartition, ErrorCode]:
    entries = {tp: OffsetCommitEntry(o, 2, metadata) for tp, o in offsets.items()}
    return await coord.txn_offset_commit(
        f"tx-{producer_id}",
        group,
        producer_id,
        EPOCH,
        member_id,
        generation_id,
        instance_id,
        entries,
    )


async def plain_commit(
    coord: GroupCoordinator, offsets: dict[TopicPartition, int], group: str = "g"
) -> None:
    entries = {tp: OffsetCommitEntry(o) for tp, o in offsets.items()}
    assert set((await coord.commit_offsets(group, "", -1, entries)).values()) == {ErrorCode.none}


def offsets_of(coord: GroupCoordinator, group: str = "g") -> dict[TopicPartition, int]:
    return {tp: f.offset for tp, f in coord.fetch_offsets(group, None).partitions.items()}


def stable_errors(coord: GroupCoordinator, group: str = "g") -> dict[TopicPartition, ErrorCode]:
    fetched = coord.fetch_offsets(group, [TP0, TP1], require_stable=True)
    assert fetched.error is ErrorCode.none
    return {tp: f.error for tp, f in fetched.partitions.items()}


def end_txn(
    coord: GroupCoordinator, log: InMemoryOffsetsLog, producer_id: int, *, commit: bool
) -> None:
    """What the broker does: write the marker, then tell the group coordinator."""
    partition = coord.partition_for("g")
    log.write_marker(partition, producer_id, commit=commit, producer_epoch=EPOCH)
    coord.complete_txn(producer_id, commit, partition)


def subscription(*topics: str) -> bytes:
    out = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        out += struct.pack(">h", len(topic)) + topic.encode()
    return out + struct.pack(">i", -1)


async def member_of(coord: GroupCoordinator, group: str = "g") -> tuple[str, int]:
    joined = await coord.join_group(
        group,
        "",
        protocol_type="consumer",
        protocols=[("range", subscription("t"))],
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
    )
    await coord.sync_group(group, joined.generation_id, joined.member_id, assignments={})
    return joined.member_id, joined.generation_id


# ---------------------------------------------------------------- writing and visibility


def test_txn_commit_writes_one_transactional_batch_and_stays_pending() -> None:
    async def scenario() -> None:
        coord, _, log = make()
        await coord.load()
        await plain_commit(coord, {TP0: 5})
        assert await txn_commit(coord, {TP0: 10, TP1: 20}) == {
            TP0: ErrorCode.none,
            TP1: ErrorCode.none,
        }
        partition = coord.partition_for("g")
        *_, batch = log.batches[partition]
        header = parse_header(batch)
        assert header.is_transactional and not header.is_control
        assert (header.producer_id, header.producer_epoch, header.base_sequence) == (PID, EPOCH, -1)
        assert header.record_count == 2
        assert log.appends[-1] == (partition, f"tx-{PID}")
        *_, first, second = log.read(partition)
        assert decode_key(first.key or b"") == OffsetKey("g", "t", 0)
        assert decode_offset_value(first.value or b"").offset == 10
        assert (second.producer_id, second.transactional, second.control) == (PID, True, None)
        # Invisible: the plain commit still answers, and TP1 has nothing committed.
        assert offsets_of(coord) == {TP0: 5}
        fetched = coord.fetch_offsets("g", [TP0, TP1]).partitions
        assert (fetched[TP0].offset, fetched[TP0].error) == (5, ErrorCode.none)
        assert (fetched[TP1].offset, fetched[TP1].error) == (-1, ErrorCode.none)

    run(scenario)


def test_require_stable_answers_unstable_while_pending() -> None:
    async def scenario() -> None:
        coord, _, log = make()
        await coord.load()
        await plain_commit(coord, {TP1: 7})
        await txn_commit(coord, {TP0: 10})
        assert stable_errors(coord) == {
            TP0: ErrorCode.unstable_offset_commit,
            TP1: ErrorCode.none,
        }
        unstable = coord.fetch_offsets("g", [TP0], require_stable=True).partitions[TP0]
        assert (unstable.offset, unstable.leader_epoch, unstable.metadata) == (-1, -1, "")
        # The whole-group form lists committed partitions only, each checked the same way.
        await plain_commit(coord, {TP0: 1})
        everything = coord.fetch_offsets("g", None, require_stable=True).partitions
        assert {tp: f.error for tp, f in everything.items()} == {
            TP0: ErrorCode.unstable_offset_commit,
            TP1: ErrorCode.none,
        }
        end_txn(coord, log, PID, commit=True)
        assert stable_errors(coord) == {TP0: ErrorCode.none, TP1: ErrorCode.none}

    run(scenario)


def test_commit_marker_materialises_and_is_idempotent() -> None:
    async def scenario() -> None:
        coord, _, log = make()
        await coord.load()
        await txn_commit(coord, {TP0: 10, TP1: 20})
        await txn_commit(coord, {TP0: 11})  # the same transaction commits again: latest wins
        other_partition = (coord.partition_for("g") + 1) % 3
        coord.complete_txn(PID, True, other_partition)  # a marker elsewhere: not this group's
        assert offsets_of(coord) == {}
        end_txn(coord, log, PID, commit=True)
        assert offsets_of(coord) == {TP0: 11, TP1: 20}
        fetched = coord.fetch_offsets("g", [TP0]).partitions[TP0]
        assert (fetched.leader_epoch, fetched.metadata) == (2, "txn")
        coord.complete_txn(PID, True, coord.partition_for("g"))
        coord.complete_txn(PID, False, coord.partition_for("g"))  # too late to undo anything
        assert offsets_of(coord) == {TP0: 11, TP1: 20}

    run(scenario)


def test_abort_leaves_committed_offsets_unchanged() -> None:
    async def scenario() -> None:
        coord, _, log = make()
        await coord.load()
        await plain_commit(coord, {TP0: 5})
        await txn_commit(coord, {TP0: 50, TP1: 60})
        end_txn(coord, log, PID, commit=False)
        assert offsets_of(coord) == {TP0: 5}
        assert stable_errors(coord) == {TP0: ErrorCode.none, TP1: ErrorCode.none}
        group = coord.group("g")
        assert group is not None and not group.offsets.pending_txn

    run(scenario)


def test_newer_plain_commit_wins_over_older_transactional_one() -> None:
    async def scenario() -> None:
        coord, _, log = make()
        await coord.load()
        await txn_commit(coord, {TP0: 10, TP1: 20})
        await plain_commit(coord, {TP0: 99})  # written after the transactional record
        end_txn(coord, log, PID, commit=True)
        assert offsets_of(coord) == {TP0: 99, TP1: 20}
        # The other way round, the transactional record is the newer one and wins.
        await plain_commit(coord, {TP1: 1})
        await txn_commit(coord, {TP1: 30}, producer_id=OTHER_PID)
        end_txn(coord, log, OTHER_PID, commit=True)
        assert offsets_of(coord) == {TP0: 99, TP1: 30}

    run(scenario)


def test_producers_are_settled_independently() -> None:
    async def scenario() -> None:
        coord, _, log = make()
        await coord.load()
        await txn_commit(coord, {TP0: 10}, producer_id=PID)
        await txn_commit(coord, {TP1: 20}, producer_id=OTHER_PID)
        end_txn(coord, log, OTHER_PID, commit=True)
        assert offsets_of(coord) == {TP1: 20}
        assert stable_errors(coord)[TP0] is ErrorCode.unstable_offset_commit
        end_txn(coord, log, PID, commit=False)
        assert offsets_of(coord) == {TP1: 20}
        assert stable_errors(coord)[TP0] is ErrorCode.none

    run(scenario)


# ---------------------------------------------------------------- checks and errors


def test_status_and_group_checks() -> None:
    async def scenario() -> None:
        coord, _, _ = make()
        assert await txn_commit(coord, {TP0: 1}) == {TP0: ErrorCode.coordinator_load_in_progress}
        await coord.load()
        assert await txn_commit(coord, {TP0: 1}, group="") == {TP0: ErrorCode.invalid_group_id}
        # An unknown group is created: a transactional copier may be its only committer.
        assert await txn_commit(coord, {TP0: 1}, group="fresh") == {TP0: ErrorCode.none}
        assert coord.group("fresh") is not None
        coord.close()
        assert await txn_commit(coord, {TP0: 1}) == {TP0: ErrorCode.coordinator_not_available}

    run(scenario)


def test_v3_member_and_generation_checks() -> None:
    async def scenario() -> None:
        coord, _, _ = make()
        await coord.load()
        member, generation = await member_of(coord)
        ok = await txn_commit(coord, {TP0: 1}, member_id=member, generation_id=generation)
        assert ok == {TP0: ErrorCode.none}
        stale = await txn_commit(coord, {TP0: 1}, member_id=member, generation_id=generation + 1)
        assert stale == {TP0: ErrorCode.illegal_generation}
        stranger = await txn_commit(coord, {TP0: 1}, member_id="x", generation_id=generation)
        assert stranger == {TP0: ErrorCode.unknown_member_id}
        # v0-v2 carry no member: a live group accepts them (unlike a plain simple commit).
        assert await txn_commit(coord, {TP0: 1}) == {TP0: ErrorCode.none}

        static = await coord.join_group(
            "s",
            "",
            protocol_type="consumer",
            protocols=[("range", subscription("t"))],
            session_timeout_ms=10_000,
            rebalance_timeout_ms=10_000,
            group_instance_id="i-1",
        )
        fenced = await txn_commit(
            coord,
            {TP0: 1},
            group="s",
            member_id="old-incarnation",
            generation_id=static.generation_id,
            instance_id="i-1",
        )
        assert fenced == {TP0: ErrorCode.fenced_instance_id}
        # The group is still completing its rebalance; a transactional commit is accepted.
        accepted = await txn_commit(
            coord,
            {TP0: 1},
            group="s",
            member_id=static.member_id,
            generation_id=static.generation_id,
            instance_id="i-1",
        )
        assert accepted == {TP0: ErrorCode.none}

    run(scenario)


def test_metadata_too_large_is_per_partition() -> None:
    async def scenario() -> None:
        coord, _, log = make(offset_metadata_max_bytes=3)
        await coord.load()
        entries = {TP0: OffsetCommitEntry(1, -1, "long"), TP1: OffsetCommitEntry(2, -1, "ok")}
        result = await coord.txn_offset_commit("tx", "g", PID, EPOCH, "", -1, None, entries)
        assert result == {TP0: ErrorCode.offset_metadata_too_large, TP1: ErrorCode.none}
        only_large = {TP0: OffsetCommitEntry(1, -1, "long")}
        before = len(log.appends)
        result = await coord.txn_offset_commit("tx", "g", PID, EPOCH, "", -1, None, only_large)
        assert result == {TP0: ErrorCode.offset_metadata_too_large}
        assert len(log.appends) == before  # nothing left to write
        end_txn(coord, log, PID, commit=True)
        assert offsets_of(coord) == {TP1: 2}

    run(scenario)


def test_refused_append_reports_the_logs_code_and_leaves_nothing_pending() -> None:
    async def scenario() -> None:
        coord, _, log = make()
        await coord.load()
        for raised, expected in [
            (ErrorCode.invalid_producer_epoch, ErrorCode.invalid_producer_epoch),
            (ErrorCode.producer_fenced, ErrorCode.producer_fenced),
            (ErrorCode.invalid_txn_state, ErrorCode.invalid_txn_state),
            (ErrorCode.network_exception, ErrorCode.coordinator_load_in_progress),
            (ErrorCode.not_leader_or_follower, ErrorCode.not_coordinator),
        ]:
            log.fail_with = KafkaError(raised)
            assert await txn_commit(coord, {TP0: 1, TP1: 2}) == {
                TP0: expected,
                TP1: expected,
            }
        log.fail_with = None
        assert stable_errors(coord) == {TP0: ErrorCode.none, TP1: ErrorCode.none}
        group = coord.group("g")
        assert group is not None and not group.offsets.has_pending_txn_from(PID)
        end_txn(coord, log, PID, commit=True)
        assert offsets_of(coord) == {}

    run(scenario)


# ---------------------------------------------------------------- a marker during the append


class SlowLog(InMemoryOffsetsLog):
    """Stores at once, like the broker, but reports durability only when released."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()

    async def append(
        self,
        partition: int,
        batch: bytes,
        transactional_id: str | None = None,
        support: TxnSupport = TxnSupport.DEFAULT_ERROR,
    ) -> int:
        offset = await super().append(partition, batch, transactional_id, support)
        await self.release.wait()
        return offset


def test_marker_while_the_append_is_in_flight() -> None:
    async def scenario(commit: bool) -> None:
        log = SlowLog()
        config = GroupCoordinatorConfig(offsets_topic_num_partitions=3)
        coord = GroupCoordinator(log, ManualClock(), config)
        await coord.load()
        task = asyncio.create_task(txn_commit(coord, {TP0: 10}))
        await asyncio.sleep(0)
        assert stable_errors(coord)[TP0] is ErrorCode.unstable_offset_commit
        end_txn(coord, log, PID, commit=commit)  # e.g. the coordinator's timeout abort
        log.release.set()
        assert await task == {TP0: ErrorCode.none}
        assert offsets_of(coord) == ({TP0: 10} if commit else {})
        assert stable_errors(coord)[TP0] is ErrorCode.none
        group = coord.group("g")
        assert group is not None and not group.offsets.pending_txn

    asyncio.run(scenario(commit=False))
    asyncio.run(scenario(commit=True))


# ---------------------------------------------------------------- retention


def test_pending_offsets_keep_their_partition_and_group_from_expiring() -> None:
    async def scenario() -> None:
        coord, clock, log = make(offsets_retention_ms=MINUTE)
        await coord.load()
        await plain_commit(coord, {TP0: 1})
        await txn_commit(coord, {TP0: 2, TP1: 3})
        clock.advance(2 * MINUTE)
        assert await coord.expire_offsets() == 0
        assert offsets_of(coord) == {TP0: 1}
        end_txn(coord, log, PID, commit=True)
        assert offsets_of(coord) == {TP0: 2, TP1: 3}

    run(scenario)


# ---------------------------------------------------------------- reload


async def mixed_history(coord: GroupCoordinator, log: InMemoryOffsetsLog) -> None:
    """Committed, aborted, overridden and still-pending transactions in one partition."""
    await plain_commit(coord, {TP0: 1, TP1: 1})
    await txn_commit(coord, {TP0: 10}, producer_id=PID)  # committed
    await txn_commit(coord, {TP1: 66}, producer_id=OTHER_PID)  # aborted
    await plain_commit(coord, {TP0: 2})  # newer than PID's record: wins at commit
    await txn_commit(coord, {TP1: 20}, producer_id=PID)  # same txn as TP0: 10
    end_txn(coord, log, PID, commit=True)
    end_txn(coord, log, OTHER_PID, commit=False)
    await txn_commit(coord, {TP0: 30}, producer_id=5000)  # left pending
    await txn_commit(coord, {TP1: 40}, group="only-pending", producer_id=5000)


def snapshot(coord: GroupCoordinator) -> tuple[dict[str, Any], ...]:
    return tuple(
        {
            "offsets": offsets_of(coord, group),
            "stable": {
                tp: f.error
                for tp, f in coord.fetch_offsets(
                    group, [TP0, TP1], require_stable=True
                ).partitions.items()
            },
        }
        for group in ("g", "only-pending")
    )


def test_reload_rebuilds_pending_committed_and_aborted_state() -> None:
    async def scenario() -> None:
        coord, clock, log = make()
        await coord.load()
        await mixed_history(coord, log)
        assert offsets_of(coord) == {TP0: 2, TP1: 20}
        before = snapshot(coord)
        assert before[0]["stable"] == {
            TP0: ErrorCode.unstable_offset_commit,
            TP1: ErrorCode.none,
        }
        assert before[1] == {
            "offsets": {},
            "stable": {TP0: ErrorCode.none, TP1: ErrorCode.unstable_offset_commit},
        }

        restarted = GroupCoordinator(log, clock, coord.config)
        await restarted.load()
        assert snapshot(restarted) == before
        # The transaction coordinator finishes the pending one after the restart.
        partitions = {restarted.partition_for(g) for g in ("g", "only-pending")}
        for partition in partitions:
            log.write_marker(partition, 5000, commit=True, producer_epoch=EPOCH)
            restarted.complete_txn(5000, True, partition)
            coord.complete_txn(5000, True, partition)
        assert offsets_of(restarted) == {TP0: 30, TP1: 20}
        assert offsets_of(restarted, "only-pending") == {TP1: 40}
        assert snapshot(restarted) == snapshot(coord)
        third = GroupCoordinator(log, clock, coord.config)
        await third.load()
        assert snapshot(third) == snapshot(coord)

    run(scenario)


def test_compaction_keeps_transactional_outcomes() -> None:
    async def scenario() -> None:
        coord, clock, log = make()
        await coord.load()
        await mixed_history(coord, log)
        before = snapshot(coord)
        for partition in {coord.partition_for(g) for g in ("g", "only-pending")}:
            log.compact(partition)
        entries: Iterator[LogEntry] = log.read(coord.partition_for("g"))
        assert all(e.control is None for e in entries)  # settled markers are gone
        restarted = GroupCoordinator(log, clock, coord.config)
        await restarted.load()
        assert snapshot(restarted) == before

    run(scenario)


def test_control_entries_are_reported_by_the_log() -> None:
    log = InMemoryOffsetsLog()
    log.write_marker(0, PID, commit=True, producer_epoch=1)
    log.write_marker(0, PID, commit=False, producer_epoch=1)
    commit, abort = log.read(0)
    assert (commit.offset, commit.control, commit.producer_id, commit.transactional) == (
        0,
        1,
        PID,
        True,
    )
    assert (abort.offset, abort.control) == (1, 0)
    assert log.records(0) == []
