"""Share-group membership (ShareGroupHeartbeat's steps), share sessions, and the
`__share_group_state` store: snapshots, group configs and transactional acknowledgements
replayed at load exactly as their markers say."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable

import pytest

from onceflow.coordinator.group.log import LogEntry
from onceflow.coordinator.share.group import (
    Heartbeat,
    MembershipLimits,
    ShareGroup,
    TopicPartition,
    expire,
    heartbeat,
)
from onceflow.coordinator.share.partition import StateBatch
from onceflow.coordinator.share.records import (
    CorruptShareRecord,
    ShareKey,
    ShareSnapshot,
    decode_key,
    decode_value,
    encode_key,
    encode_txn_update,
    encode_value,
)
from onceflow.coordinator.share.sessions import ShareSessions
from onceflow.coordinator.share.state import RecordState
from onceflow.coordinator.share.store import ShareStateStore
from onceflow.errors import ErrorCode, KafkaError

LIMITS = MembershipLimits(session_timeout_ms=1000, max_size=2)
SIZES = {"a": 2, "b": 1}


def hb(member: str, epoch: int, topics: tuple[str, ...] | None = ("a",)) -> Heartbeat:
    return Heartbeat("g", member, epoch, None, topics, "client", "/127.0.0.1")


def test_join_assigns_every_partition_and_epochs_move_with_membership() -> None:
    group = ShareGroup("g")
    first = heartbeat(group, hb("m1", 0), 0, LIMITS, SIZES.get)
    assert first.error is ErrorCode.none and first.member_epoch == 1
    assert first.assignment == {TopicPartition("a", 0), TopicPartition("a", 1)}
    second = heartbeat(group, hb("m2", 0, ("a", "b")), 0, LIMITS, SIZES.get)
    assert second.member_epoch == 2 and TopicPartition("b", 0) in (second.assignment or ())
    # m1 at its epoch: the group moved on, it gets the new epoch (same assignment, sent).
    again = heartbeat(group, hb("m1", 1, None), 0, LIMITS, SIZES.get)
    assert again.member_epoch == 2
    assert heartbeat(group, hb("m1", 2, None), 0, LIMITS, SIZES.get).assignment is None


def test_heartbeat_errors_are_kafkas() -> None:
    group = ShareGroup("g")
    assert heartbeat(group, hb("m1", 0, None), 0, LIMITS, SIZES.get).error is (
        ErrorCode.invalid_request
    )
    assert heartbeat(group, hb("x", 3), 0, LIMITS, SIZES.get).error is ErrorCode.unknown_member_id
    heartbeat(group, hb("m1", 0), 0, LIMITS, SIZES.get)
    assert heartbeat(group, hb("m1", 7), 0, LIMITS, SIZES.get).error is (
        ErrorCode.fenced_member_epoch
    )
    heartbeat(group, hb("m2", 0), 0, LIMITS, SIZES.get)
    assert heartbeat(group, hb("m3", 0), 0, LIMITS, SIZES.get).error is (
        ErrorCode.group_max_size_reached
    )
    left = heartbeat(group, hb("m1", -1, None), 0, LIMITS, SIZES.get)
    assert left.left and left.member_epoch == -1 and "m1" not in group.members


def test_a_silent_member_expires() -> None:
    group = ShareGroup("g")
    heartbeat(group, hb("m1", 0), 0, LIMITS, SIZES.get)
    assert expire(group, 999) == []
    assert expire(group, 1000) == ["m1"] and not group.members


def test_share_sessions_follow_kafkas_epochs() -> None:
    sessions = ShareSessions(max_sessions=1)
    tp = (uuid.uuid4(), 0)
    assert sessions.advance("g", "m", 1)[0] is ErrorCode.share_session_not_found
    error, session = sessions.advance("g", "m", 0, [tp])
    assert error is ErrorCode.none and session is not None and list(session.partitions) == [tp]
    assert sessions.advance("g", "m", 2)[0] is ErrorCode.invalid_share_session_epoch
    assert sessions.advance("g", "m", 1)[0] is ErrorCode.none
    assert sessions.advance("g", "m", 2, forgotten=[tp])[1].partitions == {}  # type: ignore[union-attr]
    assert sessions.advance("g", "other", 0)[0] is ErrorCode.share_session_limit_reached


class MemoryLog:
    """`__share_group_state` in memory: batches appended, entries read back in order."""

    def __init__(self) -> None:
        self.entries: dict[int, list[LogEntry]] = {}

    def append(
        self, partition: int, batch: bytes, transactional_id: str | None = None
    ) -> asyncio.Future[int]:
        from onceflow.coordinator.group.log import decode_entries

        log = self.entries.setdefault(partition, [])
        for entry in decode_entries(batch):
            log.append(entry._replace(offset=len(log)))
        fut: asyncio.Future[int] = asyncio.get_event_loop().create_future()
        fut.set_result(len(log))
        return fut

    def marker(self, partition: int, producer_id: int, commit: bool) -> None:
        log = self.entries.setdefault(partition, [])
        log.append(LogEntry(len(log), None, None, producer_id, True, 1 if commit else 0))

    def read(self, partition: int) -> Iterable[LogEntry]:
        return list(self.entries.get(partition, []))


def _store(log: MemoryLog) -> ShareStateStore:
    store = ShareStateStore(log, 1)
    store.load_partition(0, 1)
    return store


def test_the_store_keeps_the_last_snapshot_and_replays_committed_transactions() -> None:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        log = MemoryLog()
        store = _store(log)
        key = ShareKey("g", uuid.uuid4(), 0)
        first = ShareSnapshot(0, 0, (StateBatch(0, 9, RecordState.AVAILABLE, 1),))
        store.write(key, first, 0)
        store.write_group_configs("g", {"share.auto.offset.reset": "earliest"}, 0)
        store.write_txn_update(key, ((0, 4, RecordState.ACKNOWLEDGED),), "t", 7, 0, 0)
        store.write_txn_update(key, ((5, 9, RecordState.ACKNOWLEDGED),), "u", 8, 0, 0)
        log.marker(0, 7, commit=True)
        log.marker(0, 8, commit=False)
        again = _store(log)
        assert again.read(key) == ShareSnapshot(0, 5, (StateBatch(5, 9, RecordState.AVAILABLE, 1),))
        assert again.group_configs("g") == {"share.auto.offset.reset": "earliest"}
        assert again.pending_for(key) == []
        store.write_txn_update(key, ((5, 6, RecordState.ARCHIVED),), "v", 9, 0, 0)
        assert _store(log).pending_for(key) == [(9, ((5, 6, RecordState.ARCHIVED),))]
        store.delete(key, 0)
        assert _store(log).read(key) is None
    finally:
        loop.close()


def test_a_store_not_serving_a_partition_says_so() -> None:
    store = ShareStateStore(MemoryLog(), 1)
    with pytest.raises(KafkaError) as raised:
        store.read(ShareKey("g", uuid.uuid4(), 0))
    assert raised.value.code is ErrorCode.not_coordinator


def test_records_round_trip_and_bad_ones_are_refused() -> None:
    key = ShareKey("group", uuid.uuid4(), 3)
    assert decode_key(encode_key(key)) == key
    snapshot = ShareSnapshot(2, 10, (StateBatch(10, 12, RecordState.ARCHIVED, 5),))
    assert decode_value(encode_value(snapshot)) == snapshot
    raw_key, _ = encode_txn_update(key, ())
    assert decode_key(raw_key).key == key  # type: ignore[union-attr]
    for bad in (b"", b"\x00\x09\x00\x01g", encode_key(key) + b"x"):
        with pytest.raises(CorruptShareRecord):
            decode_key(bad)
    with pytest.raises(CorruptShareRecord):
        decode_value(encode_value(snapshot)[:-1])


def test_a_commit_outlives_a_snapshot_written_before_its_leader_learned_of_it() -> None:
    # The share-partition's leader is another broker: it writes 0..9 Available (held
    # by the transaction, it does not know the commit yet) after the marker landed here.
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        log = MemoryLog()
        store = _store(log)
        key = ShareKey("g", uuid.uuid4(), 0)
        unaware = ShareSnapshot(0, 0, (StateBatch(0, 9, RecordState.AVAILABLE, 1),))
        store.write(key, unaware, 0)
        store.write_txn_update(key, ((0, 4, RecordState.ACKNOWLEDGED),), "t", 7, 0, 0)
        store.write_txn_update(key, ((5, 9, RecordState.AVAILABLE),), "t", 7, 0, 0)
        held = store.read_with_pending(key)
        assert held is not None and {b.state for b in held.batches} == {RecordState.ACQUIRED}
        assert store.read(key) == unaware  # what is written never holds Acquired
        log.marker(0, 7, commit=True)
        assert store.complete_txn(7, True, 0) == [key]
        decided = ShareSnapshot(0, 5, (StateBatch(5, 9, RecordState.AVAILABLE, 1),))
        assert store.read_with_pending(key) == decided
        store.write(key, unaware, 0)  # the leader, still unaware
        assert store.read(key) == decided
        assert _store(log).read(key) == decided  # and so on replay
        # Once the start offset passed them, the committed states are dropped.
        store.write(key, ShareSnapshot(0, 10, ()), 0)
        store.write(key, ShareSnapshot(0, 10, ()), 0)
        assert store.read(key) == ShareSnapshot(0, 10, ())
        # A new state epoch (AlterShareGroupOffsets back to 0) is not overridden.
        rewound = ShareSnapshot(1, 0, (StateBatch(0, 9, RecordState.AVAILABLE, 1),))
        store.write_txn_update(key, ((0, 9, RecordState.ACKNOWLEDGED),), "t", 7, 0, 0)
        store.complete_txn(7, True, 0)
        store.write(key, rewound, 0)
        assert store.read(key) == rewound
    finally:
        loop.close()


SIZES_ASSIGNMENT = frozenset({TopicPartition("a", 0), TopicPartition("a", 1)})


def test_membership_records_replay_to_the_last_write() -> None:
    from onceflow.coordinator.group.offsets import encode_offset_key
    from onceflow.coordinator.share import membership_records as records
    from onceflow.coordinator.share.group import ShareMember

    group = ShareGroup("g", 4)
    m1 = ShareMember("m1", 4, ("a",), "r1", "client", "/1.2.3.4", 0, SIZES_ASSIGNMENT)
    m2 = ShareMember("m2", 3, ("a", "b"), None, "c2", "/5.6.7.8", 0, frozenset())
    group.members = {"m1": m1, "m2": m2}
    log = [
        records.group_record(group),
        records.member_record("g", m1),
        records.member_record("g", m2),
        (encode_offset_key("g", "a", 0), b"not a share record"),  # skipped: not ours
        records.member_tombstone("g", "m2"),
        (records.member_record("g", m2)[0][:-1], b"\x00"),  # a bad key: skipped, logged
        records.group_record(ShareGroup("gone", 1)),
        records.group_tombstone("gone"),
    ]
    replayed = records.replay(log, deadline_ms=99)
    assert set(replayed) == {"g"}
    again = replayed["g"]
    assert again.epoch == 4 and set(again.members) == {"m1"}
    back = again.members["m1"]
    assert (back.epoch, back.subscribed, back.rack_id, back.assignment) == (
        4,
        ("a",),
        "r1",
        SIZES_ASSIGNMENT,
    )
    assert (back.client_id, back.client_host, back.deadline_ms) == ("client", "/1.2.3.4", 99)
