"""A KIP-848 consumer group on a cluster: the group coordinator's broker is killed and the
new coordinator (the new leader of the group's `__consumer_offsets` partition) carries on
with the same members, epochs and assignments, from the records it replicated: nobody is
revoked anything and nobody rejoins."""

from __future__ import annotations

import time

from tests.cluster.test_cluster_groups import GROUP_OVERRIDES, group_coordinator
from tests.cluster.test_replication import T
from tests.helpers.clients import admin_client, create_topic, topic_name
from tests.helpers.cluster import Cluster, cluster_factory
from tests.integration.test_consumer_group_protocol import Member, disjoint_cover, poll_until

__all__ = ["cluster_factory"]


def test_a_consumer_group_survives_the_death_of_its_coordinator(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    overrides = {
        **GROUP_OVERRIDES,
        "group.consumer.min.session.timeout.ms": "1000",
        "group.consumer.session.timeout.ms": "20000",
    }
    cluster: Cluster = cluster_factory(3, overrides=overrides)
    topic = create_topic(cluster.bootstrap, partitions=4, replication_factor=3)
    group = topic_name("g848")
    members = [Member(cluster.bootstrap, topic, group) for _ in range(2)]
    try:
        poll_until(
            members,
            lambda: (
                disjoint_cover([m.partitions() for m in members], 4)
                and all(m.partitions() for m in members)
            ),
            "two members sharing four partitions",
        )
        admin = admin_client(cluster.bootstrap)
        before = admin.describe_consumer_groups([group])[group].result(T)
        revocations = [len(m.revoked) for m in members]
        victim = group_coordinator(cluster, group)
        victim.kill()
        successor = group_coordinator(cluster, group)
        assert successor is not victim
        deadline = time.monotonic() + T
        while True:  # the members' heartbeats reach the new coordinator
            for m in members:
                m.poll()
            after = admin.describe_consumer_groups([group])[group].result(T)
            if after.coordinator.id == successor.broker_id and after.members:
                break
            assert time.monotonic() < deadline, "the new coordinator never described the group"
        assert {m.member_id for m in after.members} == {m.member_id for m in before.members}
        assert sorted(
            sorted(tp.partition for tp in d.assignment.topic_partitions) for d in after.members
        ) == sorted(
            sorted(tp.partition for tp in d.assignment.topic_partitions) for d in before.members
        )
        for _ in range(40):
            for m in members:
                m.poll()
        assert [len(m.revoked) for m in members] == revocations
        assert disjoint_cover([m.partitions() for m in members], 4)
    finally:
        for m in members:
            m.consumer.close()
