"""The transaction coordinator's broker dies or freezes mid-transaction (issue 11).

Fail points (onceflow.failpoints) make broker 1, the coordinator of the test's
transactional id, kill -9 or SIGSTOP itself at an exact step of ending a transaction:
after PrepareCommit is logged, between its markers, after the markers and before
CompleteCommit, and with CompleteCommit in its log but not replicated (issue 26: the next
transaction may be logged behind it then). The coordinator that takes over must end each
transaction all or nothing, a frozen old coordinator that wakes up must change nothing, a
producer left behind by the move must be fenced by the one that reached the new
coordinator, and the new coordinator must time out a transaction whose producer vanished.
Producer ids, allocated on every broker from ZooKeeper, never collide, not even across a
restart of the whole cluster.

Every topic has three partitions of RF=3 led by brokers 1, 2 and 3, and the internal
topics have three partitions each, so broker 1 leads one partition of each.
"""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from kio.schema.find_coordinator.v2.request import FindCoordinatorRequest
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.static.primitive import i8, i16, i64

from onceflow.cli.cluster import INTERNAL_REPLICATION
from onceflow.client.cluster import Cluster as WireCluster
from onceflow.client.errors import ClientError
from onceflow.errors import ErrorCode
from onceflow.failpoints import FAILPOINTS_ENV
from onceflow.protocol.api_versions import ApiKey
from tests.cluster.test_replication import read_all, wait_isr, wait_replicas_agree
from tests.helpers.clients import admin_client, create_topic
from tests.helpers.cluster import Cluster, ClusterBroker, cluster_factory
from tests.helpers.txn import (
    TXN_BROKER_OVERRIDES,
    confluent_txn_producer,
    end_offsets,
    fencing_error,
    wait_stable,
)
from tests.helpers.wire import RawConnection

__all__ = ["cluster_factory"]

ARMED = 1  # the broker whose fail point is armed, and which coordinates TXN ids here
OVERRIDES = {
    **TXN_BROKER_OVERRIDES,
    "min.insync.replicas": "2",
    "transaction.state.log.num.partitions": "3",
    "offsets.topic.num.partitions": "3",
}
PARTITIONS = 3
PER_PARTITION = 50
T = 45.0


# ---- set-up ------------------------------------------------------------------------------


def armed_cluster(make: Callable[..., Cluster], spec: str) -> Cluster:
    cluster = make(3, overrides=OVERRIDES, start=False)
    cluster.broker(ARMED).env[FAILPOINTS_ENV] = spec
    return cluster.start()


def live(cluster: Cluster, frozen: ClusterBroker | None = None) -> str:
    """The bootstrap of the running brokers but a frozen one (which would accept a
    connection and never answer)."""
    return ",".join(b.bootstrap for b in cluster.running() if b is not frozen)


def coordinator_of(bootstrap: str, txn_id: str) -> int:
    with WireCluster(bootstrap, timeout_s=T) as wire:
        return wire.transaction_coordinator(txn_id)[0]


def wait_coordinator_moved(bootstrap: str, txn_id: str) -> None:
    """Until the live brokers name another coordinator than broker ARMED (they named it
    until its ZooKeeper session expired)."""

    def moved() -> bool:
        try:
            return coordinator_of(bootstrap, txn_id) != ARMED
        except ClientError:  # named, but dead or frozen
            return False

    wait_until(f"the coordinator of {txn_id} to move", moved)


def txn_id_coordinated_by(cluster: Cluster, broker_id: int) -> str:
    """A fresh transactional id whose `__transaction_state` partition broker_id leads."""
    stem = f"crash-{uuid.uuid4().hex[:8]}"
    for i in range(100):
        if coordinator_of(cluster.bootstrap, f"{stem}-{i}") == broker_id:
            return f"{stem}-{i}"
    raise AssertionError(f"no transactional id is coordinated by broker {broker_id}")


def txn_topic(cluster: Cluster) -> str:
    topic = create_topic(cluster.bootstrap, partitions=PARTITIONS, replication_factor=3)
    leaders = sorted(cluster.leader_of(topic, p).broker_id for p in range(PARTITIONS))
    assert leaders == [1, 2, 3], "each broker leads one partition"
    return topic


def write(p: Producer, topic: str, tag: str) -> set[bytes]:
    """PER_PARTITION records to each partition, flushed (written, not yet committed)."""
    values = set()
    for partition in range(PARTITIONS):
        for i in range(PER_PARTITION):
            value = f"{tag}-{partition}-{i}".encode()
            p.produce(topic, value=value, partition=partition)
            values.add(value)
    assert p.flush(T) == 0
    return values


