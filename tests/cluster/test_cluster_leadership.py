"""Leadership on a cluster: controlled shutdown hands it over before the broker exits,
preferred leaders get it back, a paused controller that wakes up is fenced and resigns, and
a deleted topic leaves every broker."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka.admin import NewTopic

from tests.cluster.test_replication import Workload, check_exactly_once, read_all, wait_isr
from tests.helpers.clients import admin_client, create_topic
from tests.helpers.cluster import Cluster, cluster_factory

__all__ = ["cluster_factory"]

T = 30.0


def _wait(condition, what: str, timeout: float = T) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_controlled_shutdown_hands_leadership_over_without_client_errors(
    cluster_factory,  # type: ignore[no-untyped-def]
) -> None:
    cluster: Cluster = cluster_factory(3, overrides={"min.insync.replicas": "2"})
    topic = create_topic(cluster.bootstrap, partitions=3, replication_factor=3)
    work = Workload(cluster.bootstrap, topic).start()
    try:
        work.wait_acked(2000)
        leader = cluster.leader_of(topic, 0)
        assert leader.stop() == 0  # SIGTERM
        assert "controlled shutdown: leadership moved away" in leader.log
        work.wait_acked(len(work.acked) + 2000)
    finally:
        work.stop()
    check_exactly_once(work, read_all(cluster.bootstrap, topic, 3, len(work.acked)))
    leader.start()


def test_preferred_leaders_get_leadership_back(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster: Cluster = cluster_factory(
        3,
        overrides={
            "leader.imbalance.check.interval.seconds": "1",
            "leader.imbalance.per.broker.percentage": "0",
        },
    )
    topic = create_topic(cluster.bootstrap, partitions=3, replication_factor=3)
    admin = admin_client(cluster.bootstrap)

    def leaders() -> dict[int, tuple[int, int]]:
        parts = admin.list_topics(topic, timeout=10).topics[topic].partitions
        return {p: (m.leader, m.replicas[0]) for p, m in parts.items()}

    assert all(leader == preferred for leader, preferred in leaders().values())
    victim = cluster.broker(leaders()[0][1])
    victim.kill()
    _wait(lambda: leaders()[0][0] not in (victim.broker_id, -1), "a new leader")
    victim.start()
    wait_isr(cluster, topic, 0, [1, 2, 3])
    _wait(
        lambda: all(leader == preferred for leader, preferred in leaders().values()),
        "the preferred leaders to lead again",
    )


def test_a_paused_controller_is_fenced_and_resigns(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster: Cluster = cluster_factory(3)
    admin = admin_client(cluster.bootstrap)
    first = admin.list_topics(timeout=10).controller_id
    old = cluster.broker(first)
    old.pause()  # longer than its session: the others elect a new controller
    try:
        survivors = ",".join(b.bootstrap for b in cluster.brokers if b is not old)
        others = admin_client(survivors)
        _wait(
            lambda: others.list_topics(timeout=10).controller_id not in (first, -1),
            "a new controller",
        )
    finally:
        old.resume()
    _wait(lambda: "resigns as controller" in old.log, "the old controller to resign")
    # Every broker, the old controller included once its watches catch up, names the new
    # controller.
    for broker in cluster.brokers:
        view = admin_client(broker.bootstrap)
        _wait(
            lambda view=view: view.list_topics(timeout=10).controller_id not in (first, -1),
            f"broker {broker.broker_id} to name the new controller",
        )
    # The cluster still works: the old controller registers again, and a new topic gets
    # leaders.
    cluster.wait_formed()
    topic = create_topic(cluster.bootstrap, partitions=3, replication_factor=3)
    for p in range(3):
        assert cluster.leader_of(topic, p).broker_id in (1, 2, 3)


def test_delete_topic_leaves_every_broker_and_the_name_can_be_reused(
    cluster_factory,  # type: ignore[no-untyped-def]
) -> None:
    cluster: Cluster = cluster_factory(3)
    topic = create_topic(cluster.bootstrap, partitions=2, replication_factor=3)
    dirs = [Path(b.data_dir) / f"{topic}-{p}" for b in cluster.brokers for p in range(2)]
    _wait(lambda: all(d.is_dir() for d in dirs), "every replica's directory")
    admin = admin_client(cluster.bootstrap)
    admin.delete_topics([topic], operation_timeout=T)[topic].result(T)
    _wait(lambda: not any(d.exists() for d in dirs), "every replica to be deleted")
    assert topic not in admin.list_topics(timeout=10).topics
    admin.create_topics([NewTopic(topic, 1, 3)], request_timeout=T)[topic].result(T)
    assert cluster.leader_of(topic, 0).broker_id in (1, 2, 3)
