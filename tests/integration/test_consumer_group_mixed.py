"""Classic librdkafka consumers inside a KIP-848 consumer group (Kafka's mixed groups).

A `group.protocol=consumer` member makes the group, or upgrades the classic group of
classic members, and its leaving downgrades it again; classic members (cooperative-sticky,
or range) join with JoinGroup/SyncGroup and get their partitions from the server-side
assignor. Everyone consumes numbered records and commits each one: at the end every
partition has one owner and every record was consumed once (twice only when a commit of
it raced its member's rejoin and was refused).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupType, KafkaError, KafkaException

from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import (
    admin_client,
    consumer,
    create_topic,
    produce_and_confirm,
    producer,
)

PARTITIONS = 6
WAIT_S = 60.0
FAST_GROUPS = {
    "group.consumer.min.session.timeout.ms": "1000",
    "group.consumer.session.timeout.ms": "2000",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.heartbeat.interval.ms": "200",
}
CLASSIC = {"heartbeat.interval.ms": 200, "session.timeout.ms": 6000}


class Counting:
    """A member that records every record's number and commits it before the next poll."""

    def __init__(self, bootstrap: str, topic: str, group: str, **conf: Any) -> None:
        self.consumer: Consumer = consumer(bootstrap, group, **conf)
        self.seen: list[int] = []
        self.uncommitted: set[int] = set()
        self.errors: list[str] = []
        self.consumer.subscribe([topic])

    def poll(self) -> None:
        msg = self.consumer.poll(0.05)
        if msg is None:
            return
        assert msg.error() is None or not msg.error().fatal(), msg.error()
        if msg.error() is not None:
            self.errors.append(str(msg.error()))
            return
        self.seen.append(int(msg.value()))
        try:
            self.consumer.commit(message=msg, asynchronous=False)
        except KafkaException as exc:
            # A commit racing its member's rejoin carries the old generation and is refused
            # (ILLEGAL_GENERATION, as in Kafka): that record may be read again by the next
            # owner of its partition, and only that one.
            self.uncommitted.add(int(msg.value()))
            self.errors.append(f"commit: {exc}")

    def partitions(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}


def produce_numbers(bootstrap: str, topic: str, numbers: range) -> None:
    p = producer(bootstrap)
    produce_and_confirm(p, topic, [(n % PARTITIONS, None, str(n).encode(), None) for n in numbers])


def poll_until(members: list[Counting], done: Any, what: str, broker: BrokerProcess) -> None:
    deadline = time.monotonic() + WAIT_S
    while not done():
        if time.monotonic() > deadline:
            state = [sorted(m.partitions()) for m in members]
            raise AssertionError(
                f"timed out waiting for {what}; assignments {state}; errors "
                f"{[m.errors[-3:] for m in members]}; the broker's log:\n"
                f"{broker.log_tail()}"
            )
        for m in members:
            m.poll()


def one_owner_each(members: list[Counting]) -> bool:
    parts = [m.partitions() for m in members]
    return sum(len(p) for p in parts) == PARTITIONS and set().union(*parts) == set(
        range(PARTITIONS)
    )


# Classic members must share a protocol (INCONSISTENT_GROUP_PROTOCOL otherwise, as in
# Kafka), so each run uses one: cooperative (revokes only what moves) and eager.
@pytest.mark.parametrize("strategy", ["cooperative-sticky", "range"])
@pytest.mark.broker_overrides(FAST_GROUPS)
def test_classic_members_join_a_consumer_group_and_share_its_records_once(
    broker: BrokerProcess, strategy: str
) -> None:
    topic = create_topic(broker.bootstrap, partitions=PARTITIONS)
    group = f"mixed-classic-join-{strategy}"
    produce_numbers(broker.bootstrap, topic, range(300))
    members = [Counting(broker.bootstrap, topic, group, **{"group.protocol": "consumer"})]
    try:
        poll_until(
            members, lambda: len(members[0].partitions()) == PARTITIONS, "the first member", broker
        )
        conf = {"partition.assignment.strategy": strategy, **CLASSIC}
        members += [Counting(broker.bootstrap, topic, group, **conf) for _ in range(2)]
        poll_until(
            members,
            lambda: one_owner_each(members) and all(m.partitions() for m in members),
            "three members sharing the partitions",
            broker,
        )
        produce_numbers(broker.bootstrap, topic, range(300, 600))
        poll_until(
            members,
            lambda: len(set(seen(members))) >= 600 and one_owner_each(members),
            "every record",
            broker,
        )
        exactly_once(members, 600)
        assert all(m.seen for m in members[1:])  # the classic members consumed too
    finally:
        for m in members:
            m.consumer.close()