def end_transaction(p: Producer, commit: bool) -> None:
    """commit_transaction() or abort_transaction(), called again after a retriable error,
    as librdkafka asks of its caller."""
    deadline = time.monotonic() + T
    while True:
        try:
            (p.commit_transaction if commit else p.abort_transaction)(T)
            return
        except KafkaException as exc:
            err: KafkaError = exc.args[0]
            if not err.retriable() or time.monotonic() > deadline:
                raise


def wait_until(what: str, check: Callable[[], bool], timeout: float = T) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def wait_died(broker: ClusterBroker, point: str) -> None:
    """Until the armed broker has killed itself at `point`; then reap it."""
    proc = broker.proc
    assert proc is not None
    wait_until(f"broker {broker.broker_id} to die at {point}", lambda: proc.poll() is not None)
    assert f"fail point {point} fires" in broker.log
    assert proc.returncode == -9
    broker.kill()  # marks it stopped


def wait_stopped(broker: ClusterBroker, point: str) -> None:
    """Until the armed broker has frozen itself (SIGSTOP) at `point`."""
    assert broker.pid is not None
    stat = f"/proc/{broker.pid}/stat"

    def frozen() -> bool:
        with open(stat) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "T"

    wait_until(f"broker {broker.broker_id} to freeze at {point}", frozen)
    assert f"fail point {point} fires" in broker.log


def txn_state(bootstrap: str, txn_id: str) -> str:
    with WireCluster(bootstrap, timeout_s=T) as wire:
        _, conn = wire.transaction_coordinator(txn_id)
        answer = conn.call(ApiKey.DESCRIBE_TRANSACTIONS, transactional_ids=(txn_id,))
    (state,) = answer.transaction_states
    return str(state.transaction_state)


def committed_values(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    return [m.value() for m in read_all(bootstrap, topic, PARTITIONS, expected)]


def check_exactly(values: list[bytes], wanted: set[bytes]) -> None:
    assert len(values) == len(set(values)), "a record read twice"
    assert set(values) == wanted, (
        f"{len(wanted - set(values))} committed records missing, "
        f"{len(set(values) - wanted)} records that were not committed visible"
    )


def restart_and_check_replicas(cluster: Cluster, victim: ClusterBroker, topic: str) -> None:
    """The victim comes back without its fail point, catches up, and every replica of
    the topic holds the same bytes (what it wrote alone before dying is truncated)."""
    victim.env.clear()
    victim.start()
    cluster.wait_formed()
    for p in range(PARTITIONS):
        wait_isr(cluster, topic, p, [1, 2, 3])
        wait_replicas_agree(cluster, topic, p)


# ---- crash points ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("point", "commit"),
    [
        ("txn.after_prepare", True),
        ("txn.after_prepare", False),
        ("txn.between_markers", True),
        ("txn.before_complete", True),
        ("txn.complete_appended", True),
        ("txn.complete_appended", False),
    ],
)
def test_a_coordinator_killed_mid_end_leaves_its_transaction_whole(
    cluster_factory: Callable[..., Cluster], point: str, commit: bool
) -> None:
    cluster = armed_cluster(cluster_factory, f"{point}=kill")
    victim = cluster.broker(ARMED)
    topic = txn_topic(cluster)
    txn_id = txn_id_coordinated_by(cluster, ARMED)
    p = confluent_txn_producer(cluster.bootstrap, txn_id)
    p.init_transactions(T)
    p.begin_transaction()
    first = write(p, topic, "first")
    # Answered by broker 1 before it dies (past PrepareCommit, the end is decided) or,
    # when it died before answering, by its successor.
    end_transaction(p, commit)
    wait_died(victim, point)
    survivors = live(cluster)
    wait_coordinator_moved(survivors, txn_id)

    wait_stable(survivors, topic, range(PARTITIONS), timeout=T)
    wanted = first if commit else set()
    check_exactly(committed_values(survivors, topic, len(wanted)), wanted)
    assert txn_state(survivors, txn_id) == ("CompleteCommit" if commit else "CompleteAbort")

    # The producer goes on with the new coordinator.
    p.begin_transaction()
    wanted |= write(p, topic, "second")
    end_transaction(p, commit=True)
    check_exactly(committed_values(survivors, topic, len(wanted)), wanted)

    restart_and_check_replicas(cluster, victim, topic)
    check_exactly(committed_values(cluster.bootstrap, topic, len(wanted)), wanted)


# ---- a zombie coordinator ------------------------------------------------------------------


