"""ConsumerGroupHeartbeat through the GroupCoordinator: epochs, hand-over, fencing, offsets."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import Any, TypeVar

import pytest

from onceflow.clock import ManualClock
from onceflow.coordinator.group import (
    GroupCoordinator,
    GroupCoordinatorConfig,
    InMemoryOffsetsLog,
    JoinResult,
    OffsetCommitEntry,
    TopicPartition,
)
from onceflow.coordinator.group.consumer_messages import HeartbeatRequest, HeartbeatResult
from onceflow.coordinator.group.consumer_records import encode_group_key, encode_member_key
from onceflow.errors import ErrorCode
from onceflow.records.builder import build_batch

T = TypeVar("T")
SESSION = 10_000
TOPIC_ID = uuid.uuid4()


def run(make_coro: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(make_coro())


class Harness:
    def __init__(self, **config: Any) -> None:
        self.clock = ManualClock()
        self.topics: dict[str, int] = {"t": 6}
        settings: dict[str, Any] = {
            "offsets_topic_num_partitions": 3,
            "consumer_session_timeout_ms": SESSION,
            "consumer_heartbeat_interval_ms": 1_000,
        }
        settings.update(config)
        self.log = InMemoryOffsetsLog()
        self.coord = GroupCoordinator(
            self.log,
            self.clock,
            GroupCoordinatorConfig(**settings),
            topics=lambda name: (TOPIC_ID, self.topics[name]) if name in self.topics else None,
            topic_names=lambda: list(self.topics),
        )
        run(self.coord.load)
        self.owned: dict[str, frozenset[TopicPartition]] = {}
        self.epochs: dict[str, int] = {}

    def hb(self, request: HeartbeatRequest) -> HeartbeatResult:
        return run(lambda: self.coord.consumer_group_heartbeat(request))

    def join(self, member: str, topics: tuple[str, ...] = ("t",), **kw: Any) -> HeartbeatResult:
        request = HeartbeatRequest(
            "g",
            member,
            0,
            rebalance_timeout_ms=5_000,
            subscribed_topic_names=topics,
            owned=frozenset(),
            **kw,
        )
        return self._apply(member, self.hb(request))

    def beat(self, member: str, **kw: Any) -> HeartbeatResult:
        """A regular heartbeat: the member's epoch and what it owns now."""
        fields: dict[str, Any] = {"owned": self.owned.get(member, frozenset())}
        fields.update(kw)
        request = HeartbeatRequest("g", member, self.epochs.get(member, 0), **fields)
        return self._apply(member, self.hb(request))

    async def join_classic(self) -> JoinResult:
        """A new member's classic JoinGroup (v3: no member id needed first)."""
        return await self.coord.join_group(
            "g",
            "",
            protocol_type="consumer",
            protocols=[("range", b"")],
            session_timeout_ms=10_000,
            rebalance_timeout_ms=10_000,
        )

    def _apply(self, member: str, result: HeartbeatResult) -> HeartbeatResult:
        if result.error is ErrorCode.none:
            self.epochs[member] = result.member_epoch
            if result.assignment is not None:  # a client revokes and assigns what it is told
                self.owned[member] = result.assignment
        return result

    def settle(self, *members: str, rounds: int = 6) -> None:
        for _ in range(rounds):
            for member in members:
                assert self.beat(member).error is ErrorCode.none

    def group(self) -> Any:
        group = self.coord.group("g")
        assert group is not None and group.consumer is not None
        return group.consumer


def covers(h: Harness, *members: str, count: int = 6) -> None:
    parts = [h.owned[m] for m in members]
    assert sum(len(p) for p in parts) == count
    assert frozenset().union(*parts) == {TopicPartition("t", p) for p in range(count)}


def test_join_gets_everything_then_shares_without_overlap() -> None:
    h = Harness()
    first = h.join("a")
    assert (first.error, first.member_epoch, first.heartbeat_interval_ms) == (
        ErrorCode.none,
        1,
        1_000,
    )
    assert len(h.owned["a"]) == 6
    h.join("b")
    assert h.owned["b"] == frozenset()  # nothing until a gives some up
    # Every step: no partition is held by both.
    for _ in range(4):
        for member in ("a", "b"):
            h.beat(member)
            assert not h.owned["a"] & h.owned.get("b", frozenset())
    covers(h, "a", "b")
    assert len(h.owned["a"]) == len(h.owned["b"]) == 3
    assert h.group().state.value == "Stable"
    assert h.epochs == {"a": 2, "b": 2}


