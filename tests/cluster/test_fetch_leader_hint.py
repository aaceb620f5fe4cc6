"""Fetch v16+ and Produce v10+ (KIP-951) to a broker that does not lead the partition:
NOT_LEADER_OR_FOLLOWER with the current leader and its endpoint, so the client need not ask
Metadata first."""

from __future__ import annotations

import time

from onceflow.records.builder import build_batch
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import create_topic
from tests.helpers.cluster import Cluster, cluster_fixture
from tests.helpers.wire import RawConnection, fetch_request
from tests.integration.test_fetch_versions_wire import create_or_describe
from tests.integration.test_produce_versions_wire import produce_request

two_brokers = cluster_fixture(2)


def test_fetch_from_a_follower_names_the_leader(two_brokers: Cluster) -> None:
    topic = create_topic(two_brokers.bootstrap, replication_factor=2)
    leader = two_brokers.leader_of(topic, 0)
    (follower,) = (b for b in two_brokers.brokers if b.broker_id != leader.broker_id)
    with RawConnection(leader.bootstrap) as conn:
        topic_id = create_or_describe(conn, topic)
    answers = {}
    for version in (15, 16, 18):
        with RawConnection(follower.bootstrap) as conn:
            answers[version] = conn.call(
                fetch_request(topic, version=version, topic_id=topic_id, isolation_level=1)
            )
    for version, resp in answers.items():
        (partition,) = resp.responses[0].partitions
        assert partition.error_code == 6  # NOT_LEADER_OR_FOLLOWER
        if version < 16:
            assert partition.current_leader.leader_id == -1  # not sent before v16
            continue
        assert partition.current_leader.leader_id == leader.broker_id
        assert partition.current_leader.leader_epoch >= 0
        assert [(n.node_id, n.port) for n in resp.node_endpoints] == [
            (leader.broker_id, _port(leader))
        ]


def _port(broker: BrokerProcess) -> int:
    return int(broker.bootstrap.rsplit(":", 1)[1])


def test_produce_to_a_follower_names_the_leader(two_brokers: Cluster) -> None:
    """Produce v10+ (KIP-951) answers NOT_LEADER_OR_FOLLOWER with the leader and its endpoint."""
    topic = create_topic(two_brokers.bootstrap, replication_factor=2)
    leader = two_brokers.leader_of(topic, 0)
    (follower,) = (b for b in two_brokers.brokers if b.broker_id != leader.broker_id)
    batch = build_batch([(b"k", b"v", [])], timestamp_ms=int(time.time() * 1000))
    answers = {}
    for version in (9, 10):
        with RawConnection(follower.bootstrap) as conn:
            answers[version] = conn.call(produce_request(version, topic, {0: batch}))
    for version, resp in answers.items():
        (partition,) = resp.responses[0].partition_responses
        assert partition.error_code == 6  # NOT_LEADER_OR_FOLLOWER
        if version >= 10:
            assert partition.current_leader.leader_id == leader.broker_id
            assert [(n.node_id, n.port) for n in resp.node_endpoints] == [
                (leader.broker_id, _port(leader))
            ]
