"""CompleteTransactions on a 3-broker cluster: three prepared two-phase transactions, each
writing to partitions led by all three brokers, completed as one decision, with the
coordinator's broker killed -9 at each step of it (after the decision is logged, between
its own markers and the other leaders', before the Complete records). The broker that loads
the coordinator's partition finishes the whole decision: every record once. A reader that
asks a leader for its stable offsets never sees part of the decision on that leader's
partitions while leadership stays put: each leader writes all of the decision's markers in
one step."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

import pytest

from onceflow.client.participant import PreparedTransaction, TwoPhaseProducer
from onceflow.client.participant_group import (
    colocated_ids,
    complete_together,
    transaction_log_partition_count,
)
from onceflow.errors import ErrorCode
from onceflow.failpoints import FAILPOINTS_ENV
from tests.cluster.test_coordinator_failover import (
    ARMED,
    PARTITIONS,
    T,
    check_exactly,
    committed_values,
    live,
    txn_id_coordinated_by,
    txn_topic,
    wait_coordinator_moved,
)
from tests.cluster.test_coordinator_failover_2pc import TWO_PC
from tests.helpers.cluster import Cluster, cluster_factory
from tests.helpers.txn import wait_stable
from tests.helpers.wire import RawConnection, fetch_request

__all__ = ["cluster_factory"]

WRITERS = 3
PER_WRITER = 60  # 20 per partition


def prepare(
    cluster: Cluster, topic: str, anchor: str
) -> tuple[list[PreparedTransaction], set[bytes]]:
    bootstrap = live(cluster)
    ids = colocated_ids(
        [f"{anchor}-w{i}" for i in range(WRITERS)],
        transaction_log_partition_count(bootstrap),
        anchor=anchor,
    )
    prepared, written = [], set()
    for writer, txn_id in enumerate(ids):
        with TwoPhaseProducer(bootstrap, txn_id) as producer:
            producer.init()
            producer.begin()
            for i in range(PER_WRITER):
                value = b"w%d-%03d" % (writer, i)
                producer.produce(topic, value, partition=i % PARTITIONS)
                written.add(value)
            prepared.append(producer.prepare())
    return prepared, written


class LeaderWatch(threading.Thread):
    """Asks each partition's leader, in turn, for the stable offsets of the partitions it
    leads (one read_committed Fetch: one moment of that broker); keeps what it saw."""

    def __init__(self, cluster: Cluster, topic: str) -> None:
        super().__init__(daemon=True)
        self.cluster, self.topic = cluster, topic
        self.looks: list[dict[int, int]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for broker in list(self.cluster.running()):
                with contextlib.suppress(Exception):
                    self.looks.append(self._look(broker.bootstrap) | {-1: broker.broker_id})
            self.stop.wait(0.005)

    def _look(self, bootstrap: str) -> dict[int, int]:
        request = fetch_request(
            self.topic, {p: (0, -1) for p in range(PARTITIONS)}, isolation_level=1, max_bytes=1
        )
        with RawConnection(bootstrap) as conn:
            parts = conn.call(request).responses[0].partitions
        return {
            int(p.partition_index): int(p.last_stable_offset)
            for p in parts
            if p.error_code == ErrorCode.none
        }


@contextlib.contextmanager
def watching(cluster: Cluster, topic: str) -> Iterator[LeaderWatch]:
    watch = LeaderWatch(cluster, topic)
    watch.start()
    try:
        yield watch
    finally:
        watch.stop.set()
        watch.join(30)


def none_or_all(looks: list[dict[int, int]], *, per_leader: bool) -> None:
    """Rows sit at offsets 0..ROWS-1 of each partition, markers after them: within a look,
    each partition shows no row or every row (one by one, it would show one writer's rows
    before another's); `per_leader`: all of a leader's partitions show the same."""
    rows = WRITERS * PER_WRITER // PARTITIONS
    for i, look in enumerate(looks):
        shown = {p: min(lso, rows) for p, lso in look.items() if p >= 0}
        whole = set(shown.values()) <= {0, rows}
        assert whole and (len(set(shown.values())) <= 1 or not per_leader), (
            f"broker {look[-1]} showed part of the decision: {shown}; looks around it: "
            f"{looks[max(0, i - 6) : i + 6]}"
        )


def test_each_leader_shows_a_decision_at_once(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(3, overrides=TWO_PC)
    topic = txn_topic(cluster)
    prepared, written = prepare(cluster, topic, txn_id_coordinated_by(cluster, ARMED))
    with watching(cluster, topic) as watch:
        assert complete_together(prepared, True, cluster.bootstrap) == []
        wait_stable(cluster.bootstrap, topic, range(PARTITIONS), timeout=T)
    check_exactly(committed_values(cluster.bootstrap, topic, len(written)), written)
    none_or_all(watch.looks, per_leader=True)


@pytest.mark.parametrize(
    "point", ["txn.after_prepare", "txn.between_markers", "txn.before_complete"]
)
def test_the_coordinators_death_mid_decision_finishes_it_whole(
    cluster_factory: Callable[..., Cluster], point: str
) -> None:
    """The dead broker led a partition: its new leader shows that partition's part when
    the new coordinator writes its markers again, so across leaders the decision may show
    in steps during the failover (as a Kafka transaction's partitions do); each partition
    shows none of its rows or all."""
    cluster = cluster_factory(3, overrides=TWO_PC, start=False)
    cluster.broker(ARMED).env[FAILPOINTS_ENV] = f"{point}=kill"
    cluster.start()
    topic = txn_topic(cluster)
    anchor = txn_id_coordinated_by(cluster, ARMED)
    prepared, written = prepare(cluster, topic, anchor)
    with watching(cluster, topic) as watch:
        with contextlib.suppress(Exception):  # the coordinator dies answering, or before
            complete_together(prepared, True, live(cluster), delivery_timeout_ms=5000)
        victim = cluster.broker(ARMED)
        assert victim.proc is not None and victim.proc.wait(30) is not None
        survivors = live(cluster)
        wait_coordinator_moved(survivors, anchor)
        assert complete_together(prepared, True, survivors) == []  # done, or now
        wait_stable(survivors, topic, range(PARTITIONS), timeout=T)
    check_exactly(committed_values(survivors, topic, len(written)), written)
    none_or_all(watch.looks, per_leader=False)
