"""Rack-aware replica placement on a 6-broker cluster in three racks (two brokers each):
with RF=3 every partition of a created topic, of partitions added later and of
`__consumer_offsets` has a replica in every rack; DescribeCluster gives each broker's rack."""

from __future__ import annotations

from confluent_kafka.admin import NewPartitions

from tests.helpers.clients import admin_client, consumer, create_topic
from tests.helpers.cluster import Cluster, cluster_fixture

RACK = {b: "rack-" + "abc"[(b - 1) % 3] for b in range(1, 7)}
racked = cluster_fixture(
    6,
    scope="module",
    overrides={"offsets.topic.replication.factor": "3", "offsets.topic.num.partitions": "6"},
    broker_overrides={b: {"broker.rack": rack} for b, rack in RACK.items()},
)
T = 30.0


def racks_of_partitions(cluster: Cluster, topic: str) -> list[set[str]]:
    parts = admin_client(cluster.bootstrap).list_topics(topic, timeout=T).topics[topic].partitions
    return [{RACK[b] for b in p.replicas} for p in parts.values()]


def test_every_partition_spans_all_racks(racked: Cluster) -> None:
    topic = create_topic(racked.bootstrap, partitions=12, replication_factor=3)
    assert racks_of_partitions(racked, topic) == [set(RACK.values())] * 12

    admin = admin_client(racked.bootstrap)
    admin.create_partitions([NewPartitions(topic, 18)], request_timeout=T)[topic].result(T)
    assert racks_of_partitions(racked, topic) == [set(RACK.values())] * 18


def test_consumer_offsets_span_all_racks(racked: Cluster) -> None:
    topic = create_topic(racked.bootstrap, replication_factor=3)
    c = consumer(racked.bootstrap)
    c.subscribe([topic])
    c.poll(1.0)  # joining finds the coordinator: __consumer_offsets is created
    c.close()
    spans = racks_of_partitions(racked, "__consumer_offsets")
    assert spans == [set(RACK.values())] * 6


def test_describe_cluster_gives_each_brokers_rack(racked: Cluster) -> None:
    admin = admin_client(racked.bootstrap)
    described = admin.describe_cluster(request_timeout=T).result(T)
    assert {n.id: n.rack for n in described.nodes} == RACK
