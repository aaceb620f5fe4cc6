"""Join, sync, heartbeat, leave, session expiry and static membership, driven by ManualClock."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import pytest

from onceflow.clock import ManualClock
from onceflow.config import BrokerConfig
from onceflow.coordinator.group import (
    GroupCoordinator,
    GroupCoordinatorConfig,
    GroupState,
    InMemoryOffsetsLog,
    JoinResult,
    SyncResult,
)
from onceflow.errors import ErrorCode

T = TypeVar("T")
SESSION = 10_000
REBALANCE = 30_000


def run(make_coro: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(make_coro())


def subscription(*topics: str) -> bytes:
    """A consumer protocol v0 subscription: version, topics, null user data."""
    out = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        out += struct.pack(">h", len(topic)) + topic.encode()
    return out + struct.pack(">i", -1)


class Harness:
    def __init__(self, delay: int = 0, **config: Any) -> None:
        self.clock = ManualClock()
        self.log = InMemoryOffsetsLog()
        self.config = GroupCoordinatorConfig(
            offsets_topic_num_partitions=4, group_initial_rebalance_delay_ms=delay, **config
        )
        self.coord = GroupCoordinator(self.log, self.clock, self.config)

    async def start(self) -> GroupCoordinator:
        await self.coord.load()
        return self.coord

    def join(
        self,
        member_id: str = "",
        *,
        group: str = "g",
        instance: str | None = None,
        protocols: tuple[tuple[str, bytes], ...] = (("range", subscription("t")),),
        require_known: bool = False,
        session: int = SESSION,
        rebalance: int = REBALANCE,
    ) -> asyncio.Task[JoinResult]:
        return asyncio.create_task(
            self.coord.join_group(
                group,
                member_id,
                protocol_type="consumer",
                protocols=protocols,
                session_timeout_ms=session,
                rebalance_timeout_ms=rebalance,
                group_instance_id=instance,
                require_known_member_id=require_known,
                client_id="client",
                client_host="/127.0.0.1",
            )
        )

    def sync(
        self,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        *,
        group: str = "g",
        instance: str | None = None,
    ) -> asyncio.Task[SyncResult]:
        return asyncio.create_task(
            self.coord.sync_group(
                group,
                generation,
                member_id,
                assignments=assignments,
                group_instance_id=instance,
            )
        )

    async def tick(self, ms: int) -> None:
        self.clock.advance(ms)
        await self.coord.poll()
        await settle()

    def state(self, group: str = "g") -> GroupState:
        metadata = self.coord.group(group)
        return GroupState.DEAD if metadata is None else metadata.state


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def done(task: Awaitable[T]) -> T:
    return await asyncio.wait_for(task, timeout=1)


async def join_together(h: Harness, *tasks: asyncio.Task[JoinResult]) -> list[JoinResult]:
    """Members that join a new group within the initial delay share its first generation.

    Each wait that saw a newcomer is followed by one more, hence two delays.
    """
    delay = h.config.group_initial_rebalance_delay_ms
    await settle()
    await h.tick(delay)
    await h.tick(delay)
    results = [await done(t) for t in tasks]
    assert {r.generation_id for r in results} == {1}
    return results


async def form_single_member_group(h: Harness) -> JoinResult:
    joined = await done(h.join())
    assert joined.error is ErrorCode.none
    synced = await done(h.sync(joined.member_id, joined.generation_id, {joined.member_id: b"a"}))
    assert synced == SyncResult(ErrorCode.none, b"a", "consumer", "range")
    return joined


def test_single_member_join_and_sync() -> None:
    async def scenario() -> None:
        h = Harness()
        await h.start()
        joined = await done(h.join())
        assert joined.error is ErrorCode.none
        assert joined.member_id.startswith("client-")
        assert joined.generation_id == 1
        assert joined.leader_id == joined.member_id
        assert joined.protocol_name == "range"
        assert [m.member_id for m in joined.members] == [joined.member_id]
        assert joined.members[0].metadata == subscription("t")
        assert h.state() is GroupState.COMPLETING_REBALANCE
        synced = await done(h.sync(joined.member_id, 1, {joined.member_id: b"assignment"}))
        assert synced.error is ErrorCode.none
        assert synced.assignment == b"assignment"
        assert h.state() is GroupState.STABLE
        assert h.coord.heartbeat("g", joined.member_id, 1) is ErrorCode.none
        # The stable generation was written to __consumer_offsets.
        partition = h.coord.partition_for("g")
        assert len(h.log.records(partition)) == 1

    run(scenario)


def test_member_id_required_first_for_v4_clients() -> None:
    async def scenario() -> None:
        h = Harness()
        await h.start()
        first = await done(h.join(require_known=True))
        assert first.error is ErrorCode.member_id_required
        assert first.member_id.startswith("client-")
        assert h.state() is GroupState.EMPTY
        second = await done(h.join(first.member_id, require_known=True))
        assert second.error is ErrorCode.none
        assert second.member_id == first.member_id
        assert second.generation_id == 1

    run(scenario)


def test_pending_member_expires_after_session_timeout() -> None:
    async def scenario() -> None:
        h = Harness()
        await h.start()
        first = await done(h.join(require_known=True))
        group = h.coord.group("g")
        assert group is not None and first.member_id in group.pending_members
        await h.tick(SESSION)
        assert first.member_id not in group.pending_members
        late = await done(h.join(first.member_id, require_known=True))
        assert late.error is ErrorCode.unknown_member_id

    run(scenario)


def test_two_members_initial_delay_puts_both_in_first_generation() -> None:
    async def scenario() -> None:
        h = Harness(delay=3000)
        await h.start()
        a = h.join()
        await settle()
        b = h.join()
        await settle()
        assert not a.done() and not b.done()
        assert h.state() is GroupState.PREPARING_REBALANCE
        await h.tick(3000)  # b arrived during the first wait: one more wait
        assert not a.done()
        await h.tick(3000)
        ja, jb = await done(a), await done(b)
        assert ja.generation_id == jb.generation_id == 1
        assert ja.leader_id == jb.leader_id == ja.member_id
        assert len(ja.members) == 2 and jb.members == ()
        # Follower syncs first and waits for the leader's assignment.
        follower = h.sync(jb.member_id, 1)
        await settle()
        assert not follower.done()
        leader = h.sync(ja.member_id, 1, {ja.member_id: b"A", jb.member_id: b"B"})
        assert (await done(leader)).assignment == b"A"
        assert (await done(follower)).assignment == b"B"
        assert h.state() is GroupState.STABLE

    run(scenario)


def test_second_member_joining_triggers_rebalance() -> None:
    async def scenario() -> None:
        h = Harness()
        await h.start()
        first = await form_single_member_group(h)
        second = h.join()
        await settle()
        assert h.state() is GroupState.PREPARING_REBALANCE
        assert not second.done()
        hb = h.coord.heartbeat("g", first.member_id, 1)
        assert hb is ErrorCode.rebalance_in_progress
        rejoin = h.join(first.member_id)
        j1, j2 = await done(rejoin), await done(second)
        assert j1.generation_id == j2.generation_id == 2
        assert j1.leader_id == first.member_id
        assert {m.member_id for m in j1.members} == {first.member_id, j2.member_id}
        # Followers that sync before the leader wait; stale generations are refused.
        stale = await done(h.sync(j2.member_id, 1))
        assert stale.error is ErrorCode.illegal_generation
        follower = h.sync(j2.member_id, 2)
        await done(h.sync(j1.member_id, 2, {j1.member_id: b"1", j2.member_id: b"2"}))
        assert (await done(follower)).assignment == b"2"
        assert h.coord.heartbeat("g", j1.member_id, 1) is ErrorCode.illegal_generation
        assert h.coord.heartbeat("g", "nobody", 2) is ErrorCode.unknown_member_id

    run(scenario)


def test_member_not_rejoining_is_dropped_after_rebalance_timeout() -> None:
    async def scenario() -> None:
        h = Harness()
        await h.start()
        first = await form_single_member_group(h)
        second = h.join()
        await settle()
        # The first member keeps heartbeating but never rejoins.
        for _ in range(3):
            await h.tick(REBALANCE // 3 - 1)
            h.coord.heartbeat("g", first.member_id, 1)
        await h.tick(10)
        joined = await done(second)
        assert joined.error is ErrorCode.none
        assert joined.generation_id == 2
        assert joined.leader_id == joined.member_id
        assert [m.member_id for m in joined.members] == [joined.member_id]

    run(scenario)


def test_session_expiry_evicts_and_rebalances() -> None:
    async def scenario() -> None:
        h = Harness()
        await h.start()
        first = await form_single_member_group(h)
        await h.tick(SESSION - 1)
        assert h.coord.heartbeat("g", first.member_id, 1) is ErrorCode.none
        await h.tick(SESSION - 1)
        assert h.state() is GroupState.STABLE
        await h.tick(1)
        # The only member died: rebalance, then Empty with a new generation on disk.
        assert h.state() is GroupState.EMPTY
        group = h.coord.group("g")
        assert group is not None and group.generation_id == 2 and not group.members
        assert h.coord.heartbeat("g", first.member_id, 1) is ErrorCode.unknown_member_id
        partition = h.coord.partition_for("g")
        assert len(h.log.records(partition)) == 2  # Stable gen 1, then Empty gen 2

    run(scenario)


def test_expired_follower_lets_leader_continue() -> None:
    async def scenario() -> None:
        h = Harness(delay=100)
        await h.start()
        ja, jb = await join_together(h, h.join(), h.join())
        leader = h.sync(ja.member_id, 1, {ja.member_id: b"A", jb.member_id: b"B"})
        await done(h.sync(jb.member_id, 1))
        await done(leader)
        for _ in range(2):  # only the leader heartbeats
            await h.tick(SESSION // 2)
            h.coord.heartbeat("g", ja.member_id, 1)
        assert h.state() is GroupState.PREPARING_REBALANCE
        rejoin = await done(h.join(ja.member_id))
        assert rejoin.generation_id == 2
        assert [m.member_id for m in rejoin.members] == [ja.member_id]

    run(scenario)


def test_leave_group() -> None:
    async def scenario() -> None:
        h = Harness()
        await h.start()
        first = await form_single_member_group(h)
        result = await h.coord.leave_group("g", [(first.member_id, None), ("ghost", None)])
        assert result.error is ErrorCode.none
        assert [m.error for m in result.members] == [
            ErrorCode.none,
            ErrorCode.unknown_member_id,
        ]
        assert result.first_error is ErrorCode.unknown_member_id
        assert h.state() is GroupState.EMPTY
        unknown = await h.coord.leave_group("nope", [("x", None)])
        assert unknown.members[0].error is ErrorCode.unknown_member_id
        invalid = await h.coord.leave_group("", [("x", None)])
        assert invalid.error is ErrorCode.invalid_group_id

    run(scenario)


def test_leaving_during_rebalance_completes_join_for_the_rest() -> None:
    async def scenario() -> None:
        h = Harness(delay=100)
        await h.start()
        ja, jb = await join_together(h, h.join(), h.join())
        leader = h.sync(ja.member_id, 1, {ja.member_id: b"A", jb.member_id: b"B"})
        await done(leader)
        await done(h.sync(jb.member_id, 1))
        rejoin = h.join(ja.member_id)  # leader rejoins: rebalance
        await settle()
        assert not rejoin.done()
        await h.coord.leave_group("g", [(jb.member_id, None)])
        joined = await done(rejoin)
        assert joined.generation_id == 2 and len(joined.members) == 1

    run(scenario)


def test_invalid_session_timeout() -> None:
    async def scenario() -> None:
        h = Harness()
        await h.start()
        low = await done(h.join(session=h.config.group_min_session_timeout_ms - 1))
        high = await done(h.join(session=h.config.group_max_session_timeout_ms + 1))
        assert low.error is high.error is ErrorCode.invalid_session_timeout
        assert h.coord.group("g") is None

    run(scenario)


def test_inconsistent_protocols_are_refused() -> None:
    async def scenario() -> None:
        h = Harness()
        await h.start()
        await form_single_member_group(h)
        other = await done(h.join(protocols=(("roundrobin", b""),)))
        assert other.error is ErrorCode.inconsistent_group_protocol

    run(scenario)


def test_protocol_selection_by_vote() -> None:
    async def scenario() -> None:
        h = Harness(delay=100)
        await h.start()
        both = (("range", b"r"), ("roundrobin", b"rr"))
        prefers_rr = (("roundrobin", b"rr"), ("range", b"r"))
        results = await join_together(
            h, h.join(protocols=prefers_rr), h.join(protocols=prefers_rr), h.join(protocols=both)
        )
        assert {r.protocol_name for r in results} == {"roundrobin"}
        leader = next(r for r in results if r.members)
        assert {m.metadata for m in leader.members} == {b"rr"}

    run(scenario)


def test_requests_before_load_and_after_close() -> None:
    async def scenario() -> None:
        h = Harness()
        early = await done(h.join())
        assert early.error is ErrorCode.coordinator_load_in_progress
        assert h.coord.heartbeat("g", "m", 1) is ErrorCode.none
        sync = await done(h.sync("m", 1))
        assert sync.error is ErrorCode.rebalance_in_progress
        await h.start()
        await form_single_member_group(h)
        parked = h.join()
        await settle()
        h.coord.close()
        assert (await done(parked)).error is ErrorCode.not_coordinator
        assert h.coord.list_groups()[0] is ErrorCode.coordinator_not_available

    run(scenario)


def test_static_member_rejoin_keeps_generation_without_rebalance() -> None:
    async def scenario() -> None:
        h = Harness()
        await h.start()
        joined = await done(h.join(instance="host-1"))
        assert joined.member_id.startswith("host-1-")
        await done(h.sync(joined.member_id, 1, {joined.member_id: b"mine"}, instance="host-1"))
        # The process restarts and rejoins with no member id but the same instance id.
        again = await done(h.join(instance="host-1"))
        assert again.error is ErrorCode.none
        assert again.member_id != joined.member_id
        assert again.generation_id == 1
        assert again.leader_id == joined.member_id  # the old id: it must not reassign
        assert h.state() is GroupState.STABLE
        synced = await done(h.sync(again.member_id, 1, instance="host-1"))
        assert synced.assignment == b"mine"
        # The stale incarnation is fenced everywhere.
        stale_hb = h.coord.heartbeat("g", joined.member_id, 1, group_instance_id="host-1")
        assert stale_hb is ErrorCode.fenced_instance_id
        stale_join = await done(h.join(joined.member_id, instance="host-1"))
        assert stale_join.error is ErrorCode.fenced_instance_id
        current = h.coord.heartbeat("g", again.member_id, 1, group_instance_id="host-1")
        assert current is ErrorCode.none

    run(scenario)


def test_static_member_replacement_survives_restart() -> None:
    async def scenario() -> None:
        h = Harness()
        await h.start()
        joined = await done(h.join(instance="host-1"))
        await done(h.sync(joined.member_id, 1, {joined.member_id: b"mine"}))
        again = await done(h.join(instance="host-1"))
        restarted = GroupCoordinator(h.log, h.clock, h.config)
        await restarted.load()
        group = restarted.group("g")
        assert group is not None and group.state is GroupState.STABLE
        assert group.static_members == {"host-1": again.member_id}
        assert group.get(again.member_id).assignment == b"mine"

    run(scenario)


def test_static_member_is_kept_through_rebalance_and_removable_by_instance_id() -> None:
    async def scenario() -> None:
        h = Harness()
        await h.start()
        # A long session: the process is down for longer than the rebalance timeout.
        static = await done(h.join(instance="host-1", session=4 * REBALANCE))
        await done(h.sync(static.member_id, 1, {static.member_id: b"s"}))
        dynamic = h.join()
        await settle()
        # The static member never rejoins; after the rebalance timeout it is still a member.
        await h.tick(REBALANCE)
        joined = await done(dynamic)
        assert joined.generation_id == 2
        group = h.coord.group("g")
        assert group is not None and static.member_id in group.members
        result = await h.coord.leave_group("g", [("", "host-1")])
        assert result.members[0].error is ErrorCode.none
        assert static.member_id not in group.members
        assert "host-1" not in group.static_members

    run(scenario)


def test_follower_rejoin_in_stable_group_gets_current_generation() -> None:
    async def scenario() -> None:
        h = Harness(delay=100)
        await h.start()
        ja, jb = await join_together(h, h.join(), h.join())
        await done(h.sync(ja.member_id, 1, {ja.member_id: b"A", jb.member_id: b"B"}))
        await done(h.sync(jb.member_id, 1))
        again = await done(h.join(jb.member_id))
        assert again.generation_id == 1 and again.leader_id == ja.member_id
        assert h.state() is GroupState.STABLE

    run(scenario)


def test_member_that_never_syncs_is_removed() -> None:
    async def scenario() -> None:
        h = Harness(delay=100)
        await h.start()
        ja, jb = await join_together(h, h.join(), h.join())
        await done(h.sync(ja.member_id, 1, {ja.member_id: b"A", jb.member_id: b"B"}))
        for _ in range(REBALANCE // (SESSION // 2)):  # both heartbeat, b never syncs
            await h.tick(SESSION // 2)
            for m in (ja, jb):
                h.coord.heartbeat("g", m.member_id, 1)
        group = h.coord.group("g")
        assert group is not None and jb.member_id not in group.members
        assert h.state() is GroupState.PREPARING_REBALANCE

    run(scenario)


def test_sync_store_failure_is_propagated() -> None:
    async def scenario() -> None:
        h = Harness()
        await h.start()
        joined = await done(h.join())
        h.log.fail_with = OSError("disk full")
        synced = await done(h.sync(joined.member_id, 1, {joined.member_id: b"a"}))
        assert synced.error is ErrorCode.not_coordinator
        assert h.state() is GroupState.PREPARING_REBALANCE

    run(scenario)


def test_describe_and_list_groups() -> None:
    async def scenario() -> None:
        h = Harness()
        await h.start()
        joined = await done(h.join())
        pending = h.coord.describe_group("g")
        assert pending.state == "CompletingRebalance" and pending.protocol == ""
        assert pending.members[0].metadata == b""
        await done(h.sync(joined.member_id, 1, {joined.member_id: b"asg"}))
        summary = h.coord.describe_group("g")
        assert summary.error is ErrorCode.none
        assert (summary.state, summary.protocol_type, summary.protocol) == (
            "Stable",
            "consumer",
            "range",
        )
        (member,) = summary.members
        assert member.member_id == joined.member_id
        assert (member.client_id, member.client_host) == ("client", "/127.0.0.1")
        assert (member.metadata, member.assignment) == (subscription("t"), b"asg")
        missing = h.coord.describe_group("missing")
        assert (missing.error, missing.state) == (ErrorCode.none, "Dead")
        error, groups = h.coord.list_groups()
        assert error is ErrorCode.none
        assert [(g.group_id, g.protocol_type, g.state) for g in groups] == [
            ("g", "consumer", "Stable")
        ]

    run(scenario)


def test_cancelled_join_request_does_not_break_the_rebalance() -> None:
    async def scenario() -> None:
        h = Harness(delay=100)
        await h.start()
        gone = h.join()
        stays = h.join()
        await settle()
        gone.cancel()  # its client disconnected while parked
        await settle()
        await h.tick(100)
        await h.tick(100)
        joined = await done(stays)
        # The cancelled member still counted as joined: Kafka keeps it for this generation.
        assert joined.generation_id == 1 and joined.error is ErrorCode.none
        group = h.coord.group("g")
        assert group is not None and len(group.members) == 2

    run(scenario)


def test_duplicate_join_requests_share_one_answer() -> None:
    async def scenario() -> None:
        h = Harness()
        await h.start()
        first = await form_single_member_group(h)
        other = h.join()
        await settle()
        again_1 = h.join(first.member_id)
        again_2 = h.join(first.member_id)
        r1, r2, r3 = await done(again_1), await done(again_2), await done(other)
        assert r1 == r2 and r1.generation_id == r3.generation_id == 2

    run(scenario)


def test_new_member_join_times_out_after_five_minutes() -> None:
    async def scenario() -> None:
        h = Harness()
        await h.start()
        ten_minutes = 600_000
        first = await done(h.join(rebalance=ten_minutes))
        await done(h.sync(first.member_id, 1, {first.member_id: b""}))
        newcomer = h.join(rebalance=ten_minutes)
        await settle()
        # The old member heartbeats but never rejoins, so the rebalance waits ten minutes;
        # the newcomer, which cannot heartbeat yet, is given up after five.
        for _ in range(5 * 60 // 5):
            await h.tick(5_000)
            h.coord.heartbeat("g", first.member_id, 1)
        result = await done(newcomer)
        assert result.error is ErrorCode.unknown_member_id
        assert result.member_id == ""
        group = h.coord.group("g")
        assert group is not None and list(group.members) == [first.member_id]

    run(scenario)


def test_group_max_size() -> None:
    async def scenario() -> None:
        h = Harness(group_max_size=1)
        await h.start()
        await form_single_member_group(h)
        refused = await done(h.join())
        assert refused.error is ErrorCode.group_max_size_reached
        assert refused.member_id == ""

    run(scenario)


def test_static_replacement_reverts_when_the_write_fails() -> None:
    async def scenario() -> None:
        h = Harness()
        await h.start()
        joined = await done(h.join(instance="host-1"))
        await done(h.sync(joined.member_id, 1, {joined.member_id: b"mine"}))
        h.log.fail_with = OSError("disk gone")
        again = await done(h.join(instance="host-1"))
        assert again.error is ErrorCode.not_coordinator
        group = h.coord.group("g")
        assert group is not None and group.static_members == {"host-1": joined.member_id}
        h.log.fail_with = None
        assert h.coord.heartbeat("g", joined.member_id, 1, group_instance_id="host-1") is (
            ErrorCode.none
        )

    run(scenario)


def test_config_from_broker_config() -> None:
    config = GroupCoordinatorConfig.from_broker_config(BrokerConfig())
    assert config.offsets_topic_num_partitions == 50
    assert config.offsets_retention_ms == 7 * 24 * 3600 * 1000
    assert config.group_initial_rebalance_delay_ms == 3000
    assert config.consumer_migration_policy == "bidirectional"
    downgrade_only = BrokerConfig(group_consumer_migration_policy="downgrade")
    assert GroupCoordinatorConfig.from_broker_config(downgrade_only).consumer_migration_policy == (
        "downgrade"
    )


@pytest.mark.parametrize(
    ("policy", "upgrade", "downgrade"),
    [
        ("disabled", False, False),
        ("upgrade", True, False),
        ("downgrade", False, True),
        ("bidirectional", True, True),
    ],
)
def test_migration_policy_allows(policy: str, upgrade: bool, downgrade: bool) -> None:
    config = GroupCoordinatorConfig(consumer_migration_policy=policy)
    assert (config.upgrade_allowed, config.downgrade_allowed) == (upgrade, downgrade)


def test_unknown_migration_policy_is_refused() -> None:
    with pytest.raises(ValueError, match=r"migration\.policy"):
        GroupCoordinatorConfig(consumer_migration_policy="Upgrade")
