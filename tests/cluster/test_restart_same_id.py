"""A broker killed with kill -9 and started again at once, with the same id, host and port:
its earlier run's registration lives until ZooKeeper expires that session, and the broker
waits for it (one line in its log) instead of exiting, then registers and serves. A live
broker's id taken by a broker on another port is still refused at once, as before.

ZooKeeper's sessions are 10 s here (not the cluster helper's 4 s): the restarted broker
must reach its registration while the old session still lives, even on a loaded machine.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewTopic
from kazoo.client import KazooClient

from onceflow.cluster.znodes import broker_path
from tests.helpers.broker import BrokerProcess, broker_command, free_port
from tests.helpers.clients import (
    admin_client,
    consume_until,
    consumer,
    produce_and_confirm,
    producer,
    topic_name,
)
from tests.helpers.cluster import Cluster, cluster_fixture

SESSION_MS = 10_000
WAITING = "waiting up to"
OP_TIMEOUT_S = 30.0

two = cluster_fixture(
    2, overrides={"zookeeper.session.timeout.ms": str(SESSION_MS)}, scope="module"
)


def registration_session(cluster: Cluster, broker_id: int) -> int | None:
    """The ZooKeeper session that holds the broker's registration (None: unregistered)."""
    zk = KazooClient(hosts=cluster.zookeeper.connect, timeout=5.0)
    zk.start(timeout=10.0)
    try:
        stat = zk.exists(broker_path(broker_id))
        return None if stat is None else int(stat.ephemeralOwner)
    finally:
        zk.stop()
        zk.close()


def log_since(broker: BrokerProcess, mark: int) -> str:
    return Path(broker.log_path).read_bytes()[mark:].decode(errors="replace")


def test_a_broker_killed_and_started_again_at_once_waits_then_serves(two: Cluster) -> None:
    victim = two.broker(2)
    old_session = registration_session(two, 2)
    assert old_session is not None
    mark = victim.log_size()
    victim.kill()
    # BrokerProcess.start, not ClusterBroker.start: that one first waits out the session.
    # It returns once the broker listens, which it does only after it has registered.
    BrokerProcess.start(victim)

    restarted = log_since(victim, mark)
    waiting = [line for line in restarted.splitlines() if WAITING in line]
    assert len(waiting) == 1, restarted
    assert "broker.id 2 is still registered in ZooKeeper with this broker's address" in waiting[0]
    assert f"127.0.0.1:{victim.port}" in waiting[0]
    assert "another broker runs with the same id" not in restarted
    assert registration_session(two, 2) not in (None, old_session)
    two.wait_formed()

    # It serves: a partition only it holds is led by it, and takes and gives records.
    topic = topic_name()
    admin = admin_client(victim.bootstrap)
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=1, replica_assignment=[[2]])], request_timeout=OP_TIMEOUT_S
    )
    futures[topic].result(timeout=OP_TIMEOUT_S)
    assert two.leader_of(topic, 0) is victim
    values = [f"v{i}".encode() for i in range(10)]
    delivered = produce_and_confirm(
        producer(victim.bootstrap), topic, [(0, None, v, None) for v in values]
    )
    assert delivered.errors == []
    c = consumer(victim.bootstrap)
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got = consume_until(c, lambda msgs: len(msgs) >= len(values))
    finally:
        c.close()
    assert [m.value() for m in got] == values


def test_a_live_broker_s_id_on_another_port_is_still_refused_at_once(
    two: Cluster, tmp_path: Path
) -> None:
    assert registration_session(two, 1) is not None
    port = free_port()
    while port in {b.port for b in two.brokers}:
        port = free_port()
    cmd = broker_command(
        str(tmp_path / "data"), f"127.0.0.1:{port}", {**two.broker(1).overrides, "node.id": "1"}
    )
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert (
        f"broker.id 1 is already registered in ZooKeeper at {two.zookeeper.connect}: another "
        "broker runs with the same id" in done.stderr
    )
    assert WAITING not in done.stderr
    assert "Traceback" not in done.stderr
    assert two.metadata_brokers() == {1, 2}, "the running broker 1 is untouched"
