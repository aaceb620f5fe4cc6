"""DeleteGroups and OffsetDelete in the group coordinator: Kafka's codes, tombstones that
keep a deletion through reloads and compaction, and commits in flight during a deletion."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from onceflow.clock import ManualClock
from onceflow.coordinator.group import (
    GroupCoordinator,
    GroupCoordinatorConfig,
    GroupState,
    InMemoryOffsetsLog,
    OffsetCommitEntry,
    TopicPartition,
)
from onceflow.coordinator.group.offsets import GroupKey, OffsetKey, decode_key
from onceflow.errors import ErrorCode, KafkaError
from onceflow.protocol.txn_support import TxnSupport

T = TypeVar("T")
TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
OTHER = TopicPartition("u", 0)
PID = 4000


def run(make_coro: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(make_coro())


class GatedLog(InMemoryOffsetsLog):
    """Stores each batch when it is appended, but finishes the append (durability) only
    once `gate` is set: an append in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.gate.set()

    async def append(
        self,
        partition: int,
        batch: bytes,
        transactional_id: str | None = None,
        support: TxnSupport = TxnSupport.DEFAULT_ERROR,
    ) -> int:
        if self.fail_with is not None:
            raise self.fail_with
        offset = self._store(partition, batch, transactional_id)
        await self.gate.wait()
        return offset


def make(log: InMemoryOffsetsLog | None = None) -> tuple[GroupCoordinator, InMemoryOffsetsLog]:
    log = log if log is not None else InMemoryOffsetsLog()
    config = GroupCoordinatorConfig(
        offsets_topic_num_partitions=3, group_initial_rebalance_delay_ms=0
    )
    return GroupCoordinator(log, ManualClock(), config), log


async def reloaded(log: InMemoryOffsetsLog) -> GroupCoordinator:
    """A coordinator rebuilt from the log alone (a restart, or another broker taking over)."""
    coord, _ = make(log)
    await coord.load()
    return coord


async def commit(coord: GroupCoordinator, group: str, offsets: dict[TopicPartition, int]) -> None:
    entries = {tp: OffsetCommitEntry(o) for tp, o in offsets.items()}
    assert set((await coord.commit_offsets(group, "", -1, entries)).values()) == {ErrorCode.none}


def offsets(coord: GroupCoordinator, group: str) -> dict[TopicPartition, int]:
    result = coord.fetch_offsets(group, None)
    assert result.error is ErrorCode.none
    return {tp: o.offset for tp, o in result.partitions.items()}


def subscription(*topics: str) -> bytes:
    out = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        out += struct.pack(">h", len(topic)) + topic.encode()
    return out + struct.pack(">i", -1)


async def join(
    coord: GroupCoordinator, group: str, *topics: str, protocol_type: str = "consumer"
) -> str:
    joined = await coord.join_group(
        group,
        "",
        protocol_type=protocol_type,
        protocols=[("range", subscription(*topics))],
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
    )
    await coord.sync_group(group, joined.generation_id, joined.member_id, assignments={})
    return joined.member_id


def tombstones(log: InMemoryOffsetsLog, partition: int) -> list[object]:
    return [decode_key(k) for k, v in log.records(partition) if k is not None and v is None]


# ---- DeleteGroups ----------------------------------------------------------------------


def test_delete_empty_group_writes_tombstones_that_survive_reload_and_compaction() -> None:
    async def scenario() -> None:
        coord, log = make()
        await coord.load()
        await commit(coord, "g", {TP0: 5, TP1: 7})
        await commit(coord, "keep", {TP0: 9})
        assert await coord.delete_groups(["g", "g"]) == {"g": ErrorCode.none}
        assert offsets(coord, "g") == {}
        assert coord.group("g") is None
        partition = coord.partition_for("g")
        assert set(tombstones(log, partition)) == {
            OffsetKey("g", "t", 0),
            OffsetKey("g", "t", 1),
            GroupKey("g"),
        }
        again = await reloaded(log)
        assert again.group("g") is None and offsets(again, "g") == {}
        assert offsets(again, "keep") == {TP0: 9}
        for p in range(3):
            log.compact(p)
        compacted = await reloaded(log)
        assert compacted.group("g") is None and offsets(compacted, "keep") == {TP0: 9}
        # Deleted is deleted: a second request finds nothing.
        assert await again.delete_groups(["g"]) == {"g": ErrorCode.group_id_not_found}

    run(scenario)


