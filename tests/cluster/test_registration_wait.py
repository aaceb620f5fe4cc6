"""A broker restarted before ZooKeeper has expired its earlier run's session: which
registration of its id it waits for (its own address) and which it refuses at once (anyone
else's), decided without ZooKeeper; then the store's wait against a real ZooKeeper server,
where an earlier run is a second client holding the registration until the test ends its
session (a kill -9 leaves it so, until the session expires).

The broker processes' side (kill -9 and restart at once) is in test_restart_same_id.py.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from onceflow.cluster.zk_store import DuplicateBroker, MetadataStoreError, ZkMetadataStore
from onceflow.cluster.znodes import BrokerRegistration, broker_path, left_by_earlier_run
from tests.cluster.test_zk_store import SESSION_MS, chroot, registration
from tests.helpers.zookeeper import ZooKeeperEnsemble

WAITING = "waiting up to"
JOIN_S = 60.0  # a bound on a hung test, never a measured time


def moved(
    r: BrokerRegistration, host: str | None = None, port: int | None = None
) -> BrokerRegistration:
    return BrokerRegistration(
        r.broker_id, host or r.host, port or r.port, r.timestamp_ms + 1, r.endpoints
    )


# ---- the decision, without ZooKeeper --------------------------------------------------


def test_a_registration_with_this_broker_s_address_is_its_earlier_run_s() -> None:
    mine = registration(1)
    assert left_by_earlier_run(mine.encode(), mine)
    # A later start writes another timestamp and may advertise other listeners: still its own.
    other_endpoints = BrokerRegistration(1, mine.host, mine.port, 5, ())
    assert left_by_earlier_run(other_endpoints.encode(), mine)


@pytest.mark.parametrize(
    "held",
    [
        moved(registration(1), port=registration(1).port + 1).encode(),
        moved(registration(1), host="10.0.0.7").encode(),
        b"not json",
        b'{"version":5}',
    ],
    ids=["another port", "another host", "not JSON", "no address"],
)
def test_any_other_registration_may_be_a_live_broker(held: bytes) -> None:
    assert not left_by_earlier_run(held, registration(1))


# ---- the store's wait, against ZooKeeper ----------------------------------------------


@pytest.fixture(scope="module")
def zk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperEnsemble]:
    ensemble = ZooKeeperEnsemble(tmp_path_factory.mktemp("zk"), 1).start()
    try:
        yield ensemble
    finally:
        ensemble.stop()


def earlier_run(connect: str, held: BrokerRegistration) -> KazooClient:
    """A session holding `held` as the broker's ephemeral registration: a broker's earlier
    run (or another broker), alive until the test stops it."""
    client = KazooClient(hosts=connect, timeout=SESSION_MS / 1000)
    client.start(timeout=10.0)
    client.create(broker_path(held.broker_id), held.encode(), ephemeral=True, makepath=True)
    return client


def end(client: KazooClient) -> None:
    client.stop()
    client.close()


def started(connect: str) -> ZkMetadataStore:
    store = ZkMetadataStore(connect, SESSION_MS)
    store.start()
    return store


class Registering(threading.Thread):
    """`store.register_broker(mine, wait_s=...)` on a thread of its own, as the broker's
    startup runs it, keeping what it raised."""

    def __init__(self, store: ZkMetadataStore, mine: BrokerRegistration, wait_s: float) -> None:
        super().__init__(daemon=True)
        self.store, self.mine, self.wait_s = store, mine, wait_s
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.store.register_broker(self.mine, wait_s=self.wait_s)
        except BaseException as exc:
            self.error = exc


def wait_logged(caplog: pytest.LogCaptureFixture, thread: Registering) -> None:
    """Until the store says it waits (or the thread ends, which the test then catches)."""
    deadline = time.monotonic() + JOIN_S
    while thread.is_alive() and not any(WAITING in r.getMessage() for r in caplog.records):
        assert time.monotonic() < deadline, "neither waited nor registered"
        time.sleep(0.05)


def test_the_store_waits_for_its_earlier_run_s_session_then_registers(
    zk: ZooKeeperEnsemble, caplog: pytest.LogCaptureFixture
) -> None:
    connect = chroot(zk)
    mine = registration(1)
    old = earlier_run(connect, moved(mine))  # same address, an older timestamp
    store = started(connect)
    caplog.set_level(logging.WARNING, logger="onceflow.cluster.zk_store")
    thread = Registering(store, mine, wait_s=JOIN_S)
    thread.start()
    wait_logged(caplog, thread)
    assert thread.is_alive(), f"it did not wait: {thread.error!r}"
    end(old)  # the session ends (expires, after a kill -9): the znode goes
    thread.join(JOIN_S)
    assert not thread.is_alive() and thread.error is None, thread.error
    waiting = [r.getMessage() for r in caplog.records if WAITING in r.getMessage()]
    assert len(waiting) == 1, waiting
    assert "broker.id 1 is still registered" in waiting[0]
    assert f"{mine.host}:{mine.port}" in waiting[0]
    assert store.live_brokers() == {1: mine}  # this run's registration, this session's
    store.close()
    assert store_sees(connect) == {}


def store_sees(connect: str) -> dict[int, BrokerRegistration]:
    watcher = started(connect)
    try:
        return watcher.live_brokers()
    finally:
        watcher.close()


def test_a_registration_that_outlives_the_wait_is_refused(
    zk: ZooKeeperEnsemble, caplog: pytest.LogCaptureFixture
) -> None:
    """With this broker's address, but its session never ends (a misconfigured twin): the
    wait is bounded and ends in today's refusal."""
    connect = chroot(zk)
    mine = registration(1)
    twin = earlier_run(connect, moved(mine))
    store = started(connect)
    caplog.set_level(logging.WARNING, logger="onceflow.cluster.zk_store")
    with pytest.raises(DuplicateBroker, match="another broker runs with the same id"):
        store.register_broker(mine, wait_s=0.5)
    assert sum(WAITING in r.getMessage() for r in caplog.records) == 1
    assert store_sees(connect) == {1: moved(mine)}
    store.close()
    end(twin)


