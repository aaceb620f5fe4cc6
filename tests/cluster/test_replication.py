"""A replicated cluster through real clients: three brokers and a real ZooKeeper, failover
under an idempotent acks=all producer, kill -9 of every broker at once, a paused follower
and the ISR, divergent logs after an unreplicated acks=1 write, and ZooKeeper itself away.

Every check is about acknowledged data: what a producer was told is written is read back
exactly once, in order, from whichever broker leads afterwards.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, Message, Producer, TopicPartition

from tests.helpers.clients import consumer, create_topic, drain, producer
from tests.helpers.cluster import Cluster, cluster_factory

__all__ = ["cluster_factory"]

T = 30.0
RF3 = {"min.insync.replicas": "2"}


@dataclass
class Workload:
    """An idempotent acks=all producer writing numbered values to a topic from a thread,
    until stopped; it records which values were acknowledged, and where."""

    bootstrap: str
    topic: str
    acked: list[tuple[int, int, int]] = field(default_factory=list)  # (partition, offset, n)
    errors: list[KafkaError] = field(default_factory=list)
    sent: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Workload:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        p = producer(
            self.bootstrap,
            **{
                "enable.idempotence": True,
                "acks": "all",
                "message.timeout.ms": 60_000,
                "linger.ms": 2,
            },
        )

        def delivered(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                self.errors.append(err)
            else:
                self.acked.append((msg.partition(), msg.offset(), int(msg.value())))

        while not self._stop.is_set():
            try:
                p.produce(self.topic, value=str(self.sent).encode(), on_delivery=delivered)
                self.sent += 1
            except BufferError:
                pass
            p.poll(0.002)
        assert p.flush(90) == 0, "deliveries still pending 90 s after the last produce"

    def stop(self) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(120)
        assert not self._thread.is_alive(), "the producer never finished"

    def wait_acked(self, n: int, timeout: float = T) -> None:
        deadline = time.monotonic() + timeout
        while len(self.acked) < n:
            assert time.monotonic() < deadline, f"only {len(self.acked)} of {n} acknowledged"
            time.sleep(0.05)


def write_one_at_a_time(
    p: Producer, topic: str, round_: int, partitions: Iterable[int], errors: list[Any]
) -> None:
    """One record b"<round>-<partition>" to each partition in turn, each flushed before the
    next is sent; delivery errors (None for a success) are appended to `errors`."""
    for partition in partitions:
        p.produce(
            topic,
            value=b"%d-%d" % (round_, partition),
            partition=partition,
            on_delivery=lambda e, m: errors.append(e),
        )
        assert p.flush(T) == 0


def read_all(bootstrap: str, topic: str, partitions: int, expected: int) -> list[Message]:
    """Every record of the topic (read_committed), waiting until `expected` have come."""
    c = consumer(bootstrap, **{"isolation.level": "read_committed"})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got: list[Message] = []
        deadline = time.monotonic() + T
        while len(got) < expected and time.monotonic() < deadline:
            got += drain(c, 0.5)
        got += drain(c, 1.0)
        return got
    finally:
        c.close()


def check_exactly_once(work: Workload, records: list[Message]) -> None:
    """Every acknowledged value is read exactly once, at the offset it was acknowledged
    at, and each partition holds its values in the order they were sent."""
    assert not work.errors, f"delivery errors: {work.errors[:5]}"
    seen: dict[int, list[tuple[int, int]]] = {}
    for m in records:
        seen.setdefault(int(m.value()), []).append((m.partition(), m.offset()))
    duplicates = {v: where for v, where in seen.items() if len(where) > 1}
    assert not duplicates, f"{len(duplicates)} values read twice: {list(duplicates.items())[:5]}"
    missing = [a for a in work.acked if a[2] not in seen]
    assert not missing, f"{len(missing)} acknowledged values never read: {missing[:5]}"
    moved = [a for a in work.acked if seen[a[2]][0] != (a[0], a[1])]
    assert not moved, f"values read at other offsets than acknowledged: {moved[:5]}"
    by_partition: dict[int, list[int]] = {}
    for m in sorted(records, key=lambda m: (m.partition(), m.offset())):
        by_partition.setdefault(m.partition(), []).append(int(m.value()))
    for p, values in by_partition.items():
        assert values == sorted(values), f"partition {p} out of order"


def segment_bytes(cluster: Cluster, broker_id: int, topic: str, partition: int) -> bytes:
    d = Path(cluster.broker(broker_id).data_dir) / f"{topic}-{partition}"
    return b"".join(f.read_bytes() for f in sorted(d.glob("*.log")))


def wait_replicas_agree(cluster: Cluster, topic: str, partition: int) -> bytes:
    """Until every replica's segment files hold the same bytes; returns them."""
    deadline = time.monotonic() + T
    while True:
        copies = {b: segment_bytes(cluster, b, topic, partition) for b in cluster.ids}
        if len(set(copies.values())) == 1:
            return next(iter(copies.values()))
        assert time.monotonic() < deadline, {b: len(c) for b, c in copies.items()}
        time.sleep(0.2)


