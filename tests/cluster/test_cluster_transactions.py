"""Transactions on a cluster: partitions led by different brokers than the transaction
coordinator, so markers travel as WriteTxnMarkers and KIP-890's check of each first write
travels as AddPartitionsToTxn verify-only. Committed transactions are read whole, aborted
ones never, and a produce arriving after its transaction ended is refused by a partition
leader that is not the coordinator."""

from __future__ import annotations

import dataclasses
import datetime

import pytest
from confluent_kafka import IsolationLevel, TopicPartition
from confluent_kafka.admin import NewTopic, OffsetSpec  # type: ignore[attr-defined]
from kio.schema.add_partitions_to_txn.v3.request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
)
from kio.schema.end_txn.v3.request import EndTxnRequest
from kio.schema.find_coordinator.v2.request import FindCoordinatorRequest
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.static.primitive import i8, i16, i32, i64

from onceflow.errors import ErrorCode
from tests.cluster.test_replication import read_all
from tests.helpers import txn_wire
from tests.helpers.clients import admin_client, create_topic
from tests.helpers.cluster import Cluster, ClusterBroker, cluster_fixture
from tests.helpers.txn import confluent_txn_producer
from tests.helpers.wire import RawConnection, produce_request
from tests.integration.test_txn_late_produce import txn_batch


def end(bootstrap: str, topic: str, partition: int, committed: bool) -> int:
    """The LSO (committed) or the high watermark of a partition."""
    admin = admin_client(bootstrap)
    level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    futures = admin.list_offsets(
        {TopicPartition(topic, partition): OffsetSpec.latest()},  # type: ignore[no-untyped-call]
        isolation_level=level,
    )
    (future,) = futures.values()
    return int(future.result(timeout=T).offset)


def lso(bootstrap: str, topic: str, partition: int) -> int:
    return end(bootstrap, topic, partition, committed=True)


def lso_high(bootstrap: str, topic: str, partition: int) -> int:
    return end(bootstrap, topic, partition, committed=False)


three = cluster_fixture(3, scope="module", overrides={"min.insync.replicas": "2"})
T = 30.0


def test_transactions_across_brokers_commit_whole_and_abort_invisibly(three: Cluster) -> None:
    topic = create_topic(three.bootstrap, partitions=3, replication_factor=3)
    leaders = {three.leader_of(topic, p).broker_id for p in range(3)}
    assert len(leaders) == 3, "each partition led by another broker"
    producer = confluent_txn_producer(three.bootstrap, "cluster-txn")
    producer.init_transactions(T)
    committed = []
    for n in range(12):
        producer.begin_transaction()
        values = [f"{n}-{p}".encode() for p in range(3)]
        for p, value in enumerate(values):
            producer.produce(topic, value=value, partition=p)
        if n % 3 == 2:
            producer.abort_transaction(T)
        else:
            producer.commit_transaction(T)
            committed += values
    records = read_all(three.bootstrap, topic, 3, len(committed))
    assert sorted(m.value() for m in records) == sorted(committed)
    for p in range(3):
        assert lso(three.bootstrap, topic, p) == lso_high(three.bootstrap, topic, p)


def coordinator_and_other(
    three: Cluster, txn_id: str, tag: str
) -> tuple[ClusterBroker, ClusterBroker, str]:
    """The transactional id's coordinator, another broker, and a new topic led by it."""
    admin = admin_client(three.bootstrap)
    with RawConnection(three.bootstrap.split(",")[0]) as conn:
        found = conn.call(FindCoordinatorRequest(key=txn_id, key_type=i8(1)))
    if found.error_code != ErrorCode.none:  # the first use creates __transaction_state
        three.leader_of("__transaction_state", 0)
        with RawConnection(three.bootstrap.split(",")[0]) as conn:
            found = conn.call(FindCoordinatorRequest(key=txn_id, key_type=i8(1)))
    assert found.error_code == ErrorCode.none
    coordinator = three.broker(int(found.node_id))
    other = next(b for b in three.brokers if b is not coordinator)
    topic = f"{tag}-{other.broker_id}"
    admin.create_topics(
        [
            NewTopic(
                topic,
                num_partitions=1,
                replica_assignment=[[other.broker_id, coordinator.broker_id]],
            )
        ],
        request_timeout=T,
    )[topic].result(T)
    assert three.leader_of(topic, 0) is other
    return coordinator, other, topic


