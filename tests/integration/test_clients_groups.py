"""Consumer groups with confluent-kafka: subscription, commits, rebalances, eviction."""

from __future__ import annotations

import time
import uuid
from collections import defaultdict

import pytest
from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from tests.helpers.broker import BrokerProcess
from tests.helpers.child_consumer import ChildConsumer, wait_for
from tests.helpers.clients import (
    OP_TIMEOUT_S,
    admin_client,
    committed_offsets,
    consume_until,
    consumer,
    create_topic,
    drain,
    produce_and_confirm,
    producer,
    wait_assignment,
)

T = OP_TIMEOUT_S
SESSION_MS = 6000
# Session expiry (6 s) plus a rebalance: generous, so a slow machine does not fail the test.
EVICTION_TIMEOUT_S = 45.0


def _group() -> str:
    return f"grp-{uuid.uuid4().hex[:8]}"


def _group_consumer(bs: str, group: str, **extra):  # type: ignore[no-untyped-def]
    return consumer(
        bs,
        group,
        **{"session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 500, **extra},
    )


def _fill(bs: str, topic: str, partitions: int, per_partition: int, start: int = 0) -> None:
    recs = [
        (p, f"k{p}".encode(), f"p{p}-n{start + i}".encode(), None)
        for i in range(per_partition)
        for p in range(partitions)
    ]
    d = produce_and_confirm(producer(bs, acks="all"), topic, recs)
    assert not d.errors, d.errors[:3]


def test_subscribe_commit_and_resume_after_restart(shared_broker: BrokerProcess) -> None:
    bs = shared_broker.bootstrap
    topic = create_topic(bs, partitions=3)
    group = _group()
    _fill(bs, topic, 3, 10)

    c = _group_consumer(bs, group)
    try:
        c.subscribe([topic])
        got = consume_until(
            c, lambda g: len(g) >= 30, timeout=30, what="30 records by subscription"
        )
        assert sorted((m.partition(), m.offset()) for m in got) == [
            (p, o) for p in range(3) for o in range(10)
        ]
        c.commit(asynchronous=False)
        assert committed_offsets(c, topic, range(3)) == {0: 10, 1: 10, 2: 10}
        # An explicit commit of an earlier offset, with metadata, replaces the one of p0.
        c.commit(offsets=[TopicPartition(topic, 0, 7, metadata="note-7")], asynchronous=False)
        tps = c.committed([TopicPartition(topic, 0)], timeout=T)
        assert tps[0].offset == 7
        assert tps[0].metadata == "note-7"
    finally:
        c.close()

    _fill(bs, topic, 3, 2, start=10)

    # A new consumer in the same group resumes from the committed offsets: p0 from 7,
    # the others from 10; nothing before that comes again.
    c2 = _group_consumer(bs, group)
    try:
        c2.subscribe([topic])
        got = consume_until(
            c2, lambda g: len(g) >= 3 + 2 * 3, timeout=30, what="the uncommitted records"
        )
        got += drain(c2, 1.0)  # anything beyond the expected records would be a repeat
        positions = sorted((m.partition(), m.offset()) for m in got)
        assert positions == [(0, o) for o in range(7, 12)] + [
            (p, o) for p in (1, 2) for o in (10, 11)
        ]
        assert {m.value() for m in got if m.partition() == 1} == {b"p1-n10", b"p1-n11"}
        c2.commit(asynchronous=False)
        assert committed_offsets(c2, topic, range(3)) == {0: 12, 1: 12, 2: 12}
    finally:
        c2.close()

    # A different group has no committed offsets (OFFSET_INVALID = -1001).
    other = _group_consumer(bs, _group())
    try:
        assert committed_offsets(other, topic, range(3)) == {0: -1001, 1: -1001, 2: -1001}
    finally:
        other.close()


def test_committed_offsets_survive_broker_restart(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    topic = create_topic(bs, partitions=2)
    group = _group()
    _fill(bs, topic, 2, 5)
    c = _group_consumer(bs, group)
    try:
        c.commit(
            offsets=[TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 5)], asynchronous=False
        )
    finally:
        c.close()
    broker.restart()
    c = _group_consumer(bs, group)
    try:
        assert committed_offsets(c, topic, range(2)) == {0: 3, 1: 5}
        c.subscribe([topic])
        got = consume_until(c, lambda g: len(g) >= 2, timeout=30)
        assert sorted((m.partition(), m.offset()) for m in got) == [(0, 3), (0, 4)]
    finally:
        c.close()


def _poll_both(a, child: ChildConsumer) -> None:  # type: ignore[no-untyped-def]
    msg = a.poll(0.1)
    if msg is not None and msg.error() is not None:
        raise AssertionError(f"consumer error: {msg.error()}")
    child.pump(0.05)


def _parts(c) -> list[int]:  # type: ignore[no-untyped-def]
    return sorted(tp.partition for tp in c.assignment())


def test_second_member_triggers_rebalance_and_killed_member_is_evicted(
    shared_broker: BrokerProcess,
) -> None:
    bs = shared_broker.bootstrap
    topic = create_topic(bs, partitions=4)
    group = _group()
    _fill(bs, topic, 4, 3)

    a = _group_consumer(bs, group)
    child: ChildConsumer | None = None
    try:
        a.subscribe([topic])
        wait_assignment(a, lambda asg: len(asg) == 4, timeout=30)

        # A second member in another process: the partitions are split between the two.
        child = ChildConsumer(bs, topic, group, SESSION_MS)
        wait_for(
            lambda: (
                child.assignment is not None
                and len(child.assignment) > 0
                and len(_parts(a)) > 0
                and sorted(child.assignment + _parts(a)) == [0, 1, 2, 3]
            ),
            timeout=EVICTION_TIMEOUT_S,
            step=lambda: _poll_both(a, child),
            what=f"a split assignment (a={_parts(a)}, child={child.assignment}, "
            f"child stderr={child.stderr()})",
        )
        assert set(child.assignment).isdisjoint(_parts(a))

        admin = admin_client(bs)  # keep a reference: a destroyed client never answers
        desc = admin.describe_consumer_groups([group], request_timeout=T)[group].result(timeout=T)
        assert desc.state == ConsumerGroupState.STABLE
        assert len(desc.members) == 2
        assert {m.host for m in desc.members} == {"/127.0.0.1"}  # as Kafka shows a client
        assigned = sorted(
            tp.partition for m in desc.members for tp in m.assignment.topic_partitions
        )
        assert assigned == [0, 1, 2, 3]

        # SIGKILL: no LeaveGroup. The coordinator evicts it once its session expires, and
        # the survivor gets every partition back.
        child.kill()
        wait_for(
            lambda: _parts(a) == [0, 1, 2, 3],
            timeout=EVICTION_TIMEOUT_S,
            step=lambda: a.poll(0.2),
            what=f"the survivor to own all partitions (has {_parts(a)})",
        )
        desc = admin.describe_consumer_groups([group], request_timeout=T)[group].result(timeout=T)
        assert len(desc.members) == 1
    finally:
        if child is not None:
            child.close()
        a.close()


def test_member_leaving_gracefully_hands_partitions_back(shared_broker: BrokerProcess) -> None:
    bs = shared_broker.bootstrap
    topic = create_topic(bs, partitions=2)
    group = _group()
    _fill(bs, topic, 2, 4)
    a = _group_consumer(bs, group)
    b = _group_consumer(bs, group)
    try:
        a.subscribe([topic])
        b.subscribe([topic])

        def step() -> None:
            for c in (a, b):
                m = c.poll(0.1)
                if m is not None and m.error() is not None:
                    raise AssertionError(f"consumer error: {m.error()}")

        wait_for(
            lambda: _parts(a) and _parts(b) and sorted(_parts(a) + _parts(b)) == [0, 1],
            timeout=EVICTION_TIMEOUT_S,
            step=step,
            what="both members to own one partition",
        )
        b.close()  # sends LeaveGroup: no session timeout to wait for
        wait_for(
            lambda: _parts(a) == [0, 1],
            timeout=EVICTION_TIMEOUT_S,
            step=lambda: a.poll(0.2),
            what="the remaining member to own both partitions",
        )
    finally:
        a.close()


def test_list_groups_shows_the_group(shared_broker: BrokerProcess) -> None:
    bs = shared_broker.bootstrap
    topic = create_topic(bs, partitions=1)
    group = _group()
    c = _group_consumer(bs, group)
    try:
        c.subscribe([topic])
        wait_assignment(c, lambda asg: len(asg) == 1, timeout=30)
        admin = admin_client(bs)
        listed = admin.list_consumer_groups(request_timeout=T).result(timeout=T)
        ids = {g.group_id: g for g in listed.valid}
        assert group in ids
        assert not listed.errors
    finally:
        c.close()


def test_consumers_in_different_groups_each_get_everything(shared_broker: BrokerProcess) -> None:
    bs = shared_broker.bootstrap
    topic = create_topic(bs, partitions=2)
    _fill(bs, topic, 2, 5)
    seen: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for group in (_group(), _group()):
        c = _group_consumer(bs, group)
        try:
            c.subscribe([topic])
            got = consume_until(c, lambda g: len(g) >= 10, timeout=30)
            seen[group] = {(m.partition(), m.offset()) for m in got}
        finally:
            c.close()
    a, b = seen.values()
    assert a == b == {(p, o) for p in range(2) for o in range(5)}


def test_cooperative_sticky_members_split_and_cover_all_partitions(
    shared_broker: BrokerProcess,
) -> None:
    """Incremental rebalancing (several JoinGroup/SyncGroup rounds) between two members."""
    bs = shared_broker.bootstrap
    topic = create_topic(bs, partitions=6)
    group = _group()
    conf = {"partition.assignment.strategy": "cooperative-sticky"}
    a = _group_consumer(bs, group, **conf)
    b = _group_consumer(bs, group, **conf)
    try:
        a.subscribe([topic])
        wait_assignment(a, lambda asg: len(asg) == 6, timeout=30)
        b.subscribe([topic])

        def step() -> None:
            for c in (a, b):
                m = c.poll(0.1)
                if m is not None and m.error() is not None:
                    raise AssertionError(f"consumer error: {m.error()}")

        wait_for(
            lambda: len(_parts(a)) == 3 and len(_parts(b)) == 3,
            timeout=EVICTION_TIMEOUT_S,
            step=step,
            what=f"a 3/3 split (a={_parts(a)}, b={_parts(b)})",
        )
        assert sorted(_parts(a) + _parts(b)) == list(range(6))
    finally:
        b.close()
        a.close()


def test_admin_lists_committed_offsets_of_a_group(shared_broker: BrokerProcess) -> None:
    bs = shared_broker.bootstrap
    topic = create_topic(bs, partitions=3)
    group = _group()
    c = _group_consumer(bs, group)
    try:
        c.commit(
            offsets=[TopicPartition(topic, 0, 4), TopicPartition(topic, 2, 9)], asynchronous=False
        )
    finally:
        c.close()
    admin = admin_client(bs)
    request = [ConsumerGroupTopicPartitions(group)]  # no partitions: everything committed
    result = admin.list_consumer_group_offsets(request, request_timeout=T)[group].result(timeout=T)
    assert sorted((tp.topic, tp.partition, tp.offset) for tp in result.topic_partitions) == [
        (topic, 0, 4),
        (topic, 2, 9),
    ]


def test_static_member_rejoining_keeps_its_partitions(shared_broker: BrokerProcess) -> None:
    """group.instance.id: a restarted static member gets its partitions back without the
    other member losing any of its own."""
    bs = shared_broker.bootstrap
    topic = create_topic(bs, partitions=4)
    group = _group()
    revoked_from_a: list[list[int]] = []

    def on_revoke(consumer, partitions):  # type: ignore[no-untyped-def]
        if partitions:
            revoked_from_a.append(sorted(tp.partition for tp in partitions))

    a = _group_consumer(bs, group, **{"group.instance.id": "static-a"})
    b = _group_consumer(bs, group, **{"group.instance.id": "static-b"})
    try:
        a.subscribe([topic], on_revoke=on_revoke)
        b.subscribe([topic])

        def step() -> None:
            for c in (a, b):
                m = c.poll(0.1)
                if m is not None and m.error() is not None:
                    raise AssertionError(f"consumer error: {m.error()}")

        wait_for(
            lambda: len(_parts(a)) == 2 and len(_parts(b)) == 2,
            timeout=EVICTION_TIMEOUT_S,
            step=step,
            what=f"a 2/2 split (a={_parts(a)}, b={_parts(b)})",
        )
        b_parts = _parts(b)
        revoked_from_a.clear()
        b.close()  # a static member does not leave the group on close
        b = _group_consumer(bs, group, **{"group.instance.id": "static-b"})
        b.subscribe([topic])
        wait_for(
            lambda: _parts(b) == b_parts,
            timeout=EVICTION_TIMEOUT_S,
            step=step,
            what=f"the static member to get {b_parts} back (has {_parts(b)})",
        )
        for _ in range(10):
            step()
        assert len(_parts(a)) == 2
        assert revoked_from_a == [], f"the other member was rebalanced: {revoked_from_a}"
    finally:
        b.close()
        a.close()


def test_commit_for_an_unknown_topic_is_refused(shared_broker: BrokerProcess) -> None:
    c = _group_consumer(shared_broker.bootstrap, _group())
    try:
        with pytest.raises(KafkaException) as info:
            c.commit(offsets=[TopicPartition("no-such-topic-x", 0, 5)], asynchronous=False)
        assert info.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
        assert committed_offsets(c, "no-such-topic-x", [0]) == {0: -1001}
    finally:
        c.close()


def test_session_timeout_below_the_broker_minimum_is_refused(shared_broker: BrokerProcess) -> None:
    bs = shared_broker.bootstrap
    topic = create_topic(bs, partitions=1)
    c = consumer(bs, _group(), **{"session.timeout.ms": 1000, "heartbeat.interval.ms": 100})
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + T
        err = None
        while err is None and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is not None:
                err = m.error()
        assert err is not None and err.code() == KafkaError.INVALID_SESSION_TIMEOUT, err
        assert c.assignment() == []
    finally:
        c.close()
