"""Classic members (JoinGroup/SyncGroup/Heartbeat/LeaveGroup) inside a consumer-protocol
group: the server-side assignor's partitions in ConsumerProtocolAssignment, revocations
through rebalances, fencing, commits, and the records that bring them back after a load."""

from __future__ import annotations

import asyncio
import io
import struct
from typing import Any

from kio.schema.consumer_protocol_assignment.v1 import ConsumerProtocolAssignment
from kio.schema.consumer_protocol_subscription.v1 import ConsumerProtocolSubscription
from kio.schema.consumer_protocol_subscription.v1.data import TopicPartition as OwnedTopic
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32
from tests.unit.test_consumer_group_protocol import TOPIC_ID, Harness, run

from onceflow.coordinator.group import (
    GroupCoordinator,
    GroupCoordinatorConfig,
    JoinResult,
    OffsetCommitEntry,
    TopicPartition,
)
from onceflow.coordinator.group.consumer_embedded import encode_assignment
from onceflow.coordinator.group.consumer_messages import HeartbeatRequest
from onceflow.coordinator.group.consumer_records import decode_member_value, encode_member_value
from onceflow.errors import ErrorCode

SESSION = 10_000
REBALANCE = 5_000


def subscription(topics: tuple[str, ...], owned: frozenset[TopicPartition] = frozenset()) -> bytes:
    by_topic: dict[str, list[i32]] = {}
    for tp in sorted(owned):
        by_topic.setdefault(tp.topic, []).append(i32(tp.partition))
    body = ConsumerProtocolSubscription(
        topics=topics,
        user_data=None,
        owned_partitions=tuple(
            OwnedTopic(topic=t, partitions=tuple(p)) for t, p in by_topic.items()
        ),
    )
    buf = io.BytesIO()
    buf.write(struct.pack(">h", 1))
    entity_writer(ConsumerProtocolSubscription)(buf, body)
    return buf.getvalue()


def assignment(data: bytes) -> frozenset[TopicPartition]:
    assert struct.unpack_from(">h", data)[0] == 1  # the version the member subscribed with
    body, _ = entity_reader(ConsumerProtocolAssignment)(data, 2)
    return frozenset(
        TopicPartition(tp.topic, int(p)) for tp in body.assigned_partitions for p in tp.partitions
    )


class Mixed(Harness):
    """A consumer-protocol member "new" and classic members driven like a client would."""

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        self.classic_ids: dict[str, str] = {}
        self.generations: dict[str, int] = {}

    def classic_join(
        self, name: str, owned: frozenset[TopicPartition] | None = None, **kw: Any
    ) -> JoinResult:
        kept = self.owned.get(name, frozenset()) if owned is None else owned
        result = run(
            lambda: self.coord.join_group(
                "g",
                self.classic_ids.get(name, ""),
                protocol_type=kw.pop("protocol_type", "consumer"),
                protocols=[("cooperative-sticky", subscription(("t",), kept))],
                session_timeout_ms=SESSION,
                rebalance_timeout_ms=REBALANCE,
                **kw,
            )
        )
        if result.error is ErrorCode.none:
            self.classic_ids[name] = result.member_id
            self.generations[name] = result.generation_id
        return result

    def classic_sync(self, name: str) -> ErrorCode:
        result = run(
            lambda: self.coord.sync_group(
                "g",
                self.generations[name],
                self.classic_ids[name],
                protocol_type="consumer",
                protocol_name="cooperative-sticky",
            )
        )
        if result.error is ErrorCode.none:
            self.owned[name] = assignment(result.assignment)
        return result.error

    def classic_beat(self, name: str) -> ErrorCode:
        return self.coord.heartbeat("g", self.classic_ids[name], self.generations[name])

    def cooperative_round(self, name: str) -> None:
        """What a cooperative client does: heartbeat; rejoin when told, with what it owns."""
        if self.classic_beat(name) is ErrorCode.rebalance_in_progress:
            assert self.classic_join(name).error is ErrorCode.none
            assert self.classic_sync(name) is ErrorCode.none


def test_a_classic_member_joins_a_consumer_group_and_gets_a_share_by_rebalances() -> None:
    h = Mixed()
    h.join("new")
    assert len(h.owned["new"]) == 6
    joined = h.classic_join("old")
    # Answered at once: no leader, no member list; the member epoch as generation.
    assert joined.error is ErrorCode.none
    assert (joined.leader_id, joined.members, joined.protocol_name) == (
        "",
        (),
        "cooperative-sticky",
    )
    assert joined.protocol_type == "consumer"
    assert h.classic_sync("old") is ErrorCode.none
    assert h.owned["old"] == frozenset()  # "new" has not released anything yet
    for _ in range(6):
        h.beat("new")
        h.cooperative_round("old")
        assert not h.owned["new"] & h.owned["old"]
    assert len(h.owned["new"]) == len(h.owned["old"]) == 3
    assert h.group().members[h.classic_ids["old"]].classic.session_timeout_ms == SESSION
    assert h.group().state.value == "Stable"


