"""Consumer groups on a cluster: committed offsets survive kill -9 of the group
coordinator's broker.

The coordinator of a group is the leader of the group's `__consumer_offsets` partition.
When that broker dies, the partition's new leader loads the group's offsets from its replica
and coordinates from then on: a consumer of the group resumes exactly at the committed
offsets (nothing before them read again, nothing after them skipped), and commits work
against the new coordinator. Checked with confluent-kafka and with kafka-python, whose
consumer stays in the group through the move.

Also: a group's first coordinator lookup, while its `__consumer_offsets` partition is being
created and elected slowly, gets its answer in one FindCoordinator (librdkafka's admin
client asks only three times).
"""

from __future__ import annotations

import threading
import time

from confluent_kafka import Message, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition

from onceflow.client.cluster import Cluster as WireCluster
from onceflow.client.errors import ClientError
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from tests.cluster.test_replication import T
from tests.helpers.clients import (
    admin_client,
    committed_offsets,
    consume_until,
    consumer,
    create_topic,
    drain,
    kafka_python_subscribe,
    producer,
    topic_name,
)
from tests.helpers.cluster import Cluster, ClusterBroker, cluster_factory

__all__ = ["cluster_factory"]

KEY_TYPE_GROUP = 0
PER_PARTITION = 300
# Small __consumer_offsets (RF capped to 3 by the harness) so the cluster is quick to ready.
GROUP_OVERRIDES = {"min.insync.replicas": "2", "offsets.topic.num.partitions": "3"}


def ask_coordinator(broker: ClusterBroker, group: str, timeout_s: float = 10.0) -> int | str:
    """One FindCoordinator for `group` to `broker`: the node named, or the error's name."""
    try:
        with WireCluster(broker.bootstrap, timeout_s=timeout_s) as wire:
            conn = wire.bootstrap
            version = conn.version_for(ApiKey.FIND_COORDINATOR)
            response = conn.call(
                ApiKey.FIND_COORDINATOR,
                key=group,
                key_type=KEY_TYPE_GROUP,
                coordinator_keys=(group,),
            )
    except ClientError as exc:
        return str(exc)
    answer = response.coordinators[0] if version >= 4 else response
    error = int(answer.error_code)
    return int(answer.node_id) if error == 0 else ErrorCode(error).name


def group_coordinator(cluster: Cluster, group: str, timeout: float = T) -> ClusterBroker:
    """The broker FindCoordinator names for `group`, asked of every running broker until
    they agree on one that runs (retrying while the coordinator is being elected)."""
    deadline = time.monotonic() + timeout
    last: object = "no answer"
    while True:
        answers = {b.broker_id: ask_coordinator(b, group) for b in cluster.running()}
        nodes = set(answers.values())
        if len(nodes) == 1:
            (node,) = nodes
            if isinstance(node, int) and node in cluster.ids and cluster.broker(node).running:
                return cluster.broker(node)
        last = answers
        if time.monotonic() > deadline:
            raise AssertionError(f"no agreed live coordinator for group {group}: {last}")
        time.sleep(0.2)


def fill(cluster: Cluster, topic: str, partitions: int) -> None:
    """PER_PARTITION values b"<p>-<i>" at offsets i of each partition, acks=all."""
    p = producer(cluster.bootstrap, acks="all", **{"enable.idempotence": True})
    for i in range(PER_PARTITION):
        for part in range(partitions):
            p.produce(topic, value=b"%d-%d" % (part, i), partition=part)
        if i % 100 == 0:
            p.poll(0)
    assert p.flush(T) == 0


def check_resumed_at(records: list[Message], committed: dict[int, int]) -> None:
    """Each partition's records are exactly offsets committed..end, once each, in order,
    and each value is the one written at that offset."""
    by_partition: dict[int, list[int]] = {p: [] for p in committed}
    for m in records:
        by_partition.setdefault(m.partition(), []).append(m.offset())
        assert m.value() == b"%d-%d" % (m.partition(), m.offset()), (m.partition(), m.offset())
    for p, offsets in by_partition.items():
        start = committed.get(p, 0)
        wanted = list(range(start, PER_PARTITION))
        if offsets != wanted:
            before = [o for o in offsets if o < start]
            missing = sorted(set(wanted) - set(offsets))
            raise AssertionError(
                f"partition {p}: committed {start}, read {len(offsets)} records; re-read "
                f"before the commit: {before[:5]} ({len(before)}), skipped: {missing[:5]} "
                f"({len(missing)}), duplicates: {len(offsets) - len(set(offsets))}"
            )


# ---------------------------------------------------------------------------------------