def test_an_unchanged_assignment_is_not_sent_again() -> None:
    h = Harness()
    h.join("a")
    assert h.beat("a").assignment is None


def test_leave_frees_partitions_for_the_others() -> None:
    h = Harness()
    h.join("a")
    h.join("b")
    h.settle("a", "b")
    left = h.hb(HeartbeatRequest("g", "b", -1))
    assert (left.error, left.member_epoch) == (ErrorCode.none, -1)
    h.settle("a")
    covers(h, "a")


def test_session_timeout_fences_and_reassigns_without_revoking_the_survivor() -> None:
    h = Harness()
    h.join("a")
    h.join("b")
    h.settle("a", "b")
    kept = h.owned["a"]
    h.clock.advance(SESSION // 2)
    h.beat("a")
    h.clock.advance(SESSION // 2 + 1)
    run(h.coord.poll)
    assert set(h.group().members) == {"a"}
    result = h.beat("a")
    assert result.assignment is not None and result.assignment >= kept  # only additions
    covers(h, "a")
    gone = h.beat("b")
    assert gone.error is ErrorCode.unknown_member_id


def test_a_member_that_never_revokes_is_fenced_after_its_rebalance_timeout() -> None:
    h = Harness()
    h.join("a")
    h.join("b")
    all_six = h.owned["a"]
    for _ in range(4):  # keeps heartbeating, but keeps reporting every partition
        asked = h.hb(HeartbeatRequest("g", "a", h.epochs["a"], owned=all_six))
        assert asked.error is ErrorCode.none and asked.member_epoch == h.epochs["a"]
        h.clock.advance(2_000)
        run(h.coord.poll)
        if "a" not in h.group().members:
            break
    assert "a" not in h.group().members  # 6 s > its 5 s rebalance timeout
    h.settle("b")
    covers(h, "b")


def test_partition_growth_and_new_topics_bump_the_group_epoch() -> None:
    h = Harness()
    h.join("a", topics=("t", "later"))
    epoch = h.group().group_epoch
    h.topics["t"] = 8
    h.topics["later"] = 2
    h.settle("a")
    assert h.group().group_epoch == epoch + 1
    assert len(h.owned["a"]) == 10


@pytest.mark.parametrize(
    ("request_fields", "error"),
    [
        ({"server_assignor": "sticky"}, ErrorCode.unsupported_assignor),
        ({"rebalance_timeout_ms": -1}, ErrorCode.invalid_request),
        ({"subscribed_topic_names": None}, ErrorCode.invalid_request),
        ({"subscribed_topic_names": ()}, ErrorCode.invalid_request),
        ({"owned": None}, ErrorCode.invalid_request),
        ({"owned": frozenset({TopicPartition("t", 0)})}, ErrorCode.invalid_request),
        ({"member_id": ""}, ErrorCode.invalid_request),
        ({"instance_id": ""}, ErrorCode.invalid_request),
        ({"rack_id": ""}, ErrorCode.invalid_request),
        ({"subscribed_topic_regex": "t["}, ErrorCode.invalid_regular_expression),
        # Lookahead: Python's re takes it, RE2 (Kafka's RE2/J too) refuses it.
        ({"subscribed_topic_regex": "(?=t)t"}, ErrorCode.invalid_regular_expression),
        ({"member_epoch": -3}, ErrorCode.invalid_request),
        ({"group_id": ""}, ErrorCode.invalid_request),
    ],
)
def test_bad_joins(request_fields: dict[str, Any], error: ErrorCode) -> None:
    h = Harness()
    good = HeartbeatRequest(
        "g", "m", 0, rebalance_timeout_ms=5_000, subscribed_topic_names=("t",), owned=frozenset()
    )
    result = h.hb(replace(good, **request_fields))
    assert result.error is error
    assert result.message


def test_a_regex_that_would_backtrack_for_ever_is_matched_in_linear_time() -> None:
    """With Python's re, `(a+)+$` against a long name of a's and a 'b' never ends: the
    broker's event loop would stop. RE2 answers at once."""
    h = Harness()
    h.topics["a" * 40 + "b"] = 1
    result = h.hb(
        HeartbeatRequest(
            "g",
            "m",
            0,
            rebalance_timeout_ms=5_000,
            subscribed_topic_names=("t",),
            subscribed_topic_regex="(a+)+$",
            owned=frozenset(),
        )
    )
    assert result.error is ErrorCode.none


# A v0 first heartbeat: no member id, the coordinator makes one.
V0_JOIN = HeartbeatRequest(
    "g",
    "",
    0,
    rebalance_timeout_ms=5_000,
    subscribed_topic_names=("t",),
    owned=frozenset(),
    api_version=0,
)


def test_v0_lets_the_coordinator_make_the_member_id() -> None:
    h = Harness()
    request = V0_JOIN
    result = h.hb(request)
    assert result.error is ErrorCode.none and result.member_id


def test_a_v0_join_that_could_not_be_written_leaves_no_member_behind() -> None:
    h = Harness()
    h.join("a")
    request = V0_JOIN
    h.log.fail_with = OSError("disk gone")
    assert h.hb(request).error is ErrorCode.not_coordinator
    assert set(h.group().members) == {"a"}  # the id it was given never reached the client
    h.log.fail_with = None
    retried = h.hb(request)
    assert retried.error is ErrorCode.none
    assert set(h.group().members) == {"a", retried.member_id}
    assert set(reloaded(h).group().members) == {"a", retried.member_id}


def test_member_epochs_are_fenced_as_kafka_fences_them() -> None:
    h = Harness()
    h.join("a")
    h.join("b")
    h.settle("a", "b")
    epoch = h.epochs["a"]
    ahead = h.hb(HeartbeatRequest("g", "a", epoch + 1, owned=frozenset()))
    assert ahead.error is ErrorCode.fenced_member_epoch
    previous = h.group().members["a"].recon.previous_epoch
    # The previous epoch, but owning a partition it no longer has: fenced.
    behind = h.hb(HeartbeatRequest("g", "a", previous, owned=h.owned["a"] | h.owned["b"]))
    assert behind.error is ErrorCode.fenced_member_epoch
    unknown = h.hb(HeartbeatRequest("g", "zz", 1, owned=frozenset()))
    assert unknown.error is ErrorCode.unknown_member_id
    # The previous epoch with a subset of the assignment: a lost response, accepted.
    lost = h.hb(HeartbeatRequest("g", "a", previous, owned=h.owned["a"]))
    assert lost.error is ErrorCode.none and lost.member_epoch == epoch


def test_a_heartbeat_to_an_unknown_group_is_group_id_not_found() -> None:
    """As Kafka: only a join (epoch 0) creates a group."""
    h = Harness()
    result = h.hb(HeartbeatRequest("g", "a", 5, owned=frozenset()))
    assert result.error is ErrorCode.group_id_not_found


def test_commits_need_the_current_member_epoch() -> None:
    h = Harness()
    h.join("a")
    epoch = h.epochs["a"]
    tp = TopicPartition("t", 0)
    entry = {tp: OffsetCommitEntry(5, -1, "")}

    async def body() -> None:
        c = h.coord
        assert (await c.commit_offsets("g", "a", epoch, entry))[tp] is ErrorCode.none
        assert (await c.commit_offsets("g", "a", epoch - 1, entry))[
            tp
        ] is ErrorCode.stale_member_epoch
        assert (await c.commit_offsets("g", "x", epoch, entry))[tp] is ErrorCode.unknown_member_id
        assert (await c.commit_offsets("g", "", -1, entry))[tp] is ErrorCode.unknown_member_id
        old = await c.commit_offsets("g", "a", epoch, entry, member_epochs=False)
        assert old[tp] is ErrorCode.unsupported_version
        txn = await c.txn_offset_commit("tx", "g", 7, 0, "a", epoch - 1, None, entry)
        assert txn[tp] is ErrorCode.stale_member_epoch
        txn = await c.txn_offset_commit("tx", "g", 7, 0, "a", epoch, None, entry)
        assert txn[tp] is ErrorCode.none
        # Without any member fields (TxnOffsetCommit v0-v2, or a producer outside the
        # group), a transactional commit is not checked: the transaction fences zombies.
        txn = await c.txn_offset_commit("tx2", "g", 8, 0, "", -1, None, entry)
        assert txn[tp] is ErrorCode.none
        txn = await c.txn_offset_commit("tx3", "g", 9, 0, "", -1, "static-1", entry)
        assert txn[tp] is ErrorCode.unknown_member_id
        fetched = c.fetch_offsets("g", [tp], member_id="a", member_epoch=epoch)
        assert fetched.error is ErrorCode.none and fetched.partitions[tp].offset == 5
        assert c.fetch_offsets("g", [tp], member_id="a", member_epoch=0).error is (
            ErrorCode.stale_member_epoch
        )
        assert c.fetch_offsets("g", [tp], member_id="x", member_epoch=1).error is (
            ErrorCode.unknown_member_id
        )
        assert c.fetch_offsets("g", [tp]).error is ErrorCode.none  # tools: no member
        # Once empty, anyone may commit without an epoch (tools, reset-offsets).
        await c.consumer_group_heartbeat(HeartbeatRequest("g", "a", -1))
        assert (await c.commit_offsets("g", "", -1, entry))[tp] is ErrorCode.none

    run(body)


def test_listing_describing_and_the_classic_protocol() -> None:
    h = Harness()
    h.join("a")

    async def body() -> None:
        c = h.coord
        _, listed = c.list_groups()
        (overview,) = listed
        assert (overview.group_type, overview.protocol_type) == ("consumer", "consumer")
        assert c.describe_group("g").state == "Dead"  # not a classic group
        assert c.consumer_group("g")[0] is ErrorCode.none
        join = await h.join_classic()
        # Its metadata is no ConsumerProtocolSubscription (test_consumer_group_classic_members
        # has classic members that join).
        assert join.error is ErrorCode.inconsistent_group_protocol
        assert (await c.delete_groups(["g"]))["g"] is ErrorCode.non_empty_group

    run(body)


def test_an_empty_group_changes_protocol_both_ways() -> None:
    h = Harness(group_initial_rebalance_delay_ms=0)
    h.join("a")
    h.hb(HeartbeatRequest("g", "a", -1))

    async def body() -> None:
        c = h.coord
        join = await h.join_classic()
        assert join.error is ErrorCode.none  # an empty consumer group became classic
        group = c.group("g")
        assert group is not None and group.consumer is None
        # A classic group with a member whose metadata is no ConsumerProtocolSubscription
        # cannot be upgraded: it refuses consumer-protocol members.
        refused = await c.consumer_group_heartbeat(
            HeartbeatRequest(
                "g",
                "b",
                0,
                rebalance_timeout_ms=1,
                subscribed_topic_names=("t",),
                owned=frozenset(),
            )
        )
        assert refused.error is ErrorCode.group_id_not_found
        assert c.consumer_group("g")[0] is ErrorCode.group_id_not_found

    run(body)


def test_group_max_size() -> None:
    h = Harness(consumer_max_size=1)
    h.join("a")
    assert h.join("b").error is ErrorCode.group_max_size_reached


def test_the_most_requested_assignor_wins() -> None:
    h = Harness()
    h.join("a", server_assignor="range")
    assert h.group().assignor_name == "range"
    h.join("b")
    assert h.group().assignor_name == "range"
    h2 = Harness()
    h2.join("a")
    assert h2.group().assignor_name == "uniform"


def reloaded(h: Harness, *, compact: bool = False) -> Harness:
    """A new coordinator over the same log (a restart, or a failover to another broker)."""
    log = h.log
    if compact:
        for partition in list(log.batches):
            log.compact(partition)
    other = Harness.__new__(Harness)
    other.clock, other.topics, other.log = h.clock, h.topics, log
    other.coord = GroupCoordinator(
        log,
        h.clock,
        h.coord.config,
        topics=lambda name: (TOPIC_ID, other.topics[name]) if name in other.topics else None,
        topic_names=lambda: list(other.topics),
    )
    run(other.coord.load)
    other.owned, other.epochs = dict(h.owned), dict(h.epochs)
    return other


@pytest.mark.parametrize("compact", [False, True])
def test_a_restart_keeps_members_epochs_and_assignments(compact: bool) -> None:
    h = Harness()
    h.join("a", server_assignor="range")
    h.join("b")
    h.beat("a")  # a revokes; b's share is now free but not yet given
    before = h.group()
    after = reloaded(h, compact=compact)
    group = after.group()
    assert (group.group_epoch, group.assignment_epoch, group.assignor_name) == (
        before.group_epoch,
        before.assignment_epoch,
        "range",
    )
    assert group.target == before.target
    for member_id, member in before.members.items():
        restored = group.members[member_id]
        assert restored.recon == member.recon
        assert restored.subscribed == member.subscribed
    # The members carry on at their epochs: no UNKNOWN_MEMBER_ID, no fencing, and the
    # hand-over finishes with every partition owned once.
    after.settle("a", "b")
    covers(after, "a", "b")
    assert after.group().state.value == "Stable"


def test_an_undecodable_group_or_member_record_is_skipped_at_load() -> None:
    """One bad record must not keep the partition from loading: the group's value before
    it stands, and a member whose only value is bad is not restored."""
    h = Harness()
    h.join("a")
    before = h.group()
    truncated = b"\x00\x00\x00"  # a value version, then nothing
    batch = build_batch(
        [
            (encode_group_key("g"), truncated, ()),
            (encode_member_key("g", "ghost"), truncated, ()),
        ],
        timestamp_ms=0,
    )
    run(lambda: h.log.append(h.coord.partition_for("g"), batch))
    group = reloaded(h).group()
    assert (group.group_epoch, group.assignor_name) == (before.group_epoch, before.assignor_name)
    assert set(group.members) == {"a"}


def test_a_member_that_died_with_the_coordinator_is_fenced_after_the_load() -> None:
    h = Harness()
    h.join("a")
    h.join("b")
    h.settle("a", "b")
    after = reloaded(h)
    after.clock.advance(SESSION // 2)
    after.beat("a")
    after.clock.advance(SESSION // 2 + 1)
    run(after.coord.poll)  # b never came back
    after.settle("a")
    covers(after, "a")
    # And that is durable too: b stays gone after another restart.
    assert set(reloaded(after).group().members) == {"a"}


def test_leaving_deleting_and_changing_protocol_are_durable() -> None:
    h = Harness(group_initial_rebalance_delay_ms=0)
    h.join("a")
    h.hb(HeartbeatRequest("g", "a", -1))
    assert reloaded(h).group().members == {}

    async def to_classic() -> None:
        join = await h.join_classic()
        assert join.error is ErrorCode.none

    run(to_classic)
    # Its consumer-protocol records are deleted (the classic one comes with a SyncGroup).
    assert reloaded(h).coord.group("g") is None

    other = Harness()
    other.join("x")
    other.hb(HeartbeatRequest("g", "x", -1))
    assert run(lambda: other.coord.delete_groups(["g"]))["g"] is ErrorCode.none
    assert reloaded(other).coord.group("g") is None


def test_a_heartbeat_whose_records_cannot_be_written_fails_and_they_are_written_later() -> None:
    h = Harness()
    h.join("a")
    h.join("b")
    h.settle("a", "b")
    h.log.fail_with = OSError("disk gone")
    assert h.beat("a", client_id="renamed").error is ErrorCode.not_coordinator
    h.log.fail_with = None
    h.beat("b", client_id="renamed-too")  # this write brings a's record along
    restored = reloaded(h).group()
    assert restored.members["a"].client_id == "renamed"
    assert restored.members["b"].client_id == "renamed-too"


def test_a_leave_that_could_not_be_written_is_not_undone_by_deleting_the_group() -> None:
    h = Harness(group_initial_rebalance_delay_ms=0)
    h.join("a")
    h.log.fail_with = OSError("disk gone")
    h.hb(HeartbeatRequest("g", "a", -1))  # left, but its tombstone was not written
    h.log.fail_with = None
    assert run(lambda: h.coord.delete_groups(["g"]))["g"] is ErrorCode.none
    h.join("z")
    assert set(reloaded(h).group().members) == {"z"}


def test_a_change_of_protocol_that_could_not_be_written_leaves_the_group_as_it_was() -> None:
    h = Harness(group_initial_rebalance_delay_ms=0)
    h.join("a")
    h.hb(HeartbeatRequest("g", "a", -1))
    h.log.fail_with = OSError("disk gone")
    joined = run(h.join_classic)
    assert joined.error is ErrorCode.not_coordinator  # the client finds its coordinator again
    group = h.coord.group("g")
    assert group is not None and group.consumer is not None and not group.members


def test_an_emptied_classic_groups_late_record_is_not_written_after_its_upgrade() -> None:
    h = Harness(group_initial_rebalance_delay_ms=0)

    async def body() -> None:
        c = h.coord
        joined = await h.join_classic()
        assert joined.error is ErrorCode.none
        group = c.group("g")
        assert group is not None
        h.clock.advance(10_001)
        # The member expires: the emptied group's record waits for the next flush ...
        c._rebalancer.expire(group)
        assert group.state.value == "Empty"
        # ... and a consumer-protocol member comes first, making it a consumer group.
        assert (
            await c.consumer_group_heartbeat(
                HeartbeatRequest(
                    "g",
                    "a",
                    0,
                    rebalance_timeout_ms=5_000,
                    subscribed_topic_names=("t",),
                    owned=frozenset(),
                )
            )
        ).error is ErrorCode.none
        written = {p: len(batches) for p, batches in h.log.batches.items()}
        await c._rebalancer.flush()
        # Not written behind the classic record's tombstone, where it would bring the
        # classic group back beside the consumer group.
        assert {p: len(batches) for p, batches in h.log.batches.items()} == written

    run(body)
    assert set(reloaded(h).group().members) == {"a"}


def test_a_regex_subscription_follows_the_topics() -> None:
    h = Harness()
    h.topics.update({"orders-eu": 2, "orders-us": 2, "other": 5})
    h.join("a", topics=(), subscribed_topic_regex="orders-.*")
    assert {tp.topic for tp in h.owned["a"]} == {"orders-eu", "orders-us"}
    assert len(h.owned["a"]) == 4
    # A new matching topic joins the subscription once the regexes are matched again.
    h.topics["orders-asia"] = 1
    h.settle("a")
    assert len(h.owned["a"]) == 4
    h.clock.advance(10_000)
    h.settle("a")
    assert len(h.owned["a"]) == 5
    # Names and a regex together; "" drops the regex.
    h.beat("a", subscribed_topic_names=("other",), subscribed_topic_regex="")
    h.settle("a")
    assert {tp.topic for tp in h.owned["a"]} == {"other"}


def test_a_regex_survives_a_restart() -> None:
    h = Harness()
    h.topics.update({"orders-eu": 2})
    h.join("a", topics=(), subscribed_topic_regex="orders-.*")
    after = reloaded(h)
    assert after.group().members["a"].regex == "orders-.*"
    after.settle("a")
    assert {tp.topic for tp in after.owned["a"]} == {"orders-eu"}


def test_a_static_member_comes_back_to_its_partitions_without_a_rebalance() -> None:
    h = Harness()
    h.join("a1", instance_id="i-a")
    h.join("b")
    h.settle("a1", "b")
    kept, epoch = h.owned["a1"], h.group().group_epoch
    left = h.hb(HeartbeatRequest("g", "a1", -2, instance_id="i-a"))
    assert (left.error, left.member_epoch) == (ErrorCode.none, -2)
    h.settle("b")  # b gets nothing of a's meanwhile
    assert not h.owned["b"] & kept
    # A new incarnation (new member id) takes its place and its partitions.
    back = h.join("a2", instance_id="i-a")
    assert back.error is ErrorCode.none and h.owned["a2"] == kept
    assert h.group().group_epoch == epoch
    assert "a1" not in h.group().members
    zombie = h.hb(HeartbeatRequest("g", "a1", 3, instance_id="i-a", owned=frozenset()))
    assert zombie.error is ErrorCode.fenced_instance_id
    # And durably so.
    restored = reloaded(h).group()
    assert restored.static_members == {"i-a": "a2"}


def test_an_instance_id_in_use_is_not_released() -> None:
    h = Harness()
    h.join("a1", instance_id="i-a")
    assert h.join("a2", instance_id="i-a").error is ErrorCode.unreleased_instance_id
    unknown = h.hb(HeartbeatRequest("g", "a1", 1, instance_id="i-zz", owned=frozenset()))
    assert unknown.error is ErrorCode.unknown_member_id


def test_a_static_member_that_never_returns_expires() -> None:
    h = Harness()
    h.join("a1", instance_id="i-a")
    h.join("b")
    h.settle("a1", "b")
    h.hb(HeartbeatRequest("g", "a1", -2, instance_id="i-a"))
    for _ in range(3):
        h.clock.advance(SESSION // 2)
        h.beat("b")
        run(h.coord.poll)
    h.settle("b")
    covers(h, "b")
    assert h.group().static_members == {}