def test_a_frozen_coordinator_that_wakes_up_changes_nothing(
    cluster_factory: Callable[..., Cluster],
) -> None:
    """Broker 1 freezes right after logging PrepareCommit, before any marker. The others
    move its partitions away; the new coordinator finishes the commit; the producer opens
    a second transaction with the same producer id and epoch. Broker 1 then wakes up and
    goes on from where it froze, with its old coordinator epoch: had a leader taken its
    commit markers, the second transaction would be committed half-written. It is aborted
    instead, and none of its records may ever be read."""
    cluster = armed_cluster(cluster_factory, "txn.after_prepare=pause")
    zombie = cluster.broker(ARMED)
    topic = txn_topic(cluster)
    txn_id = txn_id_coordinated_by(cluster, ARMED)
    # A request to the frozen broker times out after socket.timeout.ms; then the client
    # looks for the coordinator again.
    p = confluent_txn_producer(cluster.bootstrap, txn_id, **{"socket.timeout.ms": 6000})
    p.init_transactions(T)
    p.begin_transaction()
    first = write(p, topic, "first")
    others = live(cluster, frozen=zombie)
    try:
        end_transaction(p, commit=True)  # answered by the successor
        wait_stopped(zombie, "txn.after_prepare")
        wait_coordinator_moved(others, txn_id)
        p.begin_transaction()
        write(p, topic, "second")  # to the new leaders; not ended yet
        mark = zombie.log_size()
    finally:
        zombie.resume()
    wait_until(
        "the zombie to stop coordinating",
        lambda: "no longer coordinating" in zombie.log[mark:],
    )
    time.sleep(2.0)  # room for anything it would still send
    lsos = end_offsets(others, topic, range(PARTITIONS), committed=True)
    highs = end_offsets(others, topic, range(PARTITIONS), committed=False)
    assert all(lsos[p] < highs[p] for p in lsos), "the second transaction is still open"
    check_exactly(committed_values(others, topic, len(first)), first)

    end_transaction(p, commit=False)
    wait_stable(others, topic, range(PARTITIONS), timeout=T)
    check_exactly(committed_values(others, topic, len(first)), first)
    assert txn_state(others, txn_id) == "CompleteAbort"
    cluster.wait_formed()
    for partition in range(PARTITIONS):
        wait_isr(cluster, topic, partition, [1, 2, 3])
        wait_replicas_agree(cluster, topic, partition)
    check_exactly(committed_values(cluster.bootstrap, topic, len(first)), first)


# ---- a zombie producer ---------------------------------------------------------------------


def test_a_producer_left_behind_by_a_coordinator_move_is_fenced(
    cluster_factory: Callable[..., Cluster],
) -> None:
    """Producer A has a transaction open when its coordinator's broker dies. Producer B,
    same transactional id, reaches the new coordinator: A's transaction is aborted and A
    is fenced, whatever it tries next; only B's records are ever read."""
    cluster = cluster_factory(3, overrides=OVERRIDES)
    topic = txn_topic(cluster)
    txn_id = txn_id_coordinated_by(cluster, ARMED)
    a = confluent_txn_producer(cluster.bootstrap, txn_id)
    a.init_transactions(T)
    a.begin_transaction()
    write(a, topic, "a")
    cluster.broker(ARMED).kill()
    survivors = live(cluster)

    b = confluent_txn_producer(cluster.bootstrap, txn_id)
    b.init_transactions(T)  # waits for the new coordinator, which fences A
    wait_coordinator_moved(survivors, txn_id)
    b.begin_transaction()
    mine = write(b, topic, "b")
    end_transaction(b, commit=True)

    with pytest.raises(KafkaException) as fenced:
        for partition in range(PARTITIONS):
            a.produce(topic, value=b"a-late", partition=partition)
        # Not T: once one partition's leader fences A, librdkafka leaves A's other records
        # queued, and flush() waits out its whole timeout before it raises (45 s under load).
        a.flush(5)
        a.commit_transaction(T)
    assert fencing_error(fenced.value) is not None, fenced.value

    wait_stable(survivors, topic, range(PARTITIONS), timeout=T)
    check_exactly(committed_values(survivors, topic, len(mine)), mine)


# ---- a timeout across a move -----------------------------------------------------------------


def test_the_new_coordinator_aborts_a_transaction_that_times_out(
    cluster_factory: Callable[..., Cluster],
) -> None:
    """The producer vanishes with a transaction open, and so does its coordinator's
    broker. The coordinator that loads the id keeps the transaction's start time and
    aborts it once transaction.timeout.ms has passed: no partition hangs."""
    cluster = cluster_factory(3, overrides=OVERRIDES)
    topic = txn_topic(cluster)
    txn_id = txn_id_coordinated_by(cluster, ARMED)
    p = confluent_txn_producer(cluster.bootstrap, txn_id, **{"transaction.timeout.ms": 8000})
    p.init_transactions(T)
    p.begin_transaction()
    write(p, topic, "lost")
    cluster.broker(ARMED).kill()
    survivors = live(cluster)

    wait_stable(survivors, topic, range(PARTITIONS), timeout=T)
    assert txn_state(survivors, txn_id) == "CompleteAbort"
    assert committed_values(survivors, topic, 0) == []
    p.purge()  # the client goes away without ending anything