def test_a_classic_member_revokes_before_the_others_get_its_partitions() -> None:
    h = Mixed()
    h.join("new")
    h.classic_join("old")
    h.classic_sync("old")
    h.settle("new")
    for _ in range(4):
        h.cooperative_round("old")
        h.beat("new")
    assert len(h.owned["old"]) == 3
    h.join("newer")
    h.settle("new", "newer")
    # "old" must give one up: it is told to rejoin; its join keeps it at its epoch.
    assert h.classic_beat("old") is ErrorCode.rebalance_in_progress
    still = h.owned["old"]
    joined = h.classic_join("old")
    assert joined.generation_id == h.generations["old"]
    h.classic_sync("old")
    assert len(h.owned["old"]) == 2 and h.owned["old"] < still
    revoked = still - h.owned["old"]
    assert not revoked & h.owned.get("newer", frozenset())  # not given away before
    for _ in range(4):
        h.cooperative_round("old")
        h.settle("new", "newer", rounds=1)
    parts = [h.owned[m] for m in ("new", "newer", "old")]
    assert sum(len(p) for p in parts) == 6 and len(frozenset().union(*parts)) == 6


def test_classic_members_errors() -> None:
    h = Mixed()
    h.join("new")
    wrong_type = h.classic_join("x", protocol_type="connect")
    assert wrong_type.error is ErrorCode.inconsistent_group_protocol
    required = h.classic_join("x", require_known_member_id=True)
    assert required.error is ErrorCode.member_id_required and required.member_id
    h.classic_join("old")
    old_id = h.classic_ids["old"]
    assert h.coord.heartbeat("g", old_id, 99) is ErrorCode.illegal_generation
    assert h.coord.heartbeat("g", "nobody", 1) is ErrorCode.unknown_member_id
    new_id = next(m for m in h.group().members if m != old_id)
    assert h.coord.heartbeat("g", new_id, 1) is ErrorCode.unknown_member_id  # not classic
    tp = TopicPartition("t", 0)
    commit = {tp: OffsetCommitEntry(5)}
    # A classic member commits with its generation (no member epochs in its OffsetCommit).
    stale = run(lambda: h.coord.commit_offsets("g", old_id, 99, commit, member_epochs=False))
    assert stale[tp] is ErrorCode.illegal_generation
    generation = h.generations["old"]
    ok = run(lambda: h.coord.commit_offsets("g", old_id, generation, commit, member_epochs=False))
    assert ok[tp] is ErrorCode.none


def test_a_classic_member_that_does_not_sync_or_is_silent_is_fenced() -> None:
    h = Mixed()
    h.join("new")
    h.classic_join("late")
    h.clock.advance(REBALANCE + 1)
    h.beat("new")
    run(h.coord.poll)
    assert h.classic_ids["late"] not in h.group().members
    h.classic_join("quiet")
    h.classic_sync("quiet")
    h.clock.advance(SESSION + 1)
    h.beat("new")
    run(h.coord.poll)
    assert h.classic_ids["quiet"] not in h.group().members


def test_leave_group_removes_a_classic_member() -> None:
    h = Mixed()
    h.join("new")
    h.classic_join("old")
    h.classic_sync("old")
    left = run(lambda: h.coord.leave_group("g", [(h.classic_ids["old"], None)]))
    assert [m.error for m in left.members] == [ErrorCode.none]
    assert h.classic_ids["old"] not in h.group().members
    again = run(lambda: h.coord.leave_group("g", [(h.classic_ids["old"], None)]))
    assert [m.error for m in again.members] == [ErrorCode.unknown_member_id]


def test_leave_group_by_instance_id_removes_any_static_member() -> None:
    # kafka-consumer-groups --delete --members / AdminClient.remove_members_from_consumer_group
    # removes static members by instance id, whatever protocol they use.
    h = Mixed()
    h.join("new", instance_id="i-new")
    h.classic_join("old")
    h.classic_sync("old")
    by_member_id = run(lambda: h.coord.leave_group("g", [("new", None)]))
    assert [m.error for m in by_member_id.members] == [ErrorCode.unknown_member_id]
    removed = run(lambda: h.coord.leave_group("g", [("", "i-new")]))
    assert [m.error for m in removed.members] == [ErrorCode.none]
    # Its last KIP-848 member gone, the group of classic members turns classic.
    group = h.coord.group("g")
    assert group is not None and group.consumer is None
    assert list(group.members) == [h.classic_ids["old"]]