def test_delete_groups_codes() -> None:
    async def scenario() -> None:
        coord, _ = make()
        await coord.load()
        await join(coord, "busy", "t")
        codes = await coord.delete_groups(["busy", "missing", ""])
        assert codes == {
            "busy": ErrorCode.non_empty_group,
            "missing": ErrorCode.group_id_not_found,
            "": ErrorCode.group_id_not_found,
        }
        assert coord.group("busy") is not None and coord.group("busy").is_(GroupState.STABLE)  # type: ignore[union-attr]

    run(scenario)


def test_delete_group_after_its_members_left() -> None:
    async def scenario() -> None:
        coord, log = make()
        await coord.load()
        member = await join(coord, "g", "t")
        assert (await coord.commit_offsets("g", member, 1, {TP0: OffsetCommitEntry(3)})) == {
            TP0: ErrorCode.none
        }
        await coord.leave_group("g", [(member, None)])
        assert coord.group("g").is_(GroupState.EMPTY)  # type: ignore[union-attr]
        assert await coord.delete_groups(["g"]) == {"g": ErrorCode.none}
        assert coord.describe_group("g").state == "Dead"
        again = await reloaded(log)
        assert again.group("g") is None and offsets(again, "g") == {}

    run(scenario)


def test_failed_delete_keeps_the_group() -> None:
    async def scenario() -> None:
        coord, log = make()
        await coord.load()
        await commit(coord, "g", {TP0: 5})
        log.fail_with = KafkaError(ErrorCode.not_enough_replicas)
        assert await coord.delete_groups(["g"]) == {"g": ErrorCode.coordinator_not_available}
        log.fail_with = None
        assert coord.group("g").is_(GroupState.EMPTY)  # type: ignore[union-attr]
        assert offsets(coord, "g") == {TP0: 5}
        await commit(coord, "g", {TP0: 6})  # the group works as before
        assert await coord.delete_groups(["g"]) == {"g": ErrorCode.none}
        assert offsets(await reloaded(log), "g") == {}

    run(scenario)


def test_delete_group_with_a_pending_transactional_commit() -> None:
    """Kafka writes a tombstone for a pending transactional offset too: its COMMIT marker,
    coming later, must not bring it back (in memory, or on replay)."""

    async def scenario() -> None:
        coord, log = make()
        await coord.load()
        entries = {TP0: OffsetCommitEntry(42)}
        codes = await coord.txn_offset_commit("tx", "g", PID, 0, "", -1, None, entries)
        assert codes == {TP0: ErrorCode.none}
        assert await coord.delete_groups(["g"]) == {"g": ErrorCode.none}
        partition = coord.partition_for("g")
        log.write_marker(partition, PID, commit=True)
        coord.complete_txn(PID, True, partition)
        assert offsets(coord, "g") == {}
        assert offsets(await reloaded(log), "g") == {}

    run(scenario)


def test_joining_while_the_deletion_is_written_is_told_to_retry() -> None:
    async def scenario() -> None:
        log = GatedLog()
        coord, _ = make(log)
        await coord.load()
        await commit(coord, "g", {TP0: 1})
        log.gate.clear()
        deleting = asyncio.create_task(coord.delete_groups(["g"]))
        await asyncio.sleep(0)
        joined = await coord.join_group(
            "g",
            "",
            protocol_type="consumer",
            protocols=[("range", subscription("t"))],
            session_timeout_ms=10_000,
            rebalance_timeout_ms=10_000,
        )
        assert joined.error is ErrorCode.coordinator_not_available
        log.gate.set()
        assert await deleting == {"g": ErrorCode.none}
        assert coord.group("g") is None

    run(scenario)


