"""A produce that arrives after its transaction ended never opens a hanging transaction.

In Kafka before KIP-890 a delayed produce request that reached a partition after its
transaction was aborted opened a new transaction that no coordinator knew, so the last
stable offset stopped there forever and read_committed consumers hung. Onceflow checks every
transactional write against the coordinator (the transaction must be ongoing at that epoch
and hold the partition). This test sends the late request on purpose, with raw requests, and
checks it is refused and that the LSO reaches the end.
"""

from __future__ import annotations

import dataclasses
import datetime
import time

from confluent_kafka import IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    OffsetSpec,
)
from kio.schema.add_partitions_to_txn.v3.request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
)
from kio.schema.end_txn.v3.request import EndTxnRequest
from kio.schema.find_coordinator.v2.request import FindCoordinatorRequest
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.static.primitive import i8, i16, i32, i64

from onceflow.errors import ErrorCode
from onceflow.records.builder import build_batch
from tests.helpers.broker import BrokerProcess
from tests.helpers.wire import RawConnection, produce_request

TXN_ID = "late-produce"
T = 30.0


def lso(bootstrap: str, topic: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    futures = admin.list_offsets(
        {TopicPartition(topic, 0): OffsetSpec.latest()},  # type: ignore[no-untyped-call]
        isolation_level=IsolationLevel.READ_COMMITTED,
    )
    (future,) = futures.values()
    return int(future.result(timeout=T).offset)


def txn_batch(pid: int, epoch: int, seq: int, value: bytes) -> bytes:
    return build_batch(
        [(b"k", value, ())],
        timestamp_ms=int(datetime.datetime.now().timestamp() * 1000),
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=True,
    )


def produce_txn(conn: RawConnection, topic: str, batch: bytes) -> ErrorCode:
    request = dataclasses.replace(produce_request(topic, {0: batch}), transactional_id=TXN_ID)
    response = conn.call(request)
    (partition,) = response.responses[0].partition_responses
    return ErrorCode(partition.error_code)


def test_a_produce_arriving_after_the_abort_is_refused_and_the_lso_moves_on(
    shared_broker: BrokerProcess,
) -> None:
    bs = shared_broker.bootstrap
    topic = "late-produce-topic"
    plain = Producer({"bootstrap.servers": bs, "log_level": 0})
    plain.produce(topic, b"before", partition=0)  # auto-creates the topic
    assert plain.flush(T) == 0
    with RawConnection(bs) as conn:
        found = conn.call(FindCoordinatorRequest(key=TXN_ID, key_type=i8(1)))
        assert found.error_code == ErrorCode.none
        init = conn.call(
            InitProducerIdRequest(
                transactional_id=TXN_ID,
                transaction_timeout=datetime.timedelta(seconds=60),
                producer_id=i64(-1),
                producer_epoch=i16(-1),
            )
        )
        assert init.error_code == ErrorCode.none
        pid, epoch = int(init.producer_id), int(init.producer_epoch)
        added = conn.call(
            AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=TXN_ID,
                v3_and_below_producer_id=i64(pid),
                v3_and_below_producer_epoch=i16(epoch),
                v3_and_below_topics=(AddPartitionsToTxnTopic(name=topic, partitions=(i32(0),)),),
            )
        )
        errors = {
            p.partition_error_code
            for t in added.results_by_topic_v3_and_below
            for p in t.results_by_partition
        }
        assert errors == {ErrorCode.none}
        assert produce_txn(conn, topic, txn_batch(pid, epoch, 0, b"in-time")) is ErrorCode.none
        ended = conn.call(
            EndTxnRequest(
                transactional_id=TXN_ID,
                producer_id=i64(pid),
                producer_epoch=i16(epoch),
                committed=False,
            )
        )
        assert ended.error_code == ErrorCode.none
        # The delayed request of the aborted transaction arrives now. While the abort's
        # markers are written it is answered with the retriable NOT_ENOUGH_REPLICAS (the
        # coordinator's CONCURRENT_TRANSACTIONS, as Kafka maps it); a retry is refused.
        late = ErrorCode.not_enough_replicas
        for _ in range(100):
            late = produce_txn(conn, topic, txn_batch(pid, epoch, 1, b"late"))
            if late is not ErrorCode.not_enough_replicas:
                break
            time.sleep(0.05)
        assert late is ErrorCode.invalid_txn_state
    plain.produce(topic, b"after", partition=0)
    assert plain.flush(T) == 0
    # No transaction is left open on the partition: read_committed reaches the end.
    end = lso(bs, topic)
    high = lso_high(bs, topic)
    assert end == high, (end, high)


def lso_high(bootstrap: str, topic: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    futures = admin.list_offsets(
        {TopicPartition(topic, 0): OffsetSpec.latest()},  # type: ignore[no-untyped-call]
        isolation_level=IsolationLevel.READ_UNCOMMITTED,
    )
    (future,) = futures.values()
    return int(future.result(timeout=T).offset)