def test_classic_members_come_back_from_the_log() -> None:
    h = Mixed()
    h.join("new")
    h.classic_join("old")
    h.classic_sync("old")
    member = h.group().members[h.classic_ids["old"]]
    decoded = decode_member_value(member.member_id, encode_member_value(member, frozenset()))
    assert decoded.member.classic == member.classic
    reloaded = GroupCoordinator(
        h.log,
        h.clock,
        GroupCoordinatorConfig(offsets_topic_num_partitions=3),
        topics=lambda name: (TOPIC_ID, 6),
    )
    run(reloaded.load)
    group = reloaded.group("g")
    assert group is not None and group.consumer is not None
    assert group.consumer.members[member.member_id].classic == member.classic


def classic_group(h: Mixed, owned: frozenset[TopicPartition]) -> str:
    """A classic group of one member that synced `owned` as its assignment."""

    async def body() -> str:
        first = await h.coord.join_group(
            "g",
            "",
            protocol_type="consumer",
            protocols=[("cooperative-sticky", subscription(("t",)))],
            session_timeout_ms=SESSION,
            rebalance_timeout_ms=REBALANCE,
        )
        synced = await h.coord.sync_group(
            "g",
            first.generation_id,
            first.member_id,
            assignments={first.member_id: encode_assignment(owned, 1)},
        )
        assert synced.error is ErrorCode.none
        return first.member_id

    member_id = run(body)
    h.classic_ids["old"] = member_id
    group = h.coord.group("g")
    assert group is not None
    h.generations["old"] = group.generation_id
    h.owned["old"] = owned
    return member_id


def test_a_consumer_member_upgrades_a_classic_group_keeping_its_members() -> None:
    h = Mixed(group_initial_rebalance_delay_ms=0)
    everything = frozenset(TopicPartition("t", p) for p in range(6))
    old_id = classic_group(h, everything)
    generation = h.generations["old"]
    h.join("new")
    consumer = h.group()
    member = consumer.members[old_id]
    # Kept at the classic generation with its assignment, as a classic member.
    assert (member.recon.epoch, member.recon.assigned) == (generation, everything)
    assert member.classic is not None and member.classic.session_timeout_ms == SESSION
    assert h.owned["new"] == frozenset()  # nothing until the classic member revokes
    classic = h.coord.group("g")
    assert classic is not None and not classic.members and classic.protocol_type is None
    # Told to rejoin; it gives up half and the new member gets it.
    assert h.classic_beat("old") is ErrorCode.rebalance_in_progress
    for _ in range(4):
        h.cooperative_round("old")
        h.beat("new")
    assert len(h.owned["old"]) == len(h.owned["new"]) == 3
    assert not h.owned["old"] & h.owned["new"]
    # The log says the same: the classic record is gone, the consumer group is back.
    reloaded = GroupCoordinator(
        h.log,
        h.clock,
        GroupCoordinatorConfig(offsets_topic_num_partitions=3),
        topics=lambda name: (TOPIC_ID, 6),
    )
    run(reloaded.load)
    group = reloaded.group("g")
    assert group is not None and group.consumer is not None and not group.members
    assert group.consumer.members[old_id].recon.assigned == h.owned["old"]


def test_upgrades_disabled_leave_a_classic_group_refusing_consumer_members() -> None:
    for policy in ("disabled", "downgrade"):
        h = Mixed(group_initial_rebalance_delay_ms=0, consumer_migration_policy=policy)
        classic_group(h, frozenset())
        refused = h.join("new")
        assert refused.error is ErrorCode.group_id_not_found
        group = h.coord.group("g")
        assert group is not None and group.consumer is None and group.members


def test_the_last_consumer_member_leaving_downgrades_to_a_rebalancing_classic_group() -> None:
    h = Mixed()
    h.join("new")
    h.classic_join("old")
    h.classic_sync("old")
    for _ in range(4):
        h.beat("new")
        h.cooperative_round("old")
    epoch = h.group().group_epoch
    h.hb(HeartbeatRequest("g", "new", -1))
    group = h.coord.group("g")
    assert group is not None and group.consumer is None
    old_id = h.classic_ids["old"]
    assert list(group.members) == [old_id]
    assert (group.generation_id, group.protocol) == (epoch + 1, "cooperative-sticky")
    assert assignment(group.members[old_id].assignment) == h.owned["old"]
    assert group.state.value == "PreparingRebalance"  # everyone rejoins, the leader assigns
    # The classic member rejoins; a classic rebalance gives it everything.
    rejoined = h.classic_join("old")
    assert (rejoined.error, rejoined.leader_id) == (ErrorCode.none, old_id)
    # The log: consumer records gone, the classic record back.
    reloaded = GroupCoordinator(
        h.log, h.clock, GroupCoordinatorConfig(offsets_topic_num_partitions=3)
    )
    run(reloaded.load)
    again = reloaded.group("g")
    assert again is not None and again.consumer is None and list(again.members) == [old_id]


