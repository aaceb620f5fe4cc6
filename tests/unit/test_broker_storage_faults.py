"""Storage faults as clients see them, through the real handlers of an in-process Broker on a
fault-injecting SimFileSystem: Kafka's error codes instead of closed connections, the
free-space threshold with headroom for the broker's own writes, coordinators that stop
serving what they cannot write, and one log line per state change.
"""

from __future__ import annotations

import asyncio
import datetime
import errno
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from kio.index import load_payload_module
from kio.static.constants import EntityType

from onceflow.broker.broker import OFFSETS_TOPIC, TXN_TOPIC, Broker
from onceflow.broker.handlers.base import RequestContext
from onceflow.broker.handlers.registry import HANDLERS
from onceflow.broker.responses import Deferred
from onceflow.broker.server import _settle
from onceflow.clock import ManualClock
from onceflow.config import BrokerConfig
from onceflow.coordinator.transaction.state import TxnState
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import RequestHeader, build, request_type
from onceflow.records.builder import build_batch
from onceflow.storage.disk_space import RECHECK_MS, DiskState
from onceflow.storage.fs import Fault, SimFileSystem

TOPIC = "orders"
MIB = 1 << 20


class Harness:
    def __init__(self, broker: Broker, fs: SimFileSystem, clock: ManualClock) -> None:
        self.broker = broker
        self.fs = fs
        self.clock = clock

    async def call(self, api: int, version: int, /, **fields: Any) -> Any:
        request = build(request_type(api, version), **fields)
        ctx = RequestContext(RequestHeader(api, version, 1, "test"), self.broker)
        response = await HANDLERS[api](ctx, request)
        if isinstance(response, Deferred):
            response = await asyncio.wait_for(_settle(response), 10)
        return response

    async def produce(self, *partitions: int, transactional_id: str | None = None) -> list[Any]:
        """One acks=all request with a batch for each partition; the partition answers."""
        batch = build_batch([(b"k", b"v" * 100, ())], timestamp_ms=self.clock.now_ms())
        response = await self.call(
            ApiKey.PRODUCE,
            8,
            transactional_id=transactional_id,
            acks=-1,
            timeout=datetime.timedelta(seconds=30),
            topic_data=(
                nested(
                    ApiKey.PRODUCE,
                    8,
                    "TopicProduceData",
                    name=TOPIC,
                    partition_data=tuple(
                        nested(ApiKey.PRODUCE, 8, "PartitionProduceData", index=p, records=batch)
                        for p in partitions
                    ),
                ),
            ),
        )
        return list(response.responses[0].partition_responses)

    async def find_coordinator(self, key: str, key_type: int) -> Any:
        return await self.call(ApiKey.FIND_COORDINATOR, 2, key=key, key_type=key_type)

    def low_on_space(self, free: int) -> None:
        """Shrink the simulated disk so `free` bytes are left, and let the guard see it."""
        self.fs.capacity = self.fs.used() + free
        self.clock.advance(RECHECK_MS)

    def take_offline(self, topic: str, partition: int) -> None:
        plog = self.broker.logs.get(topic, partition)
        assert plog is not None
        plog.take_offline("injected by the test")


def nested(api: int, version: int, name: str, /, **fields: Any) -> Any:
    return build(getattr(load_payload_module(api, version, EntityType.request), name), **fields)


def run(body: Callable[[Harness], Awaitable[None]], **config: Any) -> None:
    async def main() -> None:
        clock = ManualClock()
        fs = SimFileSystem()
        settings: dict[str, Any] = {
            "log_dirs": ("/data",),
            "offsets_topic_num_partitions": 2,
            "transaction_state_log_num_partitions": 2,
            "onceflow_log_dir_min_free_bytes": 4 * MIB,
            "onceflow_log_dir_min_free_percent": 100.0,
            **config,
        }
        broker = Broker(BrokerConfig(**settings), fs=fs, clock=clock)
        fs.capacity = 1 << 30
        await broker.start()
        try:
            await broker.create_topic(TOPIC, 2)
            await body(Harness(broker, fs, clock))
        finally:
            fs.faults.clear()
            fs.capacity = None
            await broker.stop()

    asyncio.run(main())


