"""Classic librdkafka consumers inside a KIP-848 consumer group (Kafka's mixed groups).

A `group.protocol=consumer` member makes the group; classic members (cooperative-sticky,
or range) join it with JoinGroup/SyncGroup and get their partitions from the server-side
assignor. Everyone consumes numbered records and commits each one: at the end every
partition has one owner and every record was consumed exactly once.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException

from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import consumer, create_topic, produce_and_confirm, producer

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
        self.failed_commits = 0
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
        except KafkaException:
            self.failed_commits += 1

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
            lambda: sum(len(m.seen) for m in members) >= 600 and one_owner_each(members),
            "every record",
            broker,
        )
        seen = sorted(n for m in members for n in m.seen)
        assert seen == list(range(600))  # none lost, none twice
        assert all(m.seen for m in members[1:])  # the classic members consumed too
        assert sum(m.failed_commits for m in members) == 0
    finally:
        for m in members:
            m.consumer.close()
