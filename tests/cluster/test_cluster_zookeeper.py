"""The cluster and ZooKeeper's failures: a 3-node ensemble that loses a node, and a leader
cut off from ZooKeeper and from its peers.

- With one of three ZooKeeper servers killed (the ensemble's leader, so the quorum elects
  another and every session moves), the kill -9 of a partition leader under an idempotent
  acks=all producer still fails over, and every acknowledged record is read exactly once.
- A leader partitioned away (its ZooKeeper link and its advertised address both cut by a
  plain TCP forwarder, its own listener still reachable) keeps believing it leads, but
  must acknowledge no acks=all write it cannot replicate, while the rest of the cluster
  elects a new leader and keeps acknowledging. After the heal the log holds every
  acknowledged record exactly once and nothing the cut-off leader was sent.
"""

from __future__ import annotations

import dataclasses
import datetime
import time

from confluent_kafka.admin import NewTopic

from onceflow.client.cluster import Cluster as WireCluster
from onceflow.client.errors import ClientError
from onceflow.cluster.zk_server import four_letter_word
from onceflow.errors import ErrorCode
from onceflow.records.builder import build_batch
from tests.cluster.test_replication import (
    RF3,
    T,
    Workload,
    check_exactly_once,
    read_all,
    wait_isr,
    wait_replicas_agree,
)
from tests.helpers.clients import admin_client, topic_name
from tests.helpers.cluster import Cluster, ClusterBroker, cluster_factory
from tests.helpers.tcp_cut import TcpCut
from tests.helpers.wire import RawConnection, produce_request

__all__ = ["cluster_factory"]


def zookeeper_leader(cluster: Cluster) -> int:
    """The index (in cluster.zookeeper.servers) of the ensemble's current leader."""
    deadline = time.monotonic() + T
    while True:
        for i, server in enumerate(cluster.zookeeper.servers):
            host, _, port = server.address.rpartition(":")
            if b"Mode: leader" in four_letter_word(host, int(port), "srvr", timeout=2.0):
                return i
        assert time.monotonic() < deadline, "no ZooKeeper server says it leads"
        time.sleep(0.2)


def leader_seen_by(broker: ClusterBroker, topic: str, partition: int) -> int:
    """The leader of a partition in `broker`'s own Metadata (-1: none, or no answer)."""
    try:
        with WireCluster(broker.bootstrap, timeout_s=5.0) as wire:
            return wire.metadata([topic]).leaders.get(topic, {}).get(partition, -1)
    except ClientError:
        return -1


# ---------------------------------------------------------------------------------------