def test_a_failed_fsync_answers_kafka_storage_error_for_that_partition_only() -> None:
    async def body(h: Harness) -> None:
        h.fs.inject(Fault("fsync", path=f"/{TOPIC}-1/"))
        answers = await h.produce(0, 1)
        assert [a.error_code for a in answers] == [ErrorCode.none, ErrorCode.kafka_storage_error]
        assert answers[1].base_offset == -1 and "offline" in answers[1].error_message
        # The partition stays offline: produce, fetch offsets and metadata say so.
        again = await h.produce(1)
        assert again[0].error_code is ErrorCode.kafka_storage_error
        offsets = await h.call(
            ApiKey.LIST_OFFSETS,
            2,
            replica_id=-1,
            isolation_level=0,
            topics=(
                nested(
                    ApiKey.LIST_OFFSETS,
                    2,
                    "ListOffsetsTopic",
                    name=TOPIC,
                    partitions=tuple(
                        nested(
                            ApiKey.LIST_OFFSETS,
                            2,
                            "ListOffsetsPartition",
                            partition_index=p,
                            timestamp=-1,
                        )
                        for p in (0, 1)
                    ),
                ),
            ),
        )
        codes = [p.error_code for p in offsets.topics[0].partitions]
        assert codes == [ErrorCode.none, ErrorCode.kafka_storage_error]
        metadata = await h.call(
            ApiKey.METADATA,
            8,
            topics=(nested(ApiKey.METADATA, 8, "MetadataRequestTopic", name=TOPIC),),
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
        p0, p1 = metadata.topics[0].partitions
        assert (p0.error_code, p0.leader_id, p0.offline_replicas) == (ErrorCode.none, 0, ())
        assert (p1.error_code, p1.leader_id, p1.offline_replicas) == (
            ErrorCode.leader_not_available,
            -1,
            (0,),
        )

    run(body)


def test_below_the_threshold_produce_is_refused_and_resumes_by_itself(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def body(h: Harness) -> None:
        caplog.set_level(logging.INFO)
        h.low_on_space(2 * MIB)
        refused = await h.produce(0)
        assert refused[0].error_code is ErrorCode.kafka_storage_error
        assert "below the threshold" in refused[0].error_message
        assert h.broker.disk.state is DiskState.LOW
        for _ in range(5):
            assert (await h.produce(0))[0].error_code is ErrorCode.kafka_storage_error
        h.low_on_space(8 * MIB)
        accepted = await h.produce(0)
        assert accepted[0].error_code is ErrorCode.none
        assert h.broker.disk.state is DiskState.OK
        assert caplog.text.count("ok -> low") == 1
        assert caplog.text.count("low -> ok") == 1

    run(body)


def test_below_the_threshold_an_open_transaction_still_commits() -> None:
    """The headroom below the threshold is for what finishes in-flight work: the
    transaction log, the markers and offset commits, so no transaction hangs."""

    async def body(h: Harness) -> None:
        coordinator = h.broker.txn_coordinator
        init = await coordinator.init_producer_id("tx", 60_000)
        pid, epoch = init.producer_id, init.producer_epoch
        error = await coordinator.add_partitions("tx", pid, epoch, [(TOPIC, 0)])
        assert error is ErrorCode.none
        batch = build_batch(
            [(b"k", b"v", ())],
            timestamp_ms=h.clock.now_ms(),
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=0,
            transactional=True,
        )
        plog = h.broker.logs.get(TOPIC, 0)
        assert plog is not None
        from onceflow.records.batch import validate_produced_batches

        plog.append_batches(batch, validate_produced_batches(batch, 1 << 20))
        h.broker.writes.appended(plog)
        h.low_on_space(1 * MIB)
        assert (await h.produce(1))[0].error_code is ErrorCode.kafka_storage_error
        assert await coordinator.end_txn("tx", pid, epoch, commit=True) is ErrorCode.none
        for _ in range(100):
            if coordinator.txns["tx"].state is TxnState.COMPLETE_COMMIT:
                break
            await asyncio.sleep(0.01)
        assert coordinator.txns["tx"].state is TxnState.COMPLETE_COMMIT
        await h.broker.flusher.durable(plog, plog.log_end_offset - 1)
        assert plog.last_stable_offset == plog.log_end_offset

    run(body)


def test_markers_are_retried_quietly_until_the_disk_has_space_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def body(h: Harness) -> None:
        caplog.set_level(logging.INFO)
        coordinator = h.broker.txn_coordinator
        init = await coordinator.init_producer_id("tx", 60_000)
        pid, epoch = init.producer_id, init.producer_epoch
        assert await coordinator.add_partitions("tx", pid, epoch, [(TOPIC, 1)]) is ErrorCode.none
        fault = h.fs.inject(Fault("write", path=f"/{TOPIC}-1/", error=errno.ENOSPC, repeat=True))
        assert await coordinator.end_txn("tx", pid, epoch, commit=False) is ErrorCode.none
        await asyncio.sleep(1.0)  # a few retries, backing off
        assert coordinator.txns["tx"].state is TxnState.PREPARE_ABORT
        tries = fault.seen
        assert 2 <= tries <= 5, tries
        assert caplog.text.count("transaction markers failing") == 1
        h.fs.faults.remove(fault)
        for _ in range(600):
            if coordinator.txns["tx"].state is TxnState.COMPLETE_ABORT:
                break
            await asyncio.sleep(0.01)
        assert coordinator.txns["tx"].state is TxnState.COMPLETE_ABORT
        assert "transaction markers succeed again" in caplog.text

    run(body)


def test_an_offline_transaction_log_partition_is_not_coordinated_here() -> None:
    async def body(h: Harness) -> None:
        coordinator = h.broker.txn_coordinator
        ids = {coordinator.partition_for(f"tx-{i}"): f"tx-{i}" for i in range(20)}
        lost, kept = ids[0], ids[1]
        init = await coordinator.init_producer_id(lost, 60_000)
        assert init.error is ErrorCode.none
        h.take_offline(TXN_TOPIC, 0)
        answer = await coordinator.init_producer_id(lost, 60_000)
        assert answer.error is ErrorCode.not_coordinator
        end = await coordinator.end_txn(lost, init.producer_id, init.producer_epoch, True)
        assert end is ErrorCode.not_coordinator
        found = await h.find_coordinator(lost, 1)
        assert (found.error_code, found.node_id) == (ErrorCode.coordinator_not_available, -1)
        assert (await h.find_coordinator(kept, 1)).error_code is ErrorCode.none
        assert (await coordinator.init_producer_id(kept, 60_000)).error is ErrorCode.none

    run(body)


def test_a_transaction_log_write_that_fails_answers_a_retriable_coordinator_error() -> None:
    async def body(h: Harness) -> None:
        coordinator = h.broker.txn_coordinator
        init = await coordinator.init_producer_id("tx", 60_000)
        pid, epoch = init.producer_id, init.producer_epoch
        part = coordinator.partition_for("tx")
        fault = h.fs.inject(
            Fault("write", path=f"/{TXN_TOPIC}-{part}/", error=errno.ENOSPC, repeat=True)
        )
        error = await coordinator.add_partitions("tx", pid, epoch, [(TOPIC, 0)])
        assert error is ErrorCode.coordinator_not_available
        assert coordinator.txns["tx"].state is TxnState.EMPTY  # nothing half-applied
        h.fs.faults.remove(fault)
        assert await coordinator.add_partitions("tx", pid, epoch, [(TOPIC, 0)]) is ErrorCode.none

    run(body)


def test_an_offline_offsets_partition_answers_not_coordinator_for_its_groups() -> None:
    async def body(h: Harness) -> None:
        groups = h.broker.group_coordinator
        by_partition = {groups.partition_for(f"g-{i}"): f"g-{i}" for i in range(20)}
        lost, kept = by_partition[0], by_partition[1]
        h.take_offline(OFFSETS_TOPIC, 0)
        found = await h.find_coordinator(lost, 0)
        assert found.error_code is ErrorCode.coordinator_not_available
        assert (await h.find_coordinator(kept, 0)).error_code is ErrorCode.none
        assert groups.owns(kept) and not groups.owns(lost)

    run(body)


def test_on_a_disk_filled_by_someone_else_the_ballast_lets_transactions_finish(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Another process took the last byte: the first write that fails releases the
    ballast, and the coordinator's retried writes finish the transaction in its space."""

    async def body(h: Harness) -> None:
        coordinator = h.broker.txn_coordinator
        ballast = h.broker.disk.ballast_path
        assert len(h.fs.read_file(ballast)) == 64 * 1024
        init = await coordinator.init_producer_id("tx", 60_000)
        pid, epoch = init.producer_id, init.producer_epoch
        assert await coordinator.add_partitions("tx", pid, epoch, [(TOPIC, 0)]) is ErrorCode.none
        h.fs.capacity = h.fs.used()  # full to the last byte
        first = await coordinator.end_txn("tx", pid, epoch, commit=True)
        assert first is ErrorCode.coordinator_not_available  # not written: retried
        assert not h.fs.exists(ballast)
        assert await coordinator.end_txn("tx", pid, epoch, commit=True) is ErrorCode.none
        for _ in range(100):
            if coordinator.txns["tx"].state is TxnState.COMPLETE_COMMIT:
                break
            await asyncio.sleep(0.01)
        assert coordinator.txns["tx"].state is TxnState.COMPLETE_COMMIT
        assert (await h.produce(0))[0].error_code is ErrorCode.kafka_storage_error
        assert "released the 65536-byte ballast" in caplog.text
        # Space freed by the operator: produce resumes and the ballast is made again.
        h.fs.capacity = h.fs.used() + 16 * MIB
        h.clock.advance(RECHECK_MS)
        assert (await h.produce(0))[0].error_code is ErrorCode.none
        assert h.fs.exists(ballast)

    run(body, onceflow_log_dir_ballast_bytes=64 * 1024)