def test_a_downgrade_that_could_not_be_written_is_undone_and_done_by_a_later_poll() -> None:
    h = Mixed()
    h.join("new")
    h.classic_join("old")
    h.classic_sync("old")
    appends = 0
    append = h.log.append

    async def the_second_append_fails(*args: Any, **kwargs: Any) -> Any:
        nonlocal appends
        appends += 1
        if appends == 2:  # the leave's tombstone is written, the downgrade is not
            raise OSError("disk gone")
        return await append(*args, **kwargs)

    h.log.append = the_second_append_fails  # type: ignore[method-assign]
    h.hb(HeartbeatRequest("g", "new", -1))
    assert appends == 2
    old_id = h.classic_ids["old"]
    assert set(h.group().members) == {old_id}  # still a consumer group, as in the log
    restarted = GroupCoordinator(
        h.log, h.clock, GroupCoordinatorConfig(offsets_topic_num_partitions=3)
    )
    run(restarted.load)
    before = restarted.group("g")
    assert before is not None and before.consumer is not None
    assert set(before.consumer.members) == {old_id}
    run(h.coord.poll)  # the disk is back: the downgrade is tried again
    group = h.coord.group("g")
    assert group is not None and group.consumer is None and list(group.members) == [old_id]
    assert group.state.value == "PreparingRebalance"


def test_no_downgrade_when_the_policy_forbids_it_or_consumer_members_remain() -> None:
    for policy in ("disabled", "upgrade"):
        h = Mixed(consumer_migration_policy=policy)
        h.join("new")
        h.classic_join("old")
        h.hb(HeartbeatRequest("g", "new", -1))
        assert h.classic_ids["old"] in h.group().members  # still a consumer group
    h = Mixed()
    h.join("new")
    h.join("newer")
    h.classic_join("old")
    h.hb(HeartbeatRequest("g", "new", -1))
    assert set(h.group().members) == {"newer", h.classic_ids["old"]}


def test_a_fenced_consumer_member_downgrades_the_group_too() -> None:
    h = Mixed()
    h.join("new")
    h.classic_join("old")
    h.classic_sync("old")
    h.clock.advance(SESSION - 4_000)
    h.classic_beat("old")
    h.clock.advance(5_000)  # "new" is past its session, "old" is not
    run(h.coord.poll)
    group = h.coord.group("g")
    assert group is not None and group.consumer is None
    assert list(group.members) == [h.classic_ids["old"]]


def test_only_consumer_protocol_classic_groups_are_upgraded() -> None:
    h = Mixed(group_initial_rebalance_delay_ms=0)

    async def body() -> None:
        joined = await h.coord.join_group(
            "g",
            "",
            protocol_type="connect",
            protocols=[("default", b"")],
            session_timeout_ms=SESSION,
            rebalance_timeout_ms=REBALANCE,
        )
        assert joined.error is ErrorCode.none

    run(body)
    assert h.join("new").error is ErrorCode.group_id_not_found


def test_an_upgrade_answers_parked_joins_with_rebalance_in_progress() -> None:
    h = Mixed(group_initial_rebalance_delay_ms=0)
    classic_group(h, frozenset())

    async def body() -> None:
        # A second member's join waits for the first to rejoin; the upgrade answers it.
        parked = asyncio.ensure_future(
            h.coord.join_group(
                "g",
                "",
                protocol_type="consumer",
                protocols=[("cooperative-sticky", subscription(("t",)))],
                session_timeout_ms=SESSION,
                rebalance_timeout_ms=REBALANCE,
            )
        )
        await asyncio.sleep(0)
        assert not parked.done()
        request = HeartbeatRequest(
            "g", "new", 0, rebalance_timeout_ms=REBALANCE, subscribed_topic_names=("t",),
            owned=frozenset(),
        )  # fmt: skip
        upgraded = await h.coord.consumer_group_heartbeat(request)
        assert upgraded.error is ErrorCode.none
        assert (await parked).error is ErrorCode.rebalance_in_progress

    run(body)