# ---- producer ids ------------------------------------------------------------------------------


def init_producer_ids(broker: ClusterBroker, count: int, txn_stem: str | None = None) -> list[int]:
    """`count` InitProducerId answers of one broker: idempotent (no transactional id:
    that broker allocates), or for fresh transactional ids (their coordinators allocate)."""
    pids = []
    with RawConnection(broker.bootstrap) as conn:
        for i in range(count):
            answer = conn.call(
                InitProducerIdRequest(
                    transactional_id=None if txn_stem is None else f"{txn_stem}-{i}",
                    transaction_timeout=datetime.timedelta(seconds=60),
                    producer_id=i64(-1),
                    producer_epoch=i16(-1),
                )
            )
            if answer.error_code == ErrorCode.not_coordinator:  # asked the wrong broker
                continue
            assert answer.error_code == ErrorCode.none, answer
            pids.append(int(answer.producer_id))
    return pids


def test_producer_ids_never_collide_across_brokers_and_restarts(
    cluster_factory: Callable[..., Cluster],
) -> None:
    """Each broker takes blocks of ids from ZooKeeper's /latest_producer_id_block; a
    restarted broker (kill -9 of the whole cluster) and a new controller take new ones."""
    cluster = cluster_factory(3, overrides=OVERRIDES)
    seen: list[int] = []
    for round_ in range(2):
        for b in cluster.brokers:
            seen += init_producer_ids(b, 40)
            seen += init_producer_ids(b, 20, txn_stem=f"ids-{round_}-{b.broker_id}")
        # Past the end of one broker's block of 1000 ids.
        seen += init_producer_ids(cluster.brokers[round_], 1100)
        assert len(seen) == len(set(seen)), "a producer id handed out twice"
        cluster.kill_all()
        cluster.start_all()
        cluster.wait_formed()
    for b in cluster.brokers:
        seen += init_producer_ids(b, 40)
    assert len(seen) == len(set(seen)), "a producer id handed out twice"


# ---- the transaction log's replication factor ----------------------------------------------


def without_internal_factors(cluster: Cluster) -> Cluster:
    """Brokers that leave the internal topics' factors at their defaults (the test
    harness, like `onceflow cluster`, otherwise sets them to the broker count)."""
    for b in cluster.brokers:
        for key, _ in INTERNAL_REPLICATION:
            b.overrides.pop(key, None)
    return cluster


def test_the_default_factor_is_capped_at_the_broker_count(
    cluster_factory: Callable[..., Cluster],
) -> None:
    cluster = without_internal_factors(cluster_factory(2, overrides=OVERRIDES, start=False))
    cluster.start()
    topic = create_topic(cluster.bootstrap, partitions=PARTITIONS, replication_factor=2)
    p = confluent_txn_producer(cluster.bootstrap, f"capped-{uuid.uuid4().hex[:8]}")
    p.init_transactions(T)
    p.begin_transaction()
    wanted = write(p, topic, "capped")
    end_transaction(p, commit=True)
    check_exactly(committed_values(cluster.bootstrap, topic, len(wanted)), wanted)
    md = admin_client(cluster.bootstrap).list_topics("__transaction_state", timeout=T)
    parts = md.topics["__transaction_state"].partitions
    assert parts and all(sorted(m.replicas) == [1, 2] for m in parts.values())
    assert any(
        "__transaction_state gets replication factor 2: the default 3 is capped" in b.log
        for b in cluster.brokers
    )


def test_an_explicit_factor_above_the_broker_count_waits_for_brokers(
    cluster_factory: Callable[..., Cluster],
) -> None:
    """As in Kafka: no transaction log, so no coordinator, until 3 brokers are up."""
    cluster = without_internal_factors(cluster_factory(2, overrides=OVERRIDES, start=False))
    for b in cluster.brokers:
        b.overrides["transaction.state.log.replication.factor"] = "3"
    cluster.start()
    with RawConnection(cluster.brokers[0].bootstrap) as conn:
        for _ in range(5):
            answer = conn.call(
                FindCoordinatorRequest(key="waits", key_type=i8(1))  # a transactional id
            )
            assert answer.error_code == ErrorCode.coordinator_not_available
            time.sleep(0.5)
    md = admin_client(cluster.bootstrap).list_topics(timeout=T)
    assert "__transaction_state" not in md.topics