# ---- OffsetDelete ----------------------------------------------------------------------


def test_offset_delete_of_a_simple_group() -> None:
    async def scenario() -> None:
        coord, log = make()
        await coord.load()
        await commit(coord, "g", {TP0: 5, TP1: 7, OTHER: 1})
        error, codes = await coord.delete_offsets("g", [TP0, OTHER, TopicPartition("t", 9)])
        assert error is ErrorCode.none
        assert codes == dict.fromkeys([TP0, OTHER, TopicPartition("t", 9)], ErrorCode.none)
        assert offsets(coord, "g") == {TP1: 7}
        # Only what had an offset gets a tombstone.
        assert set(tombstones(log, coord.partition_for("g"))) == {
            OffsetKey("g", "t", 0),
            OffsetKey("g", "u", 0),
        }
        again = await reloaded(log)
        assert offsets(again, "g") == {TP1: 7}
        assert again.group("g").is_(GroupState.EMPTY)  # type: ignore[union-attr]

    run(scenario)


def test_offset_delete_codes() -> None:
    async def scenario() -> None:
        coord, _ = make()
        await coord.load()
        member = await join(coord, "consumers", "t")
        await coord.commit_offsets("consumers", member, 1, {TP0: OffsetCommitEntry(3)})
        await coord.commit_offsets("consumers", member, 1, {OTHER: OffsetCommitEntry(4)})
        error, codes = await coord.delete_offsets("consumers", [TP0, OTHER])
        assert error is ErrorCode.none
        assert codes == {TP0: ErrorCode.group_subscribed_to_topic, OTHER: ErrorCode.none}
        assert offsets(coord, "consumers") == {TP0: 3}
        await join(coord, "connect", "t", protocol_type="connect")
        assert await coord.delete_offsets("connect", [OTHER]) == (ErrorCode.non_empty_group, {})
        assert await coord.delete_offsets("nobody", [TP0]) == (ErrorCode.group_id_not_found, {})
        assert await coord.delete_offsets("", [TP0]) == (ErrorCode.invalid_group_id, {})

    run(scenario)


def test_offset_delete_failure_puts_the_offsets_back() -> None:
    async def scenario() -> None:
        coord, log = make()
        await coord.load()
        await commit(coord, "g", {TP0: 5})
        log.fail_with = KafkaError(ErrorCode.not_leader_or_follower)
        assert await coord.delete_offsets("g", [TP0]) == (ErrorCode.not_coordinator, {})
        assert offsets(coord, "g") == {TP0: 5}

    run(scenario)


def test_commit_in_flight_before_offset_delete_stays_deleted() -> None:
    """The commit's record comes before the tombstone in the log, so the offset is gone
    after replay; the cache must agree when the commit finishes after the deletion."""

    async def scenario() -> None:
        log = GatedLog()
        coord, _ = make(log)
        await coord.load()
        await commit(coord, "g", {TP1: 1})
        log.gate.clear()
        committing = asyncio.create_task(
            coord.commit_offsets("g", "", -1, {TP0: OffsetCommitEntry(5)})
        )
        await asyncio.sleep(0)
        deleting = asyncio.create_task(coord.delete_offsets("g", [TP0]))
        await asyncio.sleep(0)
        log.gate.set()
        assert await committing == {TP0: ErrorCode.none}
        assert await deleting == (ErrorCode.none, {TP0: ErrorCode.none})
        assert offsets(coord, "g") == {TP1: 1}
        assert offsets(await reloaded(log), "g") == {TP1: 1}
        await commit(coord, "g", {TP0: 8})  # a later commit is a new offset again
        assert offsets(coord, "g") == {TP0: 8, TP1: 1}

    run(scenario)