def test_a_late_produce_to_a_leader_that_is_not_the_coordinator_is_refused(
    three: Cluster,
) -> None:
    txn_id = "late-on-a-cluster"
    coordinator, other, topic = coordinator_and_other(three, txn_id, "late")
    with RawConnection(coordinator.bootstrap) as c, RawConnection(other.bootstrap) as leader:
        init = c.call(
            InitProducerIdRequest(
                transactional_id=txn_id,
                transaction_timeout=datetime.timedelta(seconds=60),
                producer_id=i64(-1),
                producer_epoch=i16(-1),
            )
        )
        assert init.error_code == ErrorCode.none
        pid, epoch = int(init.producer_id), int(init.producer_epoch)
        added = c.call(
            AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=txn_id,
                v3_and_below_producer_id=i64(pid),
                v3_and_below_producer_epoch=i16(epoch),
                v3_and_below_topics=(AddPartitionsToTxnTopic(name=topic, partitions=(i32(0),)),),
            )
        )
        assert {
            p.partition_error_code
            for t in added.results_by_topic_v3_and_below
            for p in t.results_by_partition
        } == {ErrorCode.none}

        def produce(seq: int, value: bytes) -> ErrorCode:
            request = dataclasses.replace(
                produce_request(topic, {0: txn_batch(pid, epoch, seq, value)}),
                transactional_id=txn_id,
            )
            response = leader.call(request)
            return ErrorCode(response.responses[0].partition_responses[0].error_code)

        assert produce(0, b"in-time") is ErrorCode.none  # verified by the coordinator
        ended = c.call(
            EndTxnRequest(
                transactional_id=txn_id,
                producer_id=i64(pid),
                producer_epoch=i16(epoch),
                committed=False,
            )
        )
        assert ended.error_code == ErrorCode.none
        # Until the abort marker lands, a late write joins the aborted transaction; after,
        # the coordinator says it is not ongoing and the leader refuses it.
        deadline = datetime.datetime.now() + datetime.timedelta(seconds=T)
        while lso(three.bootstrap, topic, 0) != lso_high(three.bootstrap, topic, 0):
            assert datetime.datetime.now() < deadline
        # Until the coordinator logs CompleteAbort the late write is answered with the
        # retriable NOT_ENOUGH_REPLICAS (its CONCURRENT_TRANSACTIONS, as Kafka maps it).
        late = produce(1, b"late")
        while late is ErrorCode.not_enough_replicas:
            assert datetime.datetime.now() < deadline
            late = produce(1, b"late")
        assert late is ErrorCode.invalid_txn_state
    assert lso(three.bootstrap, topic, 0) == lso_high(three.bootstrap, topic, 0)
    records = read_all(three.bootstrap, topic, 1, 0)
    assert [m.value() for m in records] == []


