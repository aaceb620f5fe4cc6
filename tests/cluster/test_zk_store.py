"""The cluster's metadata store against real ZooKeeper servers (Debian's package): broker
registration, controller election and fencing by epoch, topic assignments and partition
state by compare-and-set, producer-id blocks unique under contention, and an ensemble that
loses a server."""

from __future__ import annotations

import dataclasses
import itertools
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.exceptions import ConnectionLoss

from onceflow.cluster.zk_store import (
    ControllerFenced,
    DuplicateBroker,
    Election,
    StaleVersion,
    TopicExists,
    ZkMetadataStore,
    ZooKeeperUnavailable,
)
from onceflow.cluster.znodes import BrokerRegistration, PartitionState
from tests.helpers.broker import free_port
from tests.helpers.zookeeper import ZooKeeperEnsemble

SESSION_MS = 4000


@pytest.fixture(scope="module")
def zk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperEnsemble]:
    ensemble = ZooKeeperEnsemble(tmp_path_factory.mktemp("zk"), 1).start()
    try:
        yield ensemble
    finally:
        ensemble.stop()


def store(connect: str) -> ZkMetadataStore:
    s = ZkMetadataStore(connect, SESSION_MS)
    s.start()
    return s


def chroot(zk: ZooKeeperEnsemble) -> str:
    """A fresh namespace per test, as `zookeeper.connect=host:port/path` gives Kafka."""
    root = f"/t{time.monotonic_ns()}"
    setup = store(zk.connect)
    setup._zk.ensure_path(root)
    setup.close()
    return zk.connect + root


def create_topic(
    s: ZkMetadataStore,
    topic: str,
    topic_id: str,
    assignment: dict[int, list[int]],
    states: dict[int, PartitionState],
    election: Election,
) -> None:
    """As the product creates a topic: any broker writes the assignment, the controller
    the first states."""
    s.create_topic_assignment(topic, topic_id, assignment, {})
    s.create_partition_states(topic, states, election)


def registration(broker_id: int) -> BrokerRegistration:
    port = 9090 + broker_id
    endpoints = (("PLAINTEXT", "PLAINTEXT", "127.0.0.1", port),)
    return BrokerRegistration(broker_id, "127.0.0.1", port, 1_700_000_000_000, endpoints)


def test_a_broker_is_registered_while_its_session_lives(zk: ZooKeeperEnsemble) -> None:
    connect = chroot(zk)
    a, b, watcher = store(connect), store(connect), store(connect)
    a.register_broker(registration(1))
    b.register_broker(registration(2))
    assert sorted(watcher.live_brokers()) == [1, 2]
    assert watcher.live_brokers()[2] == registration(2)
    duplicate = store(connect)
    # Another address: with broker 1's own, it would wait (bounded) for an earlier run's
    # session to expire first (test_registration_wait.py).
    with pytest.raises(DuplicateBroker, match=r"broker\.id 1 is already registered"):
        duplicate.register_broker(dataclasses.replace(registration(1), port=9190))
    duplicate.close()  # else its client reconnects for ever once ZooKeeper stops
    a.close()
    assert sorted(watcher.live_brokers()) == [2]
    b.close()
    watcher.close()


def test_one_controller_at_a_time_and_an_old_one_is_fenced(zk: ZooKeeperEnsemble) -> None:
    connect = chroot(zk)
    stores = [store(connect) for _ in range(3)]
    try:
        _one_controller_at_a_time(stores)
    finally:
        for s in stores:  # a live client would reconnect for ever once ZooKeeper stops
            s.close()


