"""Offset commit, fetch, reload after restart, tombstones and retention."""

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
from onceflow.coordinator.group.log import encode_batch
from onceflow.coordinator.group.offset_store import CommittedOffset, GroupOffsets
from onceflow.coordinator.group.offsets import (
    OffsetAndMetadata,
    OffsetKey,
    decode_key,
    encode_group_key,
    encode_offset_key,
)
from onceflow.errors import ErrorCode, KafkaError

T = TypeVar("T")
TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
MINUTE = 60_000


def run(make_coro: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(make_coro())


def subscription(*topics: str) -> bytes:
    out = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        out += struct.pack(">h", len(topic)) + topic.encode()
    return out + struct.pack(">i", -1)


def make(**config: Any) -> tuple[GroupCoordinator, ManualClock, InMemoryOffsetsLog]:
    clock = ManualClock()
    log = InMemoryOffsetsLog()
    settings = {"offsets_topic_num_partitions": 3, "group_initial_rebalance_delay_ms": 0}
    settings.update(config)
    return GroupCoordinator(log, clock, GroupCoordinatorConfig(**settings)), clock, log


async def simple_commit(
    coord: GroupCoordinator, group: str, offsets: dict[TopicPartition, int], **kw: Any
) -> dict[TopicPartition, ErrorCode]:
    entries = {tp: OffsetCommitEntry(offset, 3, f"m{offset}") for tp, offset in offsets.items()}
    return await coord.commit_offsets(group, "", -1, entries, **kw)


async def member_of(coord: GroupCoordinator, group: str, *topics: str) -> tuple[str, int]:
    """Form a one-member consumer group; returns (member id, generation)."""
    joined = await coord.join_group(
        group,
        "",
        protocol_type="consumer",
        protocols=[("range", subscription(*topics))],
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
    )
    await coord.sync_group(group, joined.generation_id, joined.member_id, assignments={})
    return joined.member_id, joined.generation_id


def test_simple_commit_and_fetch() -> None:
    async def scenario() -> None:
        coord, _, log = make()
        await coord.load()
        errors = await simple_commit(coord, "g", {TP0: 10, TP1: 20})
        assert errors == {TP0: ErrorCode.none, TP1: ErrorCode.none}
        fetched = coord.fetch_offsets("g", [TP0, TopicPartition("t", 9)])
        assert fetched.error is ErrorCode.none
        assert fetched.partitions[TP0].offset == 10
        assert fetched.partitions[TP0].leader_epoch == 3
        assert fetched.partitions[TP0].metadata == "m10"
        missing = fetched.partitions[TopicPartition("t", 9)]
        assert (missing.offset, missing.leader_epoch, missing.metadata) == (-1, -1, "")
        everything = coord.fetch_offsets("g", None)
        assert {tp: p.offset for tp, p in everything.partitions.items()} == {TP0: 10, TP1: 20}
        assert coord.fetch_offsets("unknown", None).partitions == {}
        assert coord.fetch_offsets("unknown", [TP0]).partitions[TP0].offset == -1
        # One batch of two records on the group's partition.
        records = log.records(coord.partition_for("g"))
        assert [decode_key(k) for k, _ in records if k] == [
            OffsetKey("g", "t", 0),
            OffsetKey("g", "t", 1),
        ]

    run(scenario)


def test_offsets_reload_after_restart() -> None:
    async def scenario() -> None:
        coord, clock, log = make()
        await coord.load()
        await simple_commit(coord, "g", {TP0: 10, TP1: 20})
        await simple_commit(coord, "g", {TP0: 11})
        member, generation = await member_of(coord, "consumers", "t")
        entries = {TP0: OffsetCommitEntry(5)}
        assert await coord.commit_offsets("consumers", member, generation, entries) == {
            TP0: ErrorCode.none
        }
        restarted = GroupCoordinator(log, clock, coord.config)
        await restarted.load()
        again = restarted.fetch_offsets("g", None).partitions
        assert {tp: p.offset for tp, p in again.items()} == {TP0: 11, TP1: 20}
        assert again[TP0].metadata == "m11"
        assert restarted.fetch_offsets("consumers", [TP0]).partitions[TP0].offset == 5
        group = restarted.group("consumers")
        assert group is not None and group.state is GroupState.STABLE
        assert list(group.members) == [member] and group.generation_id == generation
        # The reloaded member keeps its generation and can carry on.
        assert restarted.heartbeat("consumers", member, generation) is ErrorCode.none

    run(scenario)


def test_tombstones_delete_on_load() -> None:
    async def scenario() -> None:
        coord, clock, log = make()
        await simple_commit_after_load(coord)
        partition = coord.partition_for("g")
        tombstones = [(encode_offset_key("g", "t", 0), None)]
        await log.append(partition, encode_batch(tombstones, clock.now_ms()))
        restarted = GroupCoordinator(log, clock, coord.config)
        await restarted.load()
        offsets = restarted.fetch_offsets("g", None).partitions
        assert set(offsets) == {TP1}
        # A group tombstone removes the membership record; offsets alone keep it Empty.
        await member_of(restarted, "gone", "t")
        await log.append(
            restarted.partition_for("gone"),
            encode_batch([(encode_group_key("gone"), None)], clock.now_ms()),
        )
        third = GroupCoordinator(log, clock, coord.config)
        await third.load()
        assert third.group("gone") is None

    run(scenario)


async def simple_commit_after_load(coord: GroupCoordinator) -> None:
    await coord.load()
    await simple_commit(coord, "g", {TP0: 10, TP1: 20})


def test_compaction_keeps_the_latest_and_reloads_the_same() -> None:
    async def scenario() -> None:
        coord, clock, log = make()
        await coord.load()
        for offset in range(5):
            await simple_commit(coord, "g", {TP0: offset})
        partition = coord.partition_for("g")
        log.compact(partition)
        assert len(log.records(partition)) == 1
        restarted = GroupCoordinator(log, clock, coord.config)
        await restarted.load()
        assert restarted.fetch_offsets("g", [TP0]).partitions[TP0].offset == 4

    run(scenario)


def test_group_commits_check_generation_and_member() -> None:
    async def scenario() -> None:
        coord, _, _ = make()
        await coord.load()
        member, generation = await member_of(coord, "g", "t")
        entry = {TP0: OffsetCommitEntry(1)}
        stale = await coord.commit_offsets("g", member, generation - 1, entry)
        assert stale == {TP0: ErrorCode.illegal_generation}
        stranger = await coord.commit_offsets("g", "stranger", generation, entry)
        assert stranger == {TP0: ErrorCode.unknown_member_id}
        # Simple commits are refused while the group has members.
        simple = await coord.commit_offsets("g", "", -1, entry)
        assert simple == {TP0: ErrorCode.unknown_member_id}
        new_group = await coord.commit_offsets("fresh", "m", 3, entry)
        assert new_group == {TP0: ErrorCode.illegal_generation}
        fenced = await coord.commit_offsets("g", member, generation, entry, group_instance_id="x")
        assert fenced == {TP0: ErrorCode.unknown_member_id}

    run(scenario)


def test_commit_during_completing_rebalance_is_refused() -> None:
    async def scenario() -> None:
        coord, _, _ = make()
        await coord.load()
        joined = await coord.join_group(
            "g",
            "",
            protocol_type="consumer",
            protocols=[("range", b"")],
            session_timeout_ms=10_000,
            rebalance_timeout_ms=10_000,
        )
        entry = {TP0: OffsetCommitEntry(1)}
        result = await coord.commit_offsets("g", joined.member_id, joined.generation_id, entry)
        assert result == {TP0: ErrorCode.rebalance_in_progress}

    run(scenario)


def test_metadata_too_large_and_append_failures() -> None:
    async def scenario() -> None:
        coord, _, log = make(offset_metadata_max_bytes=4)
        await coord.load()
        entries = {TP0: OffsetCommitEntry(1, -1, "12345"), TP1: OffsetCommitEntry(2, -1, "1234")}
        result = await coord.commit_offsets("g", "", -1, entries)
        assert result == {TP0: ErrorCode.offset_metadata_too_large, TP1: ErrorCode.none}
        log.fail_with = KafkaError(ErrorCode.not_enough_replicas)
        failed = await simple_commit(coord, "g", {TP1: 99})
        assert failed == {TP1: ErrorCode.coordinator_not_available}
        log.fail_with = KafkaError(ErrorCode.record_list_too_large)
        assert await simple_commit(coord, "g", {TP1: 99}) == {
            TP1: ErrorCode.invalid_commit_offset_size
        }
        log.fail_with = None
        assert coord.fetch_offsets("g", [TP1]).partitions[TP1].offset == 2

    run(scenario)


def test_simple_group_offsets_expire_after_retention() -> None:
    async def scenario() -> None:
        coord, clock, log = make(offsets_retention_ms=10 * MINUTE)
        await coord.load()
        await simple_commit(coord, "g", {TP0: 1})
        clock.advance(5 * MINUTE)
        await simple_commit(coord, "g", {TP1: 2})
        clock.advance(5 * MINUTE)
        assert await coord.expire_offsets() == 1
        assert set(coord.fetch_offsets("g", None).partitions) == {TP1}
        clock.advance(5 * MINUTE)
        assert await coord.expire_offsets() == 2  # the last offset and the group itself
        assert coord.group("g") is None
        partition = coord.partition_for("g")
        tail = log.records(partition)[-3:]
        assert [(decode_key(k) if k else None, v) for k, v in tail] == [
            (OffsetKey("g", "t", 0), None),
            (OffsetKey("g", "t", 1), None),
            (decode_key(encode_group_key("g")), None),
        ]
        restarted = GroupCoordinator(log, clock, coord.config)
        await restarted.load()
        assert restarted.group("g") is None

    run(scenario)


def test_poll_runs_retention_on_its_interval() -> None:
    async def scenario() -> None:
        coord, clock, _ = make(
            offsets_retention_ms=1 * MINUTE, offsets_retention_check_interval_ms=1000
        )
        await coord.load()
        await simple_commit(coord, "g", {TP0: 1})
        clock.advance(MINUTE)
        await coord.poll()
        assert coord.group("g") is None

    run(scenario)


def test_explicit_retention_time_expires_at_its_own_deadline() -> None:
    async def scenario() -> None:
        coord, clock, log = make(offsets_retention_ms=100 * MINUTE)
        await coord.load()
        await simple_commit(coord, "g", {TP0: 1}, retention_ms=MINUTE)
        restarted = GroupCoordinator(log, clock, coord.config)
        await restarted.load()  # the expire timestamp survived (value v1)
        group = restarted.group("g")
        assert group is not None
        assert group.offsets.get(TP0) == OffsetAndMetadata(
            1, -1, "m1", clock.now_ms(), clock.now_ms() + MINUTE
        )
        clock.advance(MINUTE)
        assert await restarted.expire_offsets() == 2

    run(scenario)


def test_consumer_group_keeps_subscribed_offsets_while_active() -> None:
    async def scenario() -> None:
        coord, clock, _ = make(offsets_retention_ms=1 * MINUTE)
        await coord.load()
        member, generation = await member_of(coord, "g", "t")
        entries = {TP0: OffsetCommitEntry(1), TopicPartition("old", 0): OffsetCommitEntry(2)}
        await coord.commit_offsets("g", member, generation, entries)
        clock.advance(MINUTE)
        await coord.expire_offsets()
        assert set(coord.fetch_offsets("g", None).partitions) == {TP0}
        # Once the group is empty, retention counts from the moment it became empty.
        await coord.leave_group("g", [(member, None)])
        clock.advance(MINUTE - 1)
        await coord.expire_offsets()
        assert set(coord.fetch_offsets("g", None).partitions) == {TP0}
        clock.advance(1)
        await coord.expire_offsets()
        assert coord.group("g") is None

    run(scenario)


def test_transactional_offsets_materialise_only_on_commit() -> None:
    offsets = GroupOffsets()
    offsets.put(TP0, CommittedOffset(OffsetAndMetadata(5), log_seq=10))
    offsets.add_pending_txn(7, TP0, CommittedOffset(OffsetAndMetadata(3), log_seq=4))
    offsets.add_pending_txn(7, TP1, CommittedOffset(OffsetAndMetadata(8), log_seq=11))
    offsets.add_pending_txn(9, TP1, CommittedOffset(OffsetAndMetadata(99), log_seq=12))
    assert offsets.has_pending_txn_for(TP1)
    offsets.complete_txn(7, commit=True)
    # The older transactional record does not hide the newer plain commit.
    assert offsets.get(TP0) == OffsetAndMetadata(5)
    assert offsets.get(TP1) == OffsetAndMetadata(8)
    offsets.complete_txn(9, commit=False)
    assert offsets.get(TP1) == OffsetAndMetadata(8)
    assert not offsets.pending_txn
