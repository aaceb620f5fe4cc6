"""A real multi-broker cluster for integration tests: a ZooKeeper ensemble of its own (one
server, or three) and N broker subprocesses, each on a free loopback port with its own data
dir and log. Never a mock.

Each broker is a `tests.helpers.broker.BrokerProcess` (same command, test defaults, log file
and start/kill/stop/pause logic) with `node.id` 1..N and `zookeeper.connect` set, so
`cluster.broker(2).kill()` is a `kill -9` and `.start()` brings it back on the same port
and data dir. The internal topics' replication factors are capped to N as
`onceflow cluster` does, and sessions are short (`zookeeper.session.timeout.ms=4000`; the
test ZooKeeper servers tick every 200 ms, which allows it) so failover tests are quick.

In a test module or a conftest:

    cluster = cluster_fixture(brokers=3, overrides={"min.insync.replicas": "2"})

    def test_failover(cluster: Cluster) -> None:
        cluster.leader_of("t", 0).kill()
        ...

or `cluster_factory` (import it into a conftest) to make clusters inside a test.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from onceflow.cli.cluster import replication_overrides
from onceflow.client.cluster import Cluster as WireCluster
from onceflow.client.errors import ClientError
from onceflow.cluster.znodes import broker_path
from tests.helpers.broker import BrokerProcess, free_port
from tests.helpers.zookeeper import ZooKeeperEnsemble

__all__ = [
    "CLUSTER_TEST_OVERRIDES",
    "Cluster",
    "ClusterBroker",
    "cluster_factory",
    "cluster_fixture",
]

# On top of tests.helpers.broker.TEST_DEFAULT_OVERRIDES; a cluster's own overrides win.
CLUSTER_TEST_OVERRIDES: dict[str, str] = {"zookeeper.session.timeout.ms": "4000"}
FORM_TIMEOUT_S = 30.0


class ClusterBroker(BrokerProcess):
    """One broker of a Cluster: a BrokerProcess that knows its id. `start()` restarts it
    with the same command, data dir and port; `kill()` is SIGKILL, `stop()` SIGTERM and
    wait, `pause()`/`resume()` SIGSTOP/SIGCONT, `log_tail()` the end of its log.

    After a kill, the broker's registration in ZooKeeper lives until its session expires; a
    broker started again with the same id and address waits for that itself (one log line),
    but `start()` waits for it first, so that a test's timings start from a registered
    broker."""

    def __init__(self, cluster: Cluster, broker_id: int, port: int) -> None:
        data_dir = cluster.root / f"broker-{broker_id}"
        own = cluster.broker_overrides.get(broker_id, {})
        super().__init__(data_dir, {**cluster.overrides, **own, "node.id": str(broker_id)}, port)
        self.cluster = cluster
        self.broker_id = broker_id

    def start(self) -> ClusterBroker:
        if self.starts > 0:
            self.cluster.wait_unregistered([self.broker_id])
        super().start()
        return self

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"ClusterBroker({self.broker_id}, {self.bootstrap}, {state})"


class Cluster:
    """ZooKeeper (`zookeepers` servers) and brokers 1..`brokers`, all in `root`;
    `broker_overrides` adds keys of one broker's own (its `broker.rack`, say) by id."""

    def __init__(
        self,
        root: Path,
        brokers: int = 3,
        *,
        zookeepers: int = 1,
        overrides: Mapping[str, str] | None = None,
        broker_overrides: Mapping[int, Mapping[str, str]] | None = None,
    ) -> None:
        if brokers < 1:
            raise ValueError(f"a cluster has at least one broker, not {brokers}")
        self.root = Path(root)
        self.broker_overrides = dict(broker_overrides or {})
        self.zookeeper = ZooKeeperEnsemble(self.root / "zookeeper", zookeepers)
        self.overrides: dict[str, str] = {
            **replication_overrides(brokers),
            **CLUSTER_TEST_OVERRIDES,
            "zookeeper.connect": self.zookeeper.connect,
            **(overrides or {}),
        }
        taken = {s.client_port for s in self.zookeeper.servers}
        taken |= {
            p for peer in self.zookeeper.peers for p in (peer.quorum_port, peer.election_port)
        }
        self._brokers: dict[int, ClusterBroker] = {}
        for broker_id in range(1, brokers + 1):
            port = free_port()
            while port in taken:
                port = free_port()
            taken.add(port)
            self._brokers[broker_id] = ClusterBroker(self, broker_id, port)

    # ---- who is where ---------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """Every broker's address, dead or alive: clients find the live ones."""
        return ",".join(b.bootstrap for b in self.brokers)

    @property
    def brokers(self) -> list[ClusterBroker]:
        return [self._brokers[i] for i in sorted(self._brokers)]

    @property
    def ids(self) -> list[int]:
        return sorted(self._brokers)

    def broker(self, broker_id: int) -> ClusterBroker:
        try:
            return self._brokers[broker_id]
        except KeyError:
            raise KeyError(f"no broker {broker_id} in this cluster ({self.ids})") from None

    def running(self) -> list[ClusterBroker]:
        return [b for b in self.brokers if b.running]

    def metadata_brokers(self, via: ClusterBroker | None = None) -> set[int]:
        """The broker ids a Metadata request answers with (asked of `via`, or of any
        running broker)."""
        bootstrap = via.bootstrap if via is not None else self._running_bootstrap()
        with WireCluster(bootstrap, timeout_s=5.0) as wire:
            return set(wire.metadata().brokers)

    def leader_of(
        self, topic: str, partition: int, timeout: float = FORM_TIMEOUT_S
    ) -> ClusterBroker:
        """The broker leading a partition, once it has one (waits up to `timeout`)."""
        deadline = time.monotonic() + timeout
        last = "no answer"
        while True:
            try:
                with WireCluster(self._running_bootstrap(), timeout_s=5.0) as wire:
                    metadata = wire.metadata([topic])
                leader = metadata.leaders.get(topic, {}).get(partition, -1)
                if leader in self._brokers and self._brokers[leader].running:
                    return self._brokers[leader]
                last = f"leader {leader}"
            except ClientError as exc:
                last = str(exc)
            if time.monotonic() > deadline:
                raise AssertionError(f"{topic}-{partition} has no live leader: {last}")
            time.sleep(0.1)

    def _running_bootstrap(self) -> str:
        running = self.running()
        if not running:
            raise AssertionError("no broker of the cluster is running")
        return ",".join(b.bootstrap for b in running)

    # ---- lifecycle ------------------------------------------------------------------------

    def start(self, *, wait_formed: bool = True) -> Cluster:
        """ZooKeeper, then every broker; then (unless told not to) wait until each running
        broker's metadata lists all of them."""
        try:
            self.zookeeper.start()
            for b in self.brokers:
                b.start()
            if wait_formed:
                self.wait_formed()
        except BaseException:
            self.close()
            raise
        return self

    def wait_formed(self, timeout: float = FORM_TIMEOUT_S) -> None:
        """Until the metadata of every running broker lists exactly the running brokers."""
        deadline = time.monotonic() + timeout
        while True:
            wanted = {b.broker_id for b in self.running()}
            seen: dict[int, Any] = {}
            for b in self.running():
                try:
                    seen[b.broker_id] = self.metadata_brokers(via=b)
                except ClientError as exc:
                    seen[b.broker_id] = str(exc)
            if all(ids == wanted for ids in seen.values()):
                return
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"the cluster did not form in {timeout:.0f} s: running {sorted(wanted)}, "
                    f"each broker's metadata lists {seen}"
                )
            time.sleep(0.2)

    def add_broker(self, overrides: Mapping[str, str] | None = None) -> ClusterBroker:
        """Start one more broker (the next id) on the same ZooKeeper: growing the cluster.
        The internal topics' factors stay those the cluster was made with."""
        broker_id = max(self._brokers) + 1
        if overrides:
            self.broker_overrides[broker_id] = dict(overrides)
        taken = {b.port for b in self.brokers} | {s.client_port for s in self.zookeeper.servers}
        port = free_port()
        while port in taken:
            port = free_port()
        broker = ClusterBroker(self, broker_id, port)
        self._brokers[broker_id] = broker
        broker.start()
        return broker

    def start_all(self) -> None:
        """Start every broker that is not running (after kill_all, say)."""
        stopped = [b for b in self.brokers if not b.running]
        self.wait_unregistered([b.broker_id for b in stopped])
        for b in stopped:
            b.start()

    def wait_unregistered(self, broker_ids: list[int]) -> None:
        """Until no broker of these ids is registered in ZooKeeper: the session of a killed
        broker expires after zookeeper.session.timeout.ms. Returns at once if ZooKeeper
        cannot be reached (a test that stopped it knows what it does)."""
        session_s = int(self.overrides.get("zookeeper.session.timeout.ms", "18000")) / 1000
        zk = KazooClient(hosts=self.zookeeper.connect, timeout=5.0)
        try:
            zk.start(timeout=5.0)
        except Exception:
            zk.close()
            return
        try:
            deadline = time.monotonic() + session_s + 10.0
            while left := [i for i in broker_ids if zk.exists(broker_path(i))]:
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"brokers {left} are still registered {session_s + 10:.0f} s later"
                    )
                time.sleep(0.1)
        finally:
            zk.stop()
            zk.close()

    def kill_all(self) -> None:
        """SIGKILL every running broker at once (a power cut of the whole cluster);
        ZooKeeper keeps running."""
        running = self.running()
        for b in running:
            assert b.proc is not None
            b.proc.kill()
        for b in running:
            b.kill()  # reaps it

    def stop(self) -> dict[int, int | None]:
        """SIGTERM each running broker and wait (highest id first), then ZooKeeper.
        Returns each broker's exit code (None: it was not running)."""
        self._resume_all()  # a broker a test left paused could not exit
        codes: dict[int, int | None] = {}
        for b in reversed(self.brokers):
            codes[b.broker_id] = b.stop() if b.running else None
        self.zookeeper.stop()
        return codes

    def close(self) -> None:
        """Stop what runs, as best it can, and kill the rest: for teardown."""
        self._resume_all()
        for b in self.brokers:
            with contextlib.suppress(Exception):
                b.stop()
            b.kill()
        self.zookeeper.kill()

    def _resume_all(self) -> None:
        for b in self.running():
            b.resume()

    def internal_errors(self) -> dict[int, list[str]]:
        """ERROR lines and tracebacks each broker logged (see BrokerProcess.internal_errors)."""
        return {b.broker_id: errors for b in self.brokers if (errors := b.internal_errors())}

    def finish(self, *, check_errors: bool = True) -> None:
        """Teardown: every running broker must exit cleanly (code 0) on SIGTERM, and, with
        check_errors, none may have logged an internal error."""
        try:
            codes = self.stop()
        finally:
            self.close()
        bad = {i: code for i, code in codes.items() if code not in (0, None)}
        assert not bad, "brokers exited with errors on SIGTERM: " + "; ".join(
            f"broker {i}: code {code}, log:\n{self.broker(i).log_tail()}" for i, code in bad.items()
        )
        if check_errors:
            errors = self.internal_errors()
            assert not errors, "brokers logged internal errors:\n" + "\n---\n".join(
                f"broker {i}: {lines[0]}" for i, lines in errors.items()
            )

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Cluster({self.brokers}, zookeeper {self.zookeeper.connect})"


