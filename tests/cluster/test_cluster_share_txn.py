"""Transactional acknowledgements on a 3-broker cluster, the three roles on three brokers:
the share-partition's leader (which holds the records), the share coordinator (the leader
of the key's `__share_group_state` partition, where the acknowledgement is written as the
producer's transactional record) and the transaction's coordinator (which adds that
partition to the transaction and writes the markers there). A copier from a share group
to a topic runs its transactions across the three, with aborts on purpose; the share
coordinator's broker or the transaction coordinator's broker is killed with kill -9 while
a transaction holds acknowledgements, and so is the share-partition's leader (its successor
loads the records held by the open transaction from the share coordinator). The output,
read committed, is exactly the input: nothing acknowledged comes back, nothing aborted is
lost."""

from __future__ import annotations

import itertools
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from onceflow.client.participant import TwoPhaseProducer
from onceflow.coordinator.group.offsets import partition_for
from onceflow.coordinator.transaction.coordinator import txn_partition_for
from tests.chaos.test_share_txn_copier import _read_committed
from tests.cluster.test_cluster_share_groups import _topic_id
from tests.helpers.broker import die_with_parent
from tests.helpers.cluster import Cluster, ClusterBroker, cluster_factory
from tests.helpers.share import REPO_ROOT, SHORT_LOCKS, produce, set_group_configs

PARTITIONS = 3
OVERRIDES = {
    **SHORT_LOCKS,
    "min.insync.replicas": "2",
    "offsets.topic.num.partitions": str(PARTITIONS),
    "transaction.state.log.num.partitions": str(PARTITIONS),
    "share.coordinator.state.topic.num.partitions": str(PARTITIONS),
}
SOURCE, SINK = "jobs", "results"
__all__ = ["cluster_factory"]  # the fixture


class Roles:
    """Where each part of a transactional acknowledgement lives, and the names that put
    them there."""

    def __init__(self, cluster: Cluster) -> None:
        bootstrap = cluster.bootstrap
        # The internal topics exist from their first use.
        set_group_configs(bootstrap, "probe", {"share.auto.offset.reset": "earliest"})
        probe = TwoPhaseProducer(bootstrap, "probe", two_phase=False)
        probe.init()
        probe.close()
        state = {
            p: cluster.leader_of("__share_group_state", p).broker_id for p in range(PARTITIONS)
        }
        txn = {p: cluster.leader_of("__transaction_state", p).broker_id for p in range(PARTITIONS)}
        self.state, self.txn = next(
            (s, t) for s in sorted(set(state.values())) for t in sorted(set(txn.values())) if s != t
        )
        (self.share,) = set(cluster.ids) - {self.state, self.txn}
        admin = AdminClient({"bootstrap.servers": bootstrap})
        others = [self.state, self.txn]
        admin.create_topics(
            [NewTopic(SOURCE, num_partitions=1, replica_assignment=[[self.share, *others]])]
        )[SOURCE].result(30)
        admin.create_topics([NewTopic(SINK, 1, 3)])[SINK].result(30)
        assert cluster.leader_of(SOURCE, 0).broker_id == self.share
        topic_id = _topic_id(bootstrap, SOURCE)
        self.group = _first(
            "workers",
            lambda g: state[partition_for(f"{g}:{topic_id}:0", PARTITIONS)] == self.state,
        )
        self.transactional_id = _first(
            "copier",
            lambda t: txn[txn_partition_for(t, PARTITIONS)] == self.txn,
        )


def _first(prefix: str, fits: Callable[[str], bool]) -> str:
    """The first of prefix-0, prefix-1, ... that fits (each fits one in PARTITIONS)."""
    return next(name for i in itertools.count() if fits(name := f"{prefix}-{i}"))


class Copier:
    """tests.helpers.share_copier in a child process, its output lines collected."""

    def __init__(self, cluster: Cluster, roles: Roles, kill_at: str, kill_txn: int) -> None:
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.helpers.share_copier",
                cluster.bootstrap,
                roles.group,
                SOURCE,
                SINK,
                kill_at,
                str(kill_txn),
                roles.transactional_id,
            ],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            preexec_fn=die_with_parent,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    def wait_for(self, line: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while line not in self.lines:
            assert self.proc.poll() is None, f"the copier exited before {line}: {self.lines}"
            assert time.monotonic() < deadline, f"no {line} from the copier: {self.lines}"
            time.sleep(0.05)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


VICTIMS = ["none", "share coordinator", "transaction coordinator", "share-partition leader"]


@pytest.mark.parametrize("victim", VICTIMS)
def test_transactional_acknowledgements_across_three_brokers(
    cluster_factory: Callable[..., Cluster], victim: str
) -> None:
    cluster = cluster_factory(3, overrides=OVERRIDES)
    roles = Roles(cluster)
    assert len({roles.share, roles.state, roles.txn}) == 3
    n = 60
    expected = sorted(f"job-{i}".encode() for i in range(n))
    produce(cluster.bootstrap, SOURCE, expected)
    set_group_configs(
        cluster.bootstrap,
        roles.group,
        {"share.auto.offset.reset": "earliest", "share.delivery.count.limit": "10"},
    )
    result: list[bytes] = []
    reader = threading.Thread(
        target=lambda: result.extend(_read_committed(cluster.bootstrap, SINK, n, timeout=150))
    )
    reader.start()
    copier = Copier(cluster, roles, "pause" if victim != "none" else "none", 2)
    killed: ClusterBroker | None = None
    if victim != "none":
        copier.wait_for("PAUSED")  # transaction 2 holds acknowledgements, not yet committed
        broker_id = {
            "share coordinator": roles.state,
            "transaction coordinator": roles.txn,
            "share-partition leader": roles.share,  # its successor loads what is held
        }[victim]
        killed = cluster.broker(broker_id)
        killed.kill()
    killed_at = time.monotonic()
    copiers = 1
    while reader.is_alive():
        if copier.proc.poll() is not None:  # it failed on the dead broker: a successor
            copier = Copier(cluster, roles, "none", 0)  # fences it and aborts what it left
            copiers += 1
        if killed is not None and not killed.running and time.monotonic() > killed_at + 10:
            killed.start()
        time.sleep(0.2)
    copier.stop()
    if killed is not None and not killed.running:
        killed.start()
    assert sorted(result) == expected, (
        f"{len(result)} records, {len(set(result))} distinct, {copiers} copiers; "
        f"missing {sorted(set(expected) - set(result))[:10]}, "
        f"twice {sorted(r for r in set(result) if result.count(r) > 1)[:10]}"
    )
