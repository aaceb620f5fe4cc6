"""Raw transactional requests at any version, as a client of that version would send them.

Built with kio's schema of the version asked for (`codec.build` keeps the fields it has), so
a test can speak exactly the protocol a Java producer at a given transaction version speaks:
no installed client uses transaction version 2.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from typing import Any

from kio.index import load_payload_module
from kio.static.constants import EntityType

from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import build, request_type
from onceflow.records.builder import build_batch
from tests.helpers.wire import RawConnection


@dataclasses.dataclass
class Producer:
    """A transactional producer's identity as the coordinator gave it."""

    transactional_id: str
    producer_id: int
    epoch: int


def _module(api_key: int, version: int) -> Any:
    return load_payload_module(api_key, version, EntityType.request)


def find_coordinator(conn: RawConnection, transactional_id: str) -> None:
    request = build(request_type(ApiKey.FIND_COORDINATOR, 2), key=transactional_id, key_type=1)
    assert conn.call(request).error_code == ErrorCode.none


def init_producer_id(
    conn: RawConnection, transactional_id: str, version: int = 5, timeout_s: float = 60
) -> Any:
    return conn.call(
        build(
            request_type(ApiKey.INIT_PRODUCER_ID, version),
            transactional_id=transactional_id,
            transaction_timeout=datetime.timedelta(seconds=timeout_s),
            producer_id=-1,
            producer_epoch=-1,
        )
    )


def init_2pc(
    conn: RawConnection,
    transactional_id: str | None,
    *,
    enable: bool = True,
    keep: bool = False,
    timeout_s: float = 60,
) -> Any:
    """InitProducerId v6 (KIP-939) with enable2Pc and keepPreparedTxn as given; the answer,
    with ongoing_txn_producer_id and ongoing_txn_producer_epoch."""
    return conn.call(
        build(
            request_type(ApiKey.INIT_PRODUCER_ID, 6),
            transactional_id=transactional_id,
            transaction_timeout=datetime.timedelta(seconds=timeout_s),
            producer_id=-1,
            producer_epoch=-1,
            enable2_pc=enable,
            keep_prepared_txn=keep,
        )
    )


def init(conn: RawConnection, transactional_id: str, version: int = 5) -> Producer:
    find_coordinator(conn, transactional_id)
    answer = init_producer_id(conn, transactional_id, version)
    assert answer.error_code == ErrorCode.none, ErrorCode(answer.error_code)
    return Producer(transactional_id, int(answer.producer_id), int(answer.producer_epoch))


def add_partitions(
    conn: RawConnection, p: Producer, topic: str, partitions: tuple[int, ...], version: int = 3
) -> set[ErrorCode]:
    """A client's AddPartitionsToTxn (v0-v3); the set of partition codes."""
    module = _module(ApiKey.ADD_PARTITIONS_TO_TXN, version)
    answer = conn.call(
        build(
            request_type(ApiKey.ADD_PARTITIONS_TO_TXN, version),
            v3_and_below_transactional_id=p.transactional_id,
            v3_and_below_producer_id=p.producer_id,
            v3_and_below_producer_epoch=p.epoch,
            v3_and_below_topics=(
                build(module.AddPartitionsToTxnTopic, name=topic, partitions=partitions),
            ),
        )
    )
    return {
        ErrorCode(r.partition_error_code)
        for t in answer.results_by_topic_v3_and_below
        for r in t.results_by_partition
    }


def add_offsets(conn: RawConnection, p: Producer, group: str, version: int = 4) -> ErrorCode:
    answer = conn.call(
        build(
            request_type(ApiKey.ADD_OFFSETS_TO_TXN, version),
            transactional_id=p.transactional_id,
            producer_id=p.producer_id,
            producer_epoch=p.epoch,
            group_id=group,
        )
    )
    return ErrorCode(answer.error_code)


def end_txn(conn: RawConnection, p: Producer, commit: bool, version: int = 4) -> Any:
    return conn.call(
        build(
            request_type(ApiKey.END_TXN, version),
            transactional_id=p.transactional_id,
            producer_id=p.producer_id,
            producer_epoch=p.epoch,
            committed=commit,
        )
    )


def txn_offset_commit(
    conn: RawConnection,
    p: Producer,
    group: str,
    topic: str,
    offset: int,
    version: int = 4,
    epoch: int | None = None,
) -> ErrorCode:
    """One partition's (partition 0 of `topic`) transactional commit; its code."""
    module = _module(ApiKey.TXN_OFFSET_COMMIT, version)
    answer = conn.call(
        build(
            request_type(ApiKey.TXN_OFFSET_COMMIT, version),
            transactional_id=p.transactional_id,
            group_id=group,
            producer_id=p.producer_id,
            producer_epoch=p.epoch if epoch is None else epoch,
            generation_id=-1,
            member_id="",
            group_instance_id=None,
            topics=(
                build(
                    module.TxnOffsetCommitRequestTopic,
                    name=topic,
                    partitions=(
                        build(
                            module.TxnOffsetCommitRequestPartition,
                            partition_index=0,
                            committed_offset=offset,
                            committed_leader_epoch=-1,
                            committed_metadata="",
                        ),
                    ),
                ),
            ),
        )
    )
    (partition,) = answer.topics[0].partitions
    return ErrorCode(partition.error_code)


def txn_batch(p: Producer, seq: int, *values: bytes, epoch: int | None = None) -> bytes:
    return build_batch(
        [(b"k", v, ()) for v in values],
        timestamp_ms=int(time.time() * 1000),
        producer_id=p.producer_id,
        producer_epoch=p.epoch if epoch is None else epoch,
        base_sequence=seq,
        transactional=True,
    )


def produce(
    conn: RawConnection, p: Producer, topic: str, batch: bytes, version: int, partition: int = 0
) -> Any:
    """A transactional Produce of one batch; the partition's answer."""
    module = _module(ApiKey.PRODUCE, version)
    answer = conn.call(
        build(
            request_type(ApiKey.PRODUCE, version),
            transactional_id=p.transactional_id,
            acks=-1,
            timeout=datetime.timedelta(seconds=10),
            topic_data=(
                build(
                    module.TopicProduceData,
                    name=topic,
                    partition_data=(
                        build(module.PartitionProduceData, index=partition, records=batch),
                    ),
                ),
            ),
        )
    )
    (result,) = answer.responses[0].partition_responses
    return result