def cluster_fixture(
    brokers: int = 3,
    *,
    zookeepers: int = 1,
    overrides: Mapping[str, str] | None = None,
    broker_overrides: Mapping[int, Mapping[str, str]] | None = None,
    scope: str = "function",
    check_errors: bool = True,
) -> Any:
    """A pytest fixture giving a started Cluster, finished (clean exits, no internal
    errors) at teardown. Assign it to a name in a test module or conftest:

        three_brokers = cluster_fixture(3, overrides={"min.insync.replicas": "2"})
    """

    @pytest.fixture(scope=scope)
    def fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
        cluster = Cluster(
            tmp_path_factory.mktemp("cluster"),
            brokers,
            zookeepers=zookeepers,
            overrides=overrides,
            broker_overrides=broker_overrides,
        )
        cluster.start()
        try:
            yield cluster
        finally:
            cluster.finish(check_errors=check_errors)

    return fixture


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    """Make and start clusters inside a test: `cluster_factory(3, overrides={...})`
    (the arguments of Cluster, plus `start=False` to start it yourself); all are finished
    at teardown."""
    made: list[tuple[Cluster, bool]] = []

    def make(
        brokers: int = 3,
        *,
        zookeepers: int = 1,
        overrides: Mapping[str, str] | None = None,
        broker_overrides: Mapping[int, Mapping[str, str]] | None = None,
        start: bool = True,
        check_errors: bool = True,
    ) -> Cluster:
        cluster = Cluster(
            tmp_path / f"cluster-{len(made)}",
            brokers,
            zookeepers=zookeepers,
            overrides=overrides,
            broker_overrides=broker_overrides,
        )
        made.append((cluster, check_errors))
        return cluster.start() if start else cluster

    yield make
    failures = []
    for cluster, check_errors in made:
        try:
            cluster.finish(check_errors=check_errors)
        except AssertionError as exc:
            failures.append(str(exc))
    assert not failures, "\n".join(failures)