def test_transaction_tools_see_every_coordinator_and_leader(
    three: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    from confluent_kafka import Producer

    from onceflow.client.cluster import Cluster as Wire
    from tests.helpers.clients import QUIET_LOGGER
    from tests.integration.test_transactions_cli import cli, table

    topic = create_topic(three.bootstrap, partitions=3, replication_factor=3)
    # Transactional ids until their coordinators cover at least two brokers.
    producers: dict[str, Producer] = {}
    coordinators: set[int] = set()
    written: set[int] = set()
    with Wire(three.bootstrap) as wire:
        for n in range(40):
            txn_id = f"tools-{n}"
            node, _ = wire.transaction_coordinator(txn_id)
            if node in coordinators and len(producers) >= 2:
                continue
            coordinators.add(node)
            p = Producer(
                {
                    "bootstrap.servers": three.bootstrap,
                    "transactional.id": txn_id,
                    "logger": QUIET_LOGGER,
                    "log_level": 0,
                }
            )
            p.init_transactions(T)
            p.begin_transaction()
            p.produce(topic, b"open", partition=n % 3)
            written.add(n % 3)
            assert p.flush(T) == 0
            producers[txn_id] = p
            if len(coordinators) >= 2 and len(producers) >= 3:
                break
    assert len(coordinators) >= 2, "the ids' coordinators are on one broker"

    code, out, err = cli(capsys, "list", "--bootstrap-server", three.bootstrap)
    assert (code, err) == (0, "")
    listed = {r[0]: r for r in table(out)[1:]}
    assert set(producers) <= set(listed), (sorted(producers), sorted(listed))
    assert {listed[t][3] for t in producers} == {"Ongoing"}

    for partition in sorted(written):  # each partition's leader answers for its producers
        code, out, _ = cli(
            capsys,
            "describe-producers",
            "--bootstrap-server",
            three.bootstrap,
            "--topic",
            topic,
            "--partition",
            str(partition),
        )
        assert code == 0
        assert len(table(out)) >= 2, out  # a header and the open producers' rows
    code, out, _ = cli(
        capsys,
        "find-hanging",
        "--bootstrap-server",
        three.bootstrap,
        "--topic",
        topic,
        "--max-transaction-timeout",
        "0",
    )
    assert (code, out.strip()) == (0, "No hanging transactions found.")
    for p in producers.values():
        p.commit_transaction(T)
    code, out, _ = cli(capsys, "list", "--bootstrap-server", three.bootstrap, "--state", "Ongoing")
    assert not set(producers) & {r[0] for r in table(out)[1:]}


def test_transaction_version_2_across_brokers(three: Cluster) -> None:
    """Produce v12 to a leader that is not the coordinator adds the partition with
    AddPartitionsToTxn v5 (no AddPartitionsToTxn from the client), EndTxn v5 bumps the epoch
    and its markers carry it, and a write at the old epoch never lands."""
    txn_id = "tv2-on-a-cluster"
    coordinator, other, topic = coordinator_and_other(three, txn_id, "tv2")
    with RawConnection(coordinator.bootstrap) as c, RawConnection(other.bootstrap) as leader:
        p0 = txn_wire.init(c, txn_id)

        def write(p: txn_wire.Producer, seq: int, value: bytes) -> ErrorCode:
            batch = txn_wire.txn_batch(p, seq, value)
            return ErrorCode(txn_wire.produce(leader, p, topic, batch, 12).error_code)

        def end_v5(p: txn_wire.Producer, commit: bool) -> txn_wire.Producer:
            deadline = datetime.datetime.now() + datetime.timedelta(seconds=T)
            answer = txn_wire.end_txn(c, p, commit, version=5)
            while answer.error_code == ErrorCode.concurrent_transactions:
                assert datetime.datetime.now() < deadline
                answer = txn_wire.end_txn(c, p, commit, version=5)
            assert answer.error_code == ErrorCode.none, ErrorCode(answer.error_code)
            return txn_wire.Producer(txn_id, int(answer.producer_id), int(answer.producer_epoch))

        assert write(p0, 0, b"c1") is ErrorCode.none
        p1 = end_v5(p0, commit=True)
        assert (p1.producer_id, p1.epoch) == (p0.producer_id, p0.epoch + 1)
        deadline = datetime.datetime.now() + datetime.timedelta(seconds=T)
        while lso(three.bootstrap, topic, 0) != lso_high(three.bootstrap, topic, 0):
            assert datetime.datetime.now() < deadline
        # The marker, at the bumped epoch, fences the old one on the partition.
        assert write(p0, 1, b"zombie-1") is ErrorCode.invalid_producer_epoch
        assert write(p1, 0, b"c2") is ErrorCode.none
        assert write(p0, 1, b"zombie-2") is ErrorCode.invalid_producer_epoch
        end_v5(p1, commit=True)
    records = read_all(three.bootstrap, topic, 1, 2)
    assert [m.value() for m in records] == [b"c1", b"c2"]