def test_committed_offsets_survive_kill_of_the_coordinator(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster: Cluster = cluster_factory(3, overrides=GROUP_OVERRIDES)
    topic = create_topic(cluster.bootstrap, partitions=3, replication_factor=3)
    fill(cluster, topic, 3)
    group = topic_name("g")
    # Somewhere inside each partition, different for each; an earlier commit first, so the
    # new coordinator must have the latest one, not just any.
    first = {0: 40, 1: 60, 2: 80}
    target = {0: 101, 1: 157, 2: 213}

    c1 = consumer(cluster.bootstrap, group, **{"session.timeout.ms": 10_000})
    c1.subscribe([topic])

    def far_enough(got: list[Message]) -> bool:
        nxt = {m.partition(): m.offset() + 1 for m in got}
        return all(nxt.get(p, 0) >= target[p] for p in target)

    consume_until(c1, far_enough, timeout=T, what="records past each target offset")
    c1.commit(offsets=[TopicPartition(topic, p, o) for p, o in first.items()], asynchronous=False)
    c1.commit(offsets=[TopicPartition(topic, p, o) for p, o in target.items()], asynchronous=False)
    assert committed_offsets(c1, topic, range(3)) == target

    victim = group_coordinator(cluster, group)
    admin = admin_client(cluster.bootstrap)  # kept: its futures die with it
    desc = admin.describe_consumer_groups([group], request_timeout=T)[group].result(timeout=T)
    assert desc.coordinator.id == victim.broker_id
    victim.kill()  # at once after the commit: it must have been replicated before the answer

    successor = group_coordinator(cluster, group)
    assert successor is not victim
    # The member that committed asks the new coordinator (librdkafka finds it itself).
    assert committed_offsets(c1, topic, range(3), timeout=T) == target
    c1.close()

    c2 = consumer(cluster.bootstrap, group)
    c2.subscribe([topic])
    remaining = sum(PER_PARTITION - o for o in target.values())
    got = consume_until(c2, lambda g: len(g) >= remaining, timeout=T, what="the uncommitted rest")
    got += drain(c2, 1.0)
    check_resumed_at(got, target)
    # Committing works on the new coordinator: the positions (every partition's end).
    c2.commit(asynchronous=False)
    end = {p: PER_PARTITION for p in range(3)}
    assert committed_offsets(c2, topic, range(3)) == end
    c2.close()

    c3 = consumer(cluster.bootstrap, group)
    c3.subscribe([topic])
    assert drain(c3, 3.0) == [], "a group that committed every end offset read records again"
    assert committed_offsets(c3, topic, range(3)) == end
    c3.close()

    # The old coordinator comes back as a follower of the offsets it no longer coordinates.
    victim.start()
    cluster.wait_formed()
    c4 = consumer(cluster.bootstrap, group)
    assert committed_offsets(c4, topic, range(3)) == end
    c4.close()


def test_kafka_python_member_commits_through_a_coordinator_move(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster: Cluster = cluster_factory(3, overrides=GROUP_OVERRIDES)
    topic = create_topic(cluster.bootstrap, partitions=1, replication_factor=3)
    fill(cluster, topic, 1)
    group = topic_name("kpg")
    tp = KpTopicPartition(topic, 0)

    kc = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        request_timeout_ms=30_000,
        session_timeout_ms=10_000,
        heartbeat_interval_ms=500,
        max_poll_records=20,
        retry_backoff_ms=100,
    )
    try:
        kafka_python_subscribe(kc, [topic])
        values: list[bytes] = []

        def read(n: int) -> None:
            deadline = time.monotonic() + T
            want = len(values) + n
            while len(values) < want:
                assert time.monotonic() < deadline, f"read {len(values)} of {want}"
                for batch in kc.poll(timeout_ms=200).values():
                    values.extend(r.value for r in batch)

        read(100)
        kc.commit()  # the position: the next offset to read
        before = kc.committed(tp)
        assert before == len(values), (before, len(values))

        victim = group_coordinator(cluster, group)
        victim.kill()
        successor = group_coordinator(cluster, group)
        assert successor is not victim

        read(60)  # the member keeps consuming through the move (rejoining if it must)
        kc.commit()  # to the new coordinator, found again after the old one vanished
        after = kc.committed(tp)
        assert after is not None and after >= before + 60, (before, after)
        # Whatever a rebalance made it read again, it read each value up to there.
        assert set(values) == {b"0-%d" % i for i in range(after)}
    finally:
        kc.close(autocommit=False)

    # A confluent-kafka member of the same group resumes exactly there.
    c = consumer(cluster.bootstrap, group)
    c.subscribe([topic])
    assert committed_offsets(c, topic, [0]) == {0: after}
    got = consume_until(c, lambda g: len(g) >= PER_PARTITION - after, timeout=T)
    got += drain(c, 1.0)
    c.close()
    check_resumed_at(got, {0: after})


def test_a_first_lookup_waits_out_a_slow_election(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    """While the controller is paused, the asked broker creates __consumer_offsets but
    nothing elects its leaders. One FindCoordinator must wait for them rather than answer
    COORDINATOR_NOT_AVAILABLE: librdkafka's admin client asks three times in about 300 ms,
    then waits out its whole request timeout (unless a connection happens to change state)."""
    cluster: Cluster = cluster_factory(3, overrides=GROUP_OVERRIDES)
    controller_id = admin_client(cluster.bootstrap).list_topics(timeout=T).controller_id
    controller = cluster.broker(controller_id)
    asked = next(b for b in cluster.brokers if b is not controller)
    admin = admin_client(asked.bootstrap)
    controller.pause()  # well inside its ZooKeeper session: it stays the controller
    wake = threading.Timer(1.5, controller.resume)
    wake.start()
    try:
        described = admin.describe_consumer_groups(["first-lookup-b"], request_timeout=12)
        node = ask_coordinator(asked, "first-lookup-a")
        coordinator = described["first-lookup-b"].result(15).coordinator.id
    finally:
        wake.cancel()
        controller.resume()
    assert node in cluster.ids, node  # one request, answered once there was a leader
    assert coordinator in cluster.ids