def _one_controller_at_a_time(stores: list[ZkMetadataStore]) -> None:
    wins: dict[int, object] = {}
    barrier = threading.Barrier(3)

    def elect(i: int) -> None:
        barrier.wait()
        wins[i] = stores[i].try_elect(i, 0)

    threads = [threading.Thread(target=elect, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [i for i, won in wins.items() if won is not None]
    assert len(winners) == 1
    first = winners[0]
    old = wins[first]
    assert old is not None and old.epoch == 1  # type: ignore[attr-defined]
    assert stores[(first + 1) % 3].controller() == first

    survivor = stores[(first + 1) % 3]
    create_topic(
        survivor,
        "orders",
        "id-1",
        {0: [1]},
        {0: PartitionState(1, 0, (1,), 1)},
        old,  # type: ignore[arg-type]
    )
    stores[first].close()  # the controller's session ends: its ephemeral znode goes
    new = survivor.try_elect((first + 1) % 3, 0)
    assert new is not None and new.epoch == 2
    state, version = survivor.partition_state("orders", 0) or (None, -1)
    assert state is not None
    # The deposed controller's election no longer lets anything be written.
    with pytest.raises(ControllerFenced):
        survivor.update_partition_state("orders", 0, state, version, old)  # type: ignore[arg-type]
    survivor.update_partition_state("orders", 0, state, version, new)


def test_topics_and_partition_state_change_by_compare_and_set(zk: ZooKeeperEnsemble) -> None:
    connect = chroot(zk)
    controller = store(connect)
    election = controller.try_elect(1, 0)
    assert election is not None
    states = {p: PartitionState(p % 3 + 1, 0, (1, 2, 3), election.epoch) for p in range(3)}
    assignment = {p: [p % 3 + 1, (p + 1) % 3 + 1, (p + 2) % 3 + 1] for p in range(3)}
    create_topic(controller, "payments", "id-9", assignment, states, election)
    with pytest.raises(TopicExists):
        create_topic(controller, "payments", "id-9", assignment, states, election)
    reader = store(connect)
    assert reader.topics() == ["payments"]
    assert reader.topic_assignment("payments") == ("id-9", assignment)
    found = reader.partition_state("payments", 1)
    assert found is not None
    state, version = found
    assert state == states[1]
    shrunk = PartitionState(state.leader, state.leader_epoch, (2,), election.epoch)
    new_version = controller.update_partition_state("payments", 1, shrunk, version, election)
    assert reader.partition_state("payments", 1) == (shrunk, new_version)
    with pytest.raises(StaleVersion):  # written since it was read
        controller.update_partition_state("payments", 1, state, version, election)
    assert reader.partition_state("payments", 7) is None
    controller.close()
    reader.close()


def test_producer_id_blocks_never_overlap_under_contention(zk: ZooKeeperEnsemble) -> None:
    connect = chroot(zk)
    stores = [store(connect) for _ in range(4)]
    blocks = []
    lock = threading.Lock()

    def allocate(i: int) -> None:
        for _ in range(25):
            block = stores[i].allocate_producer_ids(i, 1000)
            with lock:
                blocks.append(block)

    threads = [threading.Thread(target=allocate, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ranges = sorted((b.start, b.end) for b in blocks)
    assert len(ranges) == 100
    assert ranges[0] == (0, 999)
    for (_, end), (start, _) in itertools.pairwise(ranges):
        assert start == end + 1  # contiguous, never shared
    for s in stores:
        s.close()


def test_an_unreachable_zookeeper_is_a_clear_error() -> None:
    dead = f"127.0.0.1:{free_port()}"
    with pytest.raises(
        ZooKeeperUnavailable, match=f"cannot connect to ZooKeeper at {re.escape(dead)}"
    ):
        ZkMetadataStore(dead, 2000).start(timeout_s=1.0)


def test_a_three_node_ensemble_keeps_serving_when_one_node_dies(tmp_path: Path) -> None:
    ensemble = ZooKeeperEnsemble(tmp_path, 3).start()
    try:
        controller = store(ensemble.connect)
        controller.register_broker(registration(1))
        election = controller.try_elect(1, 0)
        assert election is not None
        create_topic(
            controller,
            "t",
            "id",
            {0: [1]},
            {0: PartitionState(1, 0, (1,), election.epoch)},
            election,
        )
        ensemble.servers[0].kill()
        # Two of three still form a quorum: reads and compare-and-sets go on (once the
        # client has moved to another server, if it was on the dead one).
        deadline = time.monotonic() + 20
        while True:
            try:
                found = controller.partition_state("t", 0)
                break
            except ConnectionLoss:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        assert found is not None
        state, version = found
        bumped = PartitionState(1, state.leader_epoch + 1, (1,), election.epoch)
        controller.update_partition_state("t", 0, bumped, version, election)
        assert sorted(controller.live_brokers()) == [1]
        assert controller.allocate_producer_ids(1, 10).start == 0
        controller.close()
    finally:
        ensemble.stop()


def test_concurrent_updates_from_two_brokers_all_land(zk: ZooKeeperEnsemble) -> None:
    """The ACL and credential znodes change by compare-and-set: two brokers adding entries
    at once (each read-modify-write racing the other's) lose none of them."""
    connect = chroot(zk)
    stores = [store(connect), store(connect)]
    path = "/onceflow/security/acls"

    def add(s: ZkMetadataStore, prefix: str) -> None:
        for i in range(25):
            s.update(path, lambda raw, e=f"{prefix}{i}": (raw or b"") + e.encode() + b"\n")

    try:
        workers = [
            threading.Thread(target=add, args=(s, name))
            for s, name in zip(stores, "ab", strict=True)
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join(60)
        current = stores[0].read(path)
        assert current is not None
        entries = current[0].decode().split()
        assert sorted(entries) == sorted(f"{p}{i}" for p in "ab" for i in range(25))
        assert current[1] == 49  # 50 writes: created at version 0, set 49 times
    finally:
        for s in stores:
            s.close()
