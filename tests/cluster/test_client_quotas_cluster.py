"""Client quotas on a 3-broker cluster: a quota set through one broker is kept in Kafka's
znodes with a change notification, is enforced by another broker (which leads the
partition a throttled client writes to), is described by every broker, survives a restart
of every broker, and its removal through a third broker ends the throttling everywhere."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from kazoo.client import KazooClient

from onceflow.client.cluster import Cluster as WireCluster
from onceflow.client.quota_admin import alter_client_quotas, describe_client_quotas
from onceflow.records.builder import build_batch
from tests.helpers.clients import create_topic
from tests.helpers.cluster import Cluster, ClusterBroker, cluster_fixture
from tests.helpers.wire import RawConnection, produce_request

quotas_cluster = cluster_fixture(3, overrides={"quota.window.num": "3"})
RAW_CLIENT = (("client-id", "raw-test"),)  # the client id RawConnection sends
T = 20.0


def _throttle_ms(broker: ClusterBroker, topic: str, partition: int) -> float:
    """Produce 40 kB as client raw-test to the partition's leader: its throttle time."""
    batch = build_batch([(None, b"x" * 40_000, [])], timestamp_ms=int(time.time() * 1000))
    with RawConnection(broker.bootstrap) as raw:
        response = raw.call(produce_request(topic, {partition: batch}))
    [topic_response] = response.responses
    [partition_response] = topic_response.partition_responses
    assert partition_response.error_code == 0
    return response.throttle_time.total_seconds() * 1000


def _eventually(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + T
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {T} s: {what}")
        time.sleep(0.2)


def _describe(broker: ClusterBroker) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    with WireCluster(broker.bootstrap, T) as wire:
        return describe_client_quotas(wire.bootstrap, [])


def _partition_led_by(cluster: Cluster, topic: str, broker_id: int) -> int:
    for partition in range(6):
        if cluster.leader_of(topic, partition).broker_id == broker_id:
            return partition
    raise AssertionError(f"broker {broker_id} leads no partition of {topic}")


def test_a_quota_set_through_one_broker_binds_on_another(quotas_cluster: Cluster) -> None:
    cluster = quotas_cluster
    one, two, three = (cluster.broker(i) for i in (1, 2, 3))
    topic = create_topic(cluster.bootstrap, partitions=6, replication_factor=1)
    partition = _partition_led_by(cluster, topic, 2)
    assert _throttle_ms(two, topic, partition) == 0  # no quota yet

    with WireCluster(one.bootstrap, T) as wire:
        done = alter_client_quotas(wire.bootstrap, {RAW_CLIENT: {"producer_byte_rate": 10_000}})
    assert done == {RAW_CLIENT: None}

    zk = KazooClient(hosts=cluster.zookeeper.connect, timeout=5.0)
    zk.start()
    try:
        raw, _ = zk.get("/config/clients/raw-test")
        assert json.loads(raw) == {"version": 1, "config": {"producer_byte_rate": "10000"}}
        notices = [
            json.loads(zk.get(f"/config/changes/{c}")[0])
            for c in zk.get_children("/config/changes")
        ]
        assert {"version": 2, "entity_path": "clients/raw-test"} in notices
    finally:
        zk.stop()
        zk.close()

    _eventually(lambda: _throttle_ms(two, topic, partition) > 0, "broker 2 throttles raw-test")
    assert _describe(three) == {RAW_CLIENT: {"producer_byte_rate": 10_000.0}}

    cluster.stop()
    cluster.start()
    partition = _partition_led_by(cluster, topic, 2)
    assert _describe(two) == {RAW_CLIENT: {"producer_byte_rate": 10_000.0}}
    _eventually(lambda: _throttle_ms(two, topic, partition) > 0, "throttled after a restart")

    with WireCluster(three.bootstrap, T) as wire:
        removed = alter_client_quotas(wire.bootstrap, {RAW_CLIENT: {"producer_byte_rate": None}})
    assert removed == {RAW_CLIENT: None}
    _eventually(lambda: _describe(one) == {}, "broker 1 sees the removal")
    _eventually(lambda: _throttle_ms(two, topic, partition) == 0, "broker 2 stops throttling")