def test_another_broker_s_registration_is_refused_without_waiting(
    zk: ZooKeeperEnsemble, caplog: pytest.LogCaptureFixture
) -> None:
    connect = chroot(zk)
    mine = registration(1)
    other = earlier_run(connect, moved(mine, port=mine.port + 100))
    store = started(connect)
    caplog.set_level(logging.WARNING, logger="onceflow.cluster.zk_store")
    with pytest.raises(
        DuplicateBroker,
        match=r"^broker\.id 1 is already registered in ZooKeeper at .*: another broker runs "
        r"with the same id$",
    ):
        store.register_broker(mine, wait_s=JOIN_S)
    assert not any(WAITING in r.getMessage() for r in caplog.records)
    store.close()
    end(other)


def test_closing_the_store_ends_the_wait(
    zk: ZooKeeperEnsemble, caplog: pytest.LogCaptureFixture
) -> None:
    """A broker stopped while it waits does not hang for the whole wait."""
    connect = chroot(zk)
    mine = registration(1)
    old = earlier_run(connect, moved(mine))
    store = started(connect)
    caplog.set_level(logging.WARNING, logger="onceflow.cluster.zk_store")
    thread = Registering(store, mine, wait_s=3600.0)
    thread.start()
    wait_logged(caplog, thread)
    assert thread.is_alive(), f"it did not wait: {thread.error!r}"
    store.close()
    thread.join(JOIN_S)
    assert not thread.is_alive()
    assert isinstance(thread.error, MetadataStoreError)
    assert not isinstance(thread.error, DuplicateBroker)
    end(old)


def test_registering_again_in_the_same_session_is_no_duplicate(
    zk: ZooKeeperEnsemble, caplog: pytest.LogCaptureFixture
) -> None:
    """A create whose answer was lost, tried again: the znode is this session's own."""
    connect = chroot(zk)
    mine = registration(1)
    store = started(connect)
    caplog.set_level(logging.WARNING, logger="onceflow.cluster.zk_store")
    store.register_broker(mine)
    store.register_broker(mine, wait_s=JOIN_S)
    assert not any(WAITING in r.getMessage() for r in caplog.records)
    assert store.live_brokers() == {1: mine}
    store.close()
