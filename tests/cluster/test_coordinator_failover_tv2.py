"""Transaction version 2 across a coordinator's death (KIP-890 part 2).

A producer speaking version 2 (raw requests: no installed client does) writes to partitions
led by three brokers with Produce v12, whose leaders add them to the transaction with
AddPartitionsToTxn v5, and ends with EndTxn v5. Broker 1, its coordinator, kills itself at a
step of ending it (fail points); the coordinator that loads its `__transaction_state`
partition finishes the end from the log alone, with the markers at the bumped epoch, and
answers the producer's retry at its old epoch with the bumped one. The producer's next
transaction runs at that epoch, and a write at the old one never lands.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import pytest

from onceflow.errors import ErrorCode
from tests.cluster.test_coordinator_failover import (
    ARMED,
    PARTITIONS,
    T,
    armed_cluster,
    check_exactly,
    committed_values,
    coordinator_of,
    live,
    restart_and_check_replicas,
    txn_id_coordinated_by,
    txn_state,
    txn_topic,
    wait_coordinator_moved,
    wait_died,
)
from tests.helpers import txn_wire
from tests.helpers.cluster import Cluster, cluster_factory
from tests.helpers.txn import wait_stable
from tests.helpers.wire import RawConnection

__all__ = ["cluster_factory"]

PER_BATCH = 20
# Answers a client retries: the coordinator moving or loading, the end still being written,
# a leader moving or (Produce) a coordinator question that must be asked again.
RETRIABLE = {
    ErrorCode.not_coordinator,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.coordinator_not_available,
    ErrorCode.concurrent_transactions,
    ErrorCode.not_leader_or_follower,
    ErrorCode.not_enough_replicas,
    ErrorCode.request_timed_out,
}


def retried(call: Callable[[], ErrorCode]) -> ErrorCode:
    deadline = time.monotonic() + T
    code = call()
    while code in RETRIABLE and time.monotonic() < deadline:
        time.sleep(0.2)
        code = call()
    return code


def write(cluster: Cluster, p: txn_wire.Producer, topic: str, tag: str, seq: int) -> set[bytes]:
    """One batch of PER_BATCH records to each partition, with Produce v12 to its leader."""
    values: set[bytes] = set()
    for partition in range(PARTITIONS):
        batch_values = [f"{tag}-{partition}-{i}".encode() for i in range(PER_BATCH)]
        batch = txn_wire.txn_batch(p, seq, *batch_values)

        def produce(partition: int = partition, batch: bytes = batch) -> ErrorCode:
            leader = cluster.leader_of(topic, partition)
            with RawConnection(leader.bootstrap) as conn:
                answer = txn_wire.produce(conn, p, topic, batch, 12, partition)
            return ErrorCode(answer.error_code)

        assert retried(produce) is ErrorCode.none
        values.update(batch_values)
    return values


def end(cluster: Cluster, p: txn_wire.Producer, commit: bool) -> txn_wire.Producer:
    """EndTxn v5 at whichever broker coordinates the id now, retried as a client would."""
    answers = []

    def call() -> ErrorCode:
        coordinator = cluster.broker(coordinator_of(live(cluster), p.transactional_id))
        with RawConnection(coordinator.bootstrap) as conn:
            answer = txn_wire.end_txn(conn, p, commit, version=5)
        answers.append(answer)
        return ErrorCode(answer.error_code)

    assert retried(call) is ErrorCode.none
    last = answers[-1]
    return txn_wire.Producer(p.transactional_id, int(last.producer_id), int(last.producer_epoch))


@pytest.mark.parametrize(
    ("point", "commit"),
    [
        ("txn.after_prepare", True),
        ("txn.after_prepare", False),
        ("txn.between_markers", True),
        ("txn.before_complete", True),
    ],
)
def test_a_coordinator_killed_mid_end_of_a_version_2_transaction(
    cluster_factory: Callable[..., Cluster], point: str, commit: bool
) -> None:
    cluster = armed_cluster(cluster_factory, f"{point}=kill")
    victim = cluster.broker(ARMED)
    topic = txn_topic(cluster)
    txn_id = txn_id_coordinated_by(cluster, ARMED)
    with RawConnection(victim.bootstrap) as conn:
        p = txn_wire.init(conn, txn_id)
    first = write(cluster, p, topic, "first", 0)
    with RawConnection(victim.bootstrap) as conn, contextlib.suppress(ConnectionError, OSError):
        txn_wire.end_txn(conn, p, commit, version=5)  # answered or not: the broker dies
    wait_died(victim, point)
    survivors = live(cluster)
    wait_coordinator_moved(survivors, txn_id)

    # The retry at the old epoch reaches the new coordinator and gets the bumped epoch.
    bumped = end(cluster, p, commit)
    assert (bumped.producer_id, bumped.epoch) == (p.producer_id, p.epoch + 1)
    wait_stable(survivors, topic, range(PARTITIONS), timeout=T)
    wanted = first if commit else set()
    check_exactly(committed_values(survivors, topic, len(wanted)), wanted)
    assert txn_state(survivors, txn_id) == ("CompleteCommit" if commit else "CompleteAbort")

    # The next transaction at the bumped epoch; the old epoch's late write is refused.
    wanted |= write(cluster, bumped, topic, "second", 0)

    def zombie() -> ErrorCode:
        leader = cluster.leader_of(topic, 0)
        batch = txn_wire.txn_batch(p, 1, b"zombie")
        with RawConnection(leader.bootstrap) as conn:
            return ErrorCode(txn_wire.produce(conn, p, topic, batch, 12).error_code)

    assert retried(zombie) is ErrorCode.invalid_producer_epoch
    after = end(cluster, bumped, commit=True)
    assert after.epoch == p.epoch + 2
    check_exactly(committed_values(survivors, topic, len(wanted)), wanted)

    restart_and_check_replicas(cluster, victim, topic)
    check_exactly(committed_values(cluster.bootstrap, topic, len(wanted)), wanted)