def isr_of(cluster: Cluster, topic: str, partition: int) -> list[int]:
    from tests.helpers.clients import admin_client

    md = admin_client(cluster.bootstrap).list_topics(topic, timeout=10)
    return sorted(md.topics[topic].partitions[partition].isrs)


def wait_isr(cluster: Cluster, topic: str, partition: int, wanted: list[int]) -> None:
    deadline = time.monotonic() + T
    while (isr := isr_of(cluster, topic, partition)) != sorted(wanted):
        assert time.monotonic() < deadline, f"ISR {isr}, waited for {sorted(wanted)}"
        time.sleep(0.2)


# ---------------------------------------------------------------------------------------


def test_leader_killed_under_idempotent_acks_all_producer(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster: Cluster = cluster_factory(3, overrides=RF3)
    topic = create_topic(cluster.bootstrap, partitions=1, replication_factor=3)
    work = Workload(cluster.bootstrap, topic).start()
    # A consumer reads all along: after the leader change it validates its position with
    # the new leader (KIP-320) and goes on, neither skipping nor re-reading.
    live: list[Message] = []
    stop_reading = threading.Event()
    c = consumer(cluster.bootstrap, **{"isolation.level": "read_committed"})
    c.assign([TopicPartition(topic, 0, 0)])

    def read() -> None:
        while not stop_reading.is_set():
            live.extend(drain(c, 0.2))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        work.wait_acked(2000)
        victim = cluster.leader_of(topic, 0)
        victim.kill()
        acked_at_kill = len(work.acked)
        new_leader = cluster.leader_of(topic, 0)
        assert new_leader is not victim
        work.wait_acked(acked_at_kill + 2000)
    finally:
        work.stop()
    deadline = time.monotonic() + T
    while len(live) < len(work.acked) and time.monotonic() < deadline:
        time.sleep(0.1)
    stop_reading.set()
    reader.join(10)
    c.close()
    check_exactly_once(work, live)
    records = read_all(cluster.bootstrap, topic, 1, len(work.acked))
    check_exactly_once(work, records)
    victim.start()  # comes back, truncates what it must, catches up, rejoins the ISR
    wait_isr(cluster, topic, 0, [1, 2, 3])
    wait_replicas_agree(cluster, topic, 0)


def test_kill_of_every_broker_at_once_loses_nothing_acknowledged(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster: Cluster = cluster_factory(3, overrides=RF3)
    topic = create_topic(cluster.bootstrap, partitions=3, replication_factor=3)
    work = Workload(cluster.bootstrap, topic).start()
    work.wait_acked(3000)
    cluster.kill_all()  # a power cut of the whole cluster, mid-production
    acked = list(work.acked)
    cluster.start_all()
    cluster.wait_formed()
    work.stop()  # the producer rode through the restart
    records = read_all(cluster.bootstrap, topic, 3, len(work.acked))
    assert len(work.acked) >= len(acked)
    check_exactly_once(work, records)


def test_paused_follower_leaves_the_isr_and_min_isr_refuses_acks_all(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster: Cluster = cluster_factory(
        3, overrides={"min.insync.replicas": "3", "replica.lag.time.max.ms": "2000"}
    )
    topic = create_topic(cluster.bootstrap, partitions=1, replication_factor=3)
    leader = cluster.leader_of(topic, 0)
    follower = next(b for b in cluster.brokers if b is not leader)
    p = producer(cluster.bootstrap, **{"acks": "all", "message.timeout.ms": 5000, "retries": 0})
    ok: list[KafkaError | None] = []
    p.produce(topic, value=b"before", on_delivery=lambda e, m: ok.append(e))
    assert p.flush(T) == 0 and ok == [None]

    follower.pause()
    try:
        wait_isr(cluster, topic, 0, [b.broker_id for b in cluster.brokers if b is not follower])
        refused: list[KafkaError | None] = []
        p.produce(topic, value=b"during", on_delivery=lambda e, m: refused.append(e))
        p.flush(T)
        assert refused and refused[0] is not None
        assert refused[0].code() == KafkaError.NOT_ENOUGH_REPLICAS, refused[0]
    finally:
        follower.resume()
    wait_isr(cluster, topic, 0, [1, 2, 3])
    after: list[KafkaError | None] = []
    retrying = producer(cluster.bootstrap, **{"acks": "all"})  # each broker learns the ISR
    retrying.produce(topic, value=b"after", on_delivery=lambda e, m: after.append(e))
    assert retrying.flush(T) == 0 and after == [None]
    values = [m.value() for m in read_all(cluster.bootstrap, topic, 1, 2)]
    assert values == [b"before", b"after"]


def test_divergent_acks_1_tail_is_truncated_and_never_read(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster: Cluster = cluster_factory(3, overrides={"min.insync.replicas": "1"})
    topic = create_topic(cluster.bootstrap, partitions=1, replication_factor=3)
    p = producer(cluster.bootstrap, **{"acks": "all"})
    for i in range(100):
        p.produce(topic, value=b"kept-%d" % i)
    assert p.flush(T) == 0
    leader = cluster.leader_of(topic, 0)
    followers = [b for b in cluster.brokers if b is not leader]
    # Followers stop copying; the leader takes acks=1 writes it cannot replicate, and dies.
    # A fetch already parked at the leader is answered (empty) within
    # replica.fetch.wait.max.ms, so after the pause no fetch is left to carry the writes.
    for f in followers:
        f.pause()
    time.sleep(1.0)
    lost: list[tuple[KafkaError | None, int]] = []
    p1 = producer(leader.bootstrap, **{"acks": "1"})
    for i in range(20):
        p1.produce(
            topic, value=b"lost-%d" % i, on_delivery=lambda e, m: lost.append((e, m.offset()))
        )
    assert p1.flush(T) == 0
    assert all(e is None for e, _ in lost), lost  # acknowledged by the leader alone
    c = consumer(leader.bootstrap)
    c.assign([TopicPartition(topic, 0, 0)])
    early = drain(c, 1.0)
    c.close()
    leader.kill()
    for f in followers:
        f.resume()
    new_leader = cluster.leader_of(topic, 0)
    assert new_leader is not leader
    for i in range(50):
        p.produce(topic, value=b"new-%d" % i)
    assert p.flush(T) == 0
    leader.start()
    final = wait_replicas_agree(cluster, topic, 0)
    assert b"lost-" not in final, "the unreplicated tail survived on some replica"
    values = [m.value() for m in read_all(cluster.bootstrap, topic, 1, 150)]
    assert [v for v in values if v.startswith(b"lost-")] == []
    assert len(values) == 150
    # Below the high watermark, nobody ever read what was lost.
    assert not [m for m in early if m.value().startswith(b"lost-")]


def test_zookeeper_away_leaders_keep_serving(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster: Cluster = cluster_factory(3, overrides=RF3)
    topic = create_topic(cluster.bootstrap, partitions=3, replication_factor=3)
    work = Workload(cluster.bootstrap, topic).start()
    try:
        work.wait_acked(1000)
        cluster.zookeeper.stop()
        during = len(work.acked)
        work.wait_acked(during + 2000)  # no ZooKeeper, the leaders keep acknowledging
        cluster.zookeeper.start()
        work.wait_acked(len(work.acked) + 1000)
    finally:
        work.stop()
    check_exactly_once(work, read_all(cluster.bootstrap, topic, 3, len(work.acked)))


def test_each_partition_written_while_the_others_are_quiet_is_replicated_at_once(
    cluster_factory,  # type: ignore[no-untyped-def]
) -> None:
    """A follower's fetch session reads only the partitions with news (fetch_sessions.py):
    with every replica required (min.insync.replicas=3) and many partitions idle in each
    session, one partition at a time gets a record after a quiet spell longer than
    replica.lag.time.max.ms. Each acks=all write completes, so the followers copied it at
    once (a partition wrongly taken for quiet would stall until the timeout), no follower
    left the ISR over the quiet spell, and every record is read back once."""
    cluster: Cluster = cluster_factory(
        3, overrides={"min.insync.replicas": "3", "replica.lag.time.max.ms": "1500"}
    )
    partitions = 8
    topic = create_topic(cluster.bootstrap, partitions=partitions, replication_factor=3)
    p = producer(
        cluster.bootstrap,
        **{"acks": "all", "enable.idempotence": True, "message.timeout.ms": 10_000},
    )
    errors: list[KafkaError | None] = []
    for round_ in range(2):
        write_one_at_a_time(p, topic, round_, range(partitions), errors)
        if round_ == 0:
            time.sleep(2.5)  # every partition quiet for longer than the lag time
            for partition in range(partitions):
                assert isr_of(cluster, topic, partition) == [1, 2, 3]
    assert errors == [None] * (2 * partitions)
    values = sorted(m.value() for m in read_all(cluster.bootstrap, topic, partitions, 16))
    assert values == sorted(b"%d-%d" % (r, n) for r in range(2) for n in range(partitions))


def test_a_parked_follower_fetch_answers_the_partition_whose_append_woke_it(
    cluster_factory,  # type: ignore[no-untyped-def]
) -> None:
    """A follower's parked session fetch, woken by an append, looks again only at the
    partitions that woke it and those it read before (handlers/fetch.py), not at all of
    its session's. With the followers' fetches parked for up to 20 s
    (replica.fetch.wait.max.ms) and every replica required, each acks=all write to one
    partition among many idle ones must complete within its 5 s timeout: a woken
    partition left unread would wait out the 20 s park. (A first record per partition,
    with no such limit, lets every follower's session take in the new partitions: a fetch
    parked before the follower learned of one comes back only with an append it watches.)
    """
    cluster: Cluster = cluster_factory(
        3, overrides={"min.insync.replicas": "3", "replica.fetch.wait.max.ms": "20000"}
    )
    partitions = 8
    topic = create_topic(cluster.bootstrap, partitions=partitions, replication_factor=3)
    settings = {"acks": "all", "enable.idempotence": True}
    first = producer(cluster.bootstrap, **settings, **{"message.timeout.ms": 120_000})
    for partition in range(partitions):
        first.produce(topic, value=b"first-%d" % partition, partition=partition)
    assert first.flush(120) == 0
    p = producer(cluster.bootstrap, **settings, **{"message.timeout.ms": 5_000})
    errors: list[KafkaError | None] = []
    order = (*range(partitions), 0, 0)  # the same partition again, at once
    for round_ in range(3):
        write_one_at_a_time(p, topic, round_, order, errors)
    assert errors == [None] * (3 * len(order))
    values = sorted(m.value() for m in read_all(cluster.bootstrap, topic, partitions, 38))
    assert values == sorted(
        [b"%d-%d" % (r, n) for r in range(3) for n in order]
        + [b"first-%d" % n for n in range(partitions)]
    )
