"""The participant client's connections are kept for the next client of the process
(`onceflow.client.cluster_pool`): the next producer or decision-log read reuses them,
and never one the broker closed, one a failed request left mid-answer, or one made for
other settings."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from onceflow.client import cluster_pool
from onceflow.client.cluster_pool import ClusterPool
from onceflow.client.participant import TwoPhaseProducer
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import create_topic


@pytest.fixture
def fresh_pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[ClusterPool]:
    fresh = ClusterPool()
    monkeypatch.setattr(cluster_pool, "pool", fresh)
    monkeypatch.setattr("onceflow.client.participant_link.pool", fresh)
    yield fresh
    fresh.clear()


def _one_transaction(bootstrap: str, topic: str, txn_id: str) -> object:
    """A committed transaction of one record; the socket it used."""
    with TwoPhaseProducer(bootstrap, txn_id, two_phase=False) as producer:
        producer.init()
        producer.begin()
        producer.produce(topic, b"v")
        producer.commit()
        return producer._link.wire.bootstrap._sock


def test_the_next_producer_reuses_the_connections(
    broker: BrokerProcess, fresh_pool: ClusterPool
) -> None:
    create_topic(broker.bootstrap, "pool-reuse", 1)
    first = _one_transaction(broker.bootstrap, "pool-reuse", "pool-a")
    assert _one_transaction(broker.bootstrap, "pool-reuse", "pool-b") is first


def test_a_connection_the_broker_closed_is_not_reused(
    broker: BrokerProcess, fresh_pool: ClusterPool
) -> None:
    create_topic(broker.bootstrap, "pool-restart", 1)
    first = _one_transaction(broker.bootstrap, "pool-restart", "pool-c")
    broker.restart(kill=True)
    # The pooled sockets saw the broker go: the next producer connects anew and works.
    assert _one_transaction(broker.bootstrap, "pool-restart", "pool-c") is not first


def test_a_connection_awaiting_an_answer_is_not_reused(
    broker: BrokerProcess, fresh_pool: ClusterPool
) -> None:
    cluster = fresh_pool.take(broker.bootstrap, 5.0, None)
    connection = cluster.bootstrap
    connection.core.request(18, 0, connection.core.api_versions_request())  # never read
    fresh_pool.give_back(cluster, broker.bootstrap, 5.0, None)
    assert fresh_pool.take(broker.bootstrap, 5.0, None) is not cluster


def test_other_settings_or_an_old_cluster_get_their_own(
    broker: BrokerProcess, fresh_pool: ClusterPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = fresh_pool.take(broker.bootstrap, 5.0, None)
    fresh_pool.give_back(cluster, broker.bootstrap, 5.0, None)
    assert fresh_pool.take(broker.bootstrap, 9.0, None) is not cluster
    assert fresh_pool.take(broker.bootstrap, 5.0, None) is cluster
    fresh_pool.give_back(cluster, broker.bootstrap, 5.0, None)
    monkeypatch.setattr(cluster_pool, "MAX_IDLE_S", 0.0)
    assert fresh_pool.take(broker.bootstrap, 5.0, None) is not cluster


def test_a_forked_child_does_not_use_its_parents_connections(
    broker: BrokerProcess, fresh_pool: ClusterPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = fresh_pool.take(broker.bootstrap, 5.0, None)
    fresh_pool.give_back(cluster, broker.bootstrap, 5.0, None)
    parent = os.getpid()
    monkeypatch.setattr(cluster_pool.os, "getpid", lambda: parent + 1)
    assert fresh_pool.take(broker.bootstrap, 5.0, None) is not cluster


def test_a_pooled_cluster_remembers_coordinators_until_told_they_moved(
    broker: BrokerProcess, fresh_pool: ClusterPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from onceflow.client.cluster import KEY_TYPE_GROUP, Cluster

    asked: list[str] = []
    find = Cluster.coordinator

    def counting(self: Cluster, key: str, key_type: int, what: str) -> object:
        asked.append(key)
        return find(self, key, key_type, what)

    monkeypatch.setattr(Cluster, "coordinator", counting)
    cluster = fresh_pool.take(broker.bootstrap, 5.0, None)
    first = cluster.known_coordinator("g", KEY_TYPE_GROUP, "group g")
    assert cluster.known_coordinator("g", KEY_TYPE_GROUP, "group g") is first
    assert asked == ["g"]
    cluster.forget_coordinator("g", KEY_TYPE_GROUP)
    cluster.known_coordinator("g", KEY_TYPE_GROUP, "group g")
    assert asked == ["g", "g"]
