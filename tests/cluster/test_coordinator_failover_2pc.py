"""A prepared two-phase commit transaction (KIP-939) across its coordinator's death.

A producer begins a 2PC transaction (InitProducerId v6 with enable2Pc) coordinated by broker
1, writes to partitions led by all three brokers, and goes away. Broker 1 is killed; the
broker that loads its `__transaction_state` partition finds the transaction still open,
with its 2PC flag, and never aborts it. A new instance inits there with keepPreparedTxn,
learns the transaction's producer id and epoch, and commits or aborts it: every record
once, or none.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from onceflow.errors import ErrorCode
from tests.cluster.test_coordinator_failover import (
    ARMED,
    OVERRIDES,
    PARTITIONS,
    T,
    check_exactly,
    committed_values,
    coordinator_of,
    live,
    txn_id_coordinated_by,
    txn_state,
    txn_topic,
    wait_coordinator_moved,
    wait_until,
)
from tests.cluster.test_coordinator_failover_tv2 import retried, write
from tests.helpers import txn_wire
from tests.helpers.cluster import Cluster, cluster_factory
from tests.helpers.txn import wait_stable
from tests.helpers.wire import RawConnection, fetch_request

__all__ = ["cluster_factory"]

TWO_PC = {
    **OVERRIDES,
    "transaction.two.phase.commit.enable": "true",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
}


def keep(cluster: Cluster, txn_id: str) -> tuple[txn_wire.Producer, tuple[int, int]]:
    """keepPreparedTxn at whichever broker coordinates the id now, retried while it loads."""
    answers = []

    def call() -> ErrorCode:
        coordinator = cluster.broker(coordinator_of(live(cluster), txn_id))
        with RawConnection(coordinator.bootstrap) as conn:
            answer = txn_wire.init_2pc(conn, txn_id, keep=True)
        answers.append(answer)
        return ErrorCode(answer.error_code)

    assert retried(call) is ErrorCode.none
    last = answers[-1]
    new = txn_wire.Producer(txn_id, int(last.producer_id), int(last.producer_epoch))
    return new, (int(last.ongoing_txn_producer_id), int(last.ongoing_txn_producer_epoch))


def end(cluster: Cluster, p: txn_wire.Producer, commit: bool, version: int) -> None:
    def call() -> ErrorCode:
        coordinator = cluster.broker(coordinator_of(live(cluster), p.transactional_id))
        with RawConnection(coordinator.bootstrap) as conn:
            return ErrorCode(txn_wire.end_txn(conn, p, commit, version=version).error_code)

    assert retried(call) is ErrorCode.none


def stable_offsets(cluster: Cluster, topic: str) -> list[int]:
    """Each partition's last stable offset, read_committed, from its leader now."""
    offsets = []
    for partition in range(PARTITIONS):
        found: list[int] = []

        def fetch(partition: int = partition, found: list[int] = found) -> ErrorCode:
            leader = cluster.leader_of(topic, partition)
            request = fetch_request(topic, {partition: (0, -1)}, isolation_level=1)
            with RawConnection(leader.bootstrap) as conn:
                (part,) = conn.call(request).responses[0].partitions
            found.append(int(part.last_stable_offset))
            return ErrorCode(part.error_code)

        assert retried(fetch) is ErrorCode.none
        offsets.append(found[-1])
    return offsets


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_a_prepared_transaction_survives_its_coordinators_death(
    cluster_factory: Callable[..., Cluster], commit: bool
) -> None:
    cluster = cluster_factory(3, overrides=TWO_PC)
    topic = txn_topic(cluster)
    txn_id = txn_id_coordinated_by(cluster, ARMED)
    with RawConnection(cluster.broker(ARMED).bootstrap) as conn:
        answer = txn_wire.init_2pc(conn, txn_id)
        assert answer.error_code == ErrorCode.none, ErrorCode(answer.error_code)
    first = txn_wire.Producer(txn_id, int(answer.producer_id), int(answer.producer_epoch))
    written = write(cluster, first, topic, "prepared", 0)  # Produce v12 adds each partition
    cluster.broker(ARMED).kill()
    survivors = live(cluster)
    wait_coordinator_moved(survivors, txn_id)

    def loaded_open() -> bool:
        try:
            return txn_state(survivors, txn_id) == "Ongoing"
        except Exception:  # still loading
            return False

    wait_until(f"the new coordinator to serve {txn_id}", loaded_open)
    time.sleep(1)  # several abort checks of the new coordinator: none touches it
    assert txn_state(survivors, txn_id) == "Ongoing"
    assert stable_offsets(cluster, topic) == [0] * PARTITIONS  # nothing visible

    second, ongoing = keep(cluster, txn_id)
    assert ongoing == (first.producer_id, first.epoch)
    assert second.epoch == first.epoch + 1
    end(cluster, second, commit, version=5)
    wait_stable(survivors, topic, range(PARTITIONS), timeout=T)
    wanted = written if commit else set()
    check_exactly(committed_values(survivors, topic, len(wanted)), wanted)
    assert txn_state(survivors, txn_id) == ("CompleteCommit" if commit else "CompleteAbort")