@pytest.mark.parametrize("strategy", ["cooperative-sticky", "range"])
@pytest.mark.broker_overrides({**FAST_GROUPS, "group.initial.rebalance.delay.ms": "0"})
def test_a_consumer_member_upgrades_a_classic_group_and_its_leaving_downgrades_it(
    broker: BrokerProcess, strategy: str
) -> None:
    topic = create_topic(broker.bootstrap, partitions=PARTITIONS)
    group = f"mixed-upgrade-{strategy}"
    produce_numbers(broker.bootstrap, topic, range(300))
    conf = {"partition.assignment.strategy": strategy, **CLASSIC}
    members = [Counting(broker.bootstrap, topic, group, **conf) for _ in range(2)]
    try:
        poll_until(
            members,
            lambda: one_owner_each(members) and len(seen(members)) >= 100,
            "a classic group consuming",
            broker,
        )
        admin = admin_client(broker.bootstrap)
        assert group_type(admin, group) is ConsumerGroupType.CLASSIC
        members.append(Counting(broker.bootstrap, topic, group, **{"group.protocol": "consumer"}))
        poll_until(
            members,
            lambda: one_owner_each(members) and all(m.partitions() for m in members),
            "the upgraded group sharing the partitions",
            broker,
        )
        assert group_type(admin, group) is ConsumerGroupType.CONSUMER
        produce_numbers(broker.bootstrap, topic, range(300, 600))
        poll_until(
            members,
            lambda: len(set(seen(members))) >= 600 and one_owner_each(members),
            "every record",
            broker,
        )
        exactly_once(members, 600)

        # The consumer-protocol member leaves: the classic members make a classic group
        # again (downgrade) and go on.
        new = members.pop()
        new.consumer.close()
        poll_until(
            members,
            lambda: (
                group_type(admin, group) is ConsumerGroupType.CLASSIC and one_owner_each(members)
            ),
            "the downgraded group sharing the partitions",
            broker,
        )
        produce_numbers(broker.bootstrap, topic, range(600, 900))
        poll_until(
            members,
            lambda: len(set(seen([*members, new]))) >= 900 and one_owner_each(members),
            "every record after the downgrade",
            broker,
        )
        exactly_once([*members, new], 900)
    finally:
        for m in members:
            m.consumer.close()


def exactly_once(members: list[Counting], count: int) -> None:
    """Every record read; none read twice but those whose commit was refused."""
    numbers = seen(members)
    assert set(numbers) == set(range(count))
    twice = {n for n in numbers if numbers.count(n) > 1}
    assert twice <= set().union(*(m.uncommitted for m in members)), twice


def seen(members: list[Counting]) -> list[int]:
    return sorted(n for m in members for n in m.seen)


def group_type(admin: Any, group: str) -> Any:
    listed = admin.list_consumer_groups().result(WAIT_S)
    return next(g.type for g in listed.valid if g.group_id == group)


@pytest.mark.broker_overrides(
    {
        **FAST_GROUPS,
        "group.initial.rebalance.delay.ms": "0",
        "group.consumer.migration.policy": "disabled",
    }
)
def test_with_migration_disabled_a_consumer_member_cannot_join_a_classic_group(
    broker: BrokerProcess,
) -> None:
    topic = create_topic(broker.bootstrap, partitions=PARTITIONS)
    group = "mixed-disabled"
    conf = {"partition.assignment.strategy": "cooperative-sticky", **CLASSIC}
    members = [Counting(broker.bootstrap, topic, group, **conf) for _ in range(2)]
    new = consumer(broker.bootstrap, group, **{"group.protocol": "consumer"})
    try:
        # Settled: with cooperative-sticky the first member owns everything for a moment,
        # then gives half away in a second round; checked mid-way, the end would see that.
        poll_until(
            members,
            lambda: one_owner_each(members) and all(m.partitions() for m in members),
            "a classic group",
            broker,
        )
        new.subscribe([topic])
        deadline = time.monotonic() + WAIT_S
        error = None
        while error is None and time.monotonic() < deadline:
            msg = new.poll(0.1)
            if msg is not None and msg.error() is not None:
                error = msg.error()
            for m in members:
                m.poll()
        # librdkafka makes GROUP_ID_NOT_FOUND fatal, naming it.
        assert error is not None and error.code() == KafkaError._FATAL, error
        assert "The group id does not exist" in error.str()
        assert group_type(admin_client(broker.bootstrap), group) is ConsumerGroupType.CLASSIC
        assert one_owner_each(members)
    finally:
        new.close()
        for m in members:
            m.consumer.close()