def test_leader_failover_with_a_zookeeper_node_down(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster: Cluster = cluster_factory(3, zookeepers=3, overrides=RF3)
    topic = topic_name()
    admin = admin_client(cluster.bootstrap)
    admin.create_topics([NewTopic(topic, 1, 3)], request_timeout=T)[topic].result(timeout=T)
    work = Workload(cluster.bootstrap, topic).start()
    try:
        work.wait_acked(1000)
        zk_down = cluster.zookeeper.servers[zookeeper_leader(cluster)]
        zk_down.kill()  # the quorum elects another leader; every session moves to it
        at_zk_kill = len(work.acked)
        work.wait_acked(at_zk_kill + 1000)  # the cluster rides through ZooKeeper's election
        victim = cluster.leader_of(topic, 0)
        victim.kill()
        at_kill = len(work.acked)
        new_leader = cluster.leader_of(topic, 0)
        assert new_leader is not victim
        work.wait_acked(at_kill + 1000)
    finally:
        work.stop()
    assert not zk_down.running
    check_exactly_once(work, read_all(cluster.bootstrap, topic, 1, len(work.acked)))
    # The dead broker comes back through the two remaining ZooKeeper servers and catches up.
    victim.start()
    wait_isr(cluster, topic, 0, [1, 2, 3])
    wait_replicas_agree(cluster, topic, 0)


# acks=all writes sent straight to the cut-off leader: each waits this long at most.
RAW_TIMEOUT_MS = 1500
# Errors that mean "not written as asked": anything but success is fine; these are the ones
# a correct leader may give (not replicated in time, too few replicas, not the leader).
REFUSALS = {
    ErrorCode.request_timed_out,
    ErrorCode.not_enough_replicas,
    ErrorCode.not_enough_replicas_after_append,
    ErrorCode.not_leader_or_follower,
}


def raw_produce_acks_all(broker: ClusterBroker, topic: str, value: bytes) -> object:
    """One acks=all Produce of one record straight to the broker's own listener: the
    partition's error code, or the exception if no answer came (both: not acknowledged)."""
    batch = build_batch([(None, value, [])], timestamp_ms=int(time.time() * 1000))
    request = dataclasses.replace(
        produce_request(topic, {0: batch}, acks=-1),
        timeout=datetime.timedelta(milliseconds=RAW_TIMEOUT_MS),
    )
    try:
        with RawConnection(broker.bootstrap, timeout=RAW_TIMEOUT_MS / 1000 + 5) as conn:
            response = conn.call(request)
    except OSError as exc:
        return exc
    return ErrorCode(int(response.responses[0].partition_responses[0].error_code))


def test_leader_cut_off_from_zookeeper_and_peers_acknowledges_nothing(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster: Cluster = cluster_factory(
        3,
        # min.insync.replicas=1: only the ISR in ZooKeeper stands between the cut-off leader
        # and acknowledging alone, so shrinking it without ZooKeeper would show.
        overrides={"min.insync.replicas": "1", "replica.lag.time.max.ms": "2000"},
        start=False,
    )
    one = cluster.broker(1)
    zk_link = TcpCut(cluster.zookeeper.connect).start()  # broker 1 -> ZooKeeper
    peer_link = TcpCut(one.bootstrap).start()  # peers and clients -> broker 1
    one.overrides["zookeeper.connect"] = zk_link.address
    one.overrides["advertised.listeners"] = peer_link.address
    codes: dict[int, int | None] = {}
    try:
        cluster.start()
        peer_link.target = ("127.0.0.1", one.port)  # in case its first start moved it
        _cut_off_leader(cluster, one, zk_link, peer_link)
    finally:
        # The brokers stop before the links go: broker 1 reaches ZooKeeper through one.
        # (The fixture's teardown then finds them stopped and checks their logs.)
        zk_link.heal()
        peer_link.heal()
        try:
            codes = cluster.stop()
        finally:
            zk_link.close()
            peer_link.close()
    bad = {i: code for i, code in codes.items() if code not in (0, None)}
    assert not bad, f"brokers exited with errors on SIGTERM: {bad}"


def _cut_off_leader(
    cluster: Cluster, one: ClusterBroker, zk_link: TcpCut, peer_link: TcpCut
) -> None:
    others = [b for b in cluster.brokers if b is not one]
    topic = topic_name()
    admin = admin_client(cluster.bootstrap)
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[1, 2, 3]])], request_timeout=T)[
        topic
    ].result(timeout=T)
    assert cluster.leader_of(topic, 0) is one
    wait_isr(cluster, topic, 0, [1, 2, 3])
    assert zk_link.accepted > 0 and peer_link.accepted > 0, "the links were never used"

    work = Workload(cluster.bootstrap, topic).start()
    refused: dict[bytes, object] = {}
    try:
        work.wait_acked(500)
        # ---- the partition: from now on broker 1 can replicate nothing ----------------
        zk_link.cut()
        peer_link.cut()
        cut_at = time.monotonic()
        at_cut = len(work.acked)
        n = 0
        moved_at: float | None = None
        other_ids = {b.broker_id for b in others}
        # Until the rest of the cluster has a new leader and a while after; by then broker 1
        # has also tried to shrink its ISR (after replica.lag.time.max.ms), in vain.
        while (
            moved_at is None or time.monotonic() - cut_at < 8.0 or time.monotonic() - moved_at < 3.0
        ):
            assert time.monotonic() - cut_at < 40.0, "the cluster never elected a new leader"
            value = b"refused-%d" % n
            n += 1
            refused[value] = raw_produce_acks_all(one, topic, value)
            assert refused[value] != ErrorCode.none, (
                f"broker 1, cut off, acknowledged an acks=all write ({value!r}) "
                f"{time.monotonic() - cut_at:.1f} s after the cut"
            )
            if moved_at is None and all(
                leader_seen_by(other, topic, 0) in other_ids for other in others
            ):
                moved_at = time.monotonic()
        assert moved_at is not None
        acked_during = len(work.acked) - at_cut
        # The rest of the cluster kept (or started again) acknowledging, on the new leader.
        work.wait_acked(len(work.acked) + 500)
        one_thinks = leader_seen_by(one, topic, 0)  # reported: it never heard of the move
        # ---- heal ---------------------------------------------------------------------
        zk_link.heal()
        peer_link.heal()
        healed_at = time.monotonic()
        # Broker 1's ZooKeeper client reconnects on its own backoff (it doubles while the
        # link is down), then finds its session expired, registers again and follows.
        wait_isr(cluster, topic, 0, [1, 2, 3])
        rejoined_s = time.monotonic() - healed_at
        work.wait_acked(len(work.acked) + 500)
    finally:
        work.stop()
    unexpected = {
        v: e for v, e in refused.items() if e not in REFUSALS and not isinstance(e, OSError)
    }
    assert not unexpected, f"unexpected answers from the cut-off leader: {unexpected}"
    records = read_all(cluster.bootstrap, topic, 1, len(work.acked))
    ghosts = [(m.offset(), m.value()) for m in records if m.value().startswith(b"refused-")]
    assert not ghosts, f"records broker 1 never acknowledged are in the log: {ghosts[:5]}"
    check_exactly_once(work, records)
    final = wait_replicas_agree(cluster, topic, 0)
    assert b"refused-" not in final, "a replica kept broker 1's unacknowledged tail"
    answers = sorted({e.name if isinstance(e, ErrorCode) else repr(e) for e in refused.values()})
    print(
        f"broker 1 refused {len(refused)} acks=all writes while cut off: {answers}; "
        "the cluster moved the leadership "
        f"{moved_at - cut_at:.1f} s after the cut and acknowledged {acked_during} records "
        f"meanwhile; broker 1 still named {one_thinks} as leader; it was back in the ISR "
        f"{rejoined_s:.1f} s after the heal"
    )
