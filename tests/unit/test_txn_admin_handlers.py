"""KIP-664 handlers (DescribeProducers, DescribeTransactions, ListTransactions,
WriteTxnMarkers) against a real in-process Broker over a temporary directory.

Every response is encoded with the real codec and decoded back at the request's version, so
each test also proves the response serialises exactly as a client will read it.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import pytest
from kio.index import load_payload_module
from kio.serial import entity_reader
from kio.static.constants import EntityType

from onceflow.broker.broker import Broker
from onceflow.broker.handlers.base import RequestContext
from onceflow.broker.handlers.txn_admin import HANDLERS, WRITE_TXN_MARKERS
from onceflow.client.wire import lenient_schema
from onceflow.clock import ManualClock
from onceflow.config import BrokerConfig
from onceflow.coordinator.transaction.state import TxnState
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import RequestHeader, build, encode_body, request_type
from onceflow.records.batch import validate_produced_batches
from onceflow.records.builder import build_batch
from onceflow.storage.partition_log import PartitionLog

TOPIC = "orders"
HANGING_PID = 900_000
MINUTE_MS = 60_000


class Harness:
    def __init__(self, broker: Broker, clock: ManualClock) -> None:
        self.broker = broker
        self.clock = clock

    async def call(self, api: int, version: int, /, **fields: Any) -> Any:
        request = build(request_type(api, version), **fields)
        ctx = RequestContext(RequestHeader(api, version, 1, "test"), self.broker)
        response = await HANDLERS[api](ctx, request)
        raw = encode_body(response)
        # Read back as the CLI does: kio cannot read the -1 ("none") timestamps Kafka sends,
        # so datetime fields come back as int64 milliseconds.
        decoded, size = entity_reader(lenient_schema(type(response)))(raw, 0)
        assert size == len(raw)
        if lenient_schema(type(response)) is type(response):
            assert decoded == response
        return decoded

    def plog(self, partition: int = 0, topic: str = TOPIC) -> PartitionLog:
        plog = self.broker.logs.get(topic, partition)
        assert plog is not None
        return plog

    def append(
        self,
        partition: int,
        producer_id: int,
        *,
        epoch: int = 0,
        sequence: int = 0,
        transactional: bool = False,
        count: int = 1,
        topic: str = TOPIC,
    ) -> int:
        """Append a producer's batch straight to the log (no coordinator check, as with
        transaction.partition.verification.enable=false); return its first offset."""
        plog = self.plog(partition, topic)
        batch = build_batch(
            [(b"k", b"v", ())] * count,
            timestamp_ms=self.clock.now_ms(),
            producer_id=producer_id,
            producer_epoch=epoch,
            base_sequence=sequence,
            transactional=transactional,
        )
        result = plog.append_batches(batch, validate_produced_batches(batch, 1 << 20))
        self.broker.writes.appended(plog)
        return result.first_offset

    async def open_txn(self, txn_id: str, *partitions: int) -> tuple[int, int]:
        """A transaction the coordinator knows, Ongoing with the given partitions."""
        coordinator = self.broker.txn_coordinator
        init = await coordinator.init_producer_id(txn_id, 60_000)
        assert init.error == ErrorCode.none
        error = await coordinator.add_partitions(
            txn_id, init.producer_id, init.producer_epoch, [(TOPIC, p) for p in partitions]
        )
        assert error == ErrorCode.none
        return init.producer_id, init.producer_epoch


def run(tmp_path: Path, body: Callable[[Harness], Awaitable[None]]) -> None:
    async def main() -> None:
        clock = ManualClock()
        config = BrokerConfig(
            log_dirs=(str(tmp_path / "data"),),
            offsets_topic_num_partitions=2,
            transaction_state_log_num_partitions=2,
        )
        broker = Broker(config, clock=clock)
        await broker.start()
        try:
            await broker.create_topic(TOPIC, 2)
            await body(Harness(broker, clock))
        finally:
            await broker.stop()

    asyncio.run(main())


def request_nested(api: int, version: int, name: str, /, **fields: Any) -> Any:
    module = load_payload_module(api, version, EntityType.request)
    return build(getattr(module, name), **fields)


def describe_producers_request(partitions: dict[str, tuple[int, ...]]) -> dict[str, Any]:
    return {
        "topics": tuple(
            request_nested(
                ApiKey.DESCRIBE_PRODUCERS, 0, "TopicRequest", name=t, partition_indexes=parts
            )
            for t, parts in partitions.items()
        )
    }


def marker_request(
    version: int,
    producer_id: int,
    epoch: int,
    coordinator_epoch: int,
    partitions: dict[str, tuple[int, ...]],
    commit: bool = False,
) -> dict[str, Any]:
    topics = tuple(
        request_nested(
            WRITE_TXN_MARKERS,
            version,
            "WritableTxnMarkerTopic",
            name=t,
            partition_indexes=parts,
        )
        for t, parts in partitions.items()
    )
    marker = request_nested(
        WRITE_TXN_MARKERS,
        version,
        "WritableTxnMarker",
        producer_id=producer_id,
        producer_epoch=epoch,
        transaction_result=commit,
        topics=topics,
        coordinator_epoch=coordinator_epoch,
        transaction_version=0,
    )
    return {"markers": (marker,)}


def marker_errors(response: Any) -> dict[tuple[str, int], ErrorCode]:
    return {
        (t.name, p.partition_index): p.error_code
        for m in response.markers
        for t in m.topics
        for p in t.partitions
    }


# ---- DescribeProducers ---------------------------------------------------------------------


def test_describe_producers_shows_open_transactions_and_plain_producers(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        h.append(0, 5, count=3)  # idempotent: sequences 0-2
        h.append(0, 5, sequence=3, count=2)
        first = h.append(0, HANGING_PID, transactional=True, count=2)
        response = await h.call(
            ApiKey.DESCRIBE_PRODUCERS, 0, **describe_producers_request({TOPIC: (0, 1)})
        )
        (topic,) = response.topics
        p0, p1 = topic.partitions
        assert (p0.partition_index, p0.error_code) == (0, ErrorCode.none)
        by_id = {p.producer_id: p for p in p0.active_producers}
        assert set(by_id) == {5, HANGING_PID}
        assert by_id[5].last_sequence == 4
        assert by_id[5].current_txn_start_offset == -1
        assert by_id[5].last_timestamp == h.clock.now_ms()
        hanging = by_id[HANGING_PID]
        assert hanging.current_txn_start_offset == first == 5
        assert (hanging.producer_epoch, hanging.last_sequence) == (0, 1)
        assert hanging.coordinator_epoch == -1  # no marker has ever reached it
        assert (p1.partition_index, p1.error_code, p1.active_producers) == (1, ErrorCode.none, ())

    run(tmp_path, body)


def test_describe_producers_unknown_partition_and_topic(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        response = await h.call(
            ApiKey.DESCRIBE_PRODUCERS,
            0,
            **describe_producers_request({TOPIC: (7,), "missing": (0,)}),
        )
        errors = {
            (t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions
        }
        assert errors == {
            (TOPIC, 7): ErrorCode.unknown_topic_or_partition,
            ("missing", 0): ErrorCode.unknown_topic_or_partition,
        }

    run(tmp_path, body)


# ---- DescribeTransactions ------------------------------------------------------------------


def test_describe_transactions_ongoing_unknown_and_empty_id(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        start = h.clock.now_ms()
        pid, epoch = await h.open_txn("txn-a", 1, 0)
        await h.broker.txn_coordinator.init_producer_id("idle", 30_000)
        h.clock.advance(1500)
        response = await h.call(
            ApiKey.DESCRIBE_TRANSACTIONS, 0, transactional_ids=("txn-a", "nope", "", "idle")
        )
        found, unknown, empty, idle = response.transaction_states
        assert found.error_code == ErrorCode.none
        assert found.transaction_state == "Ongoing"
        assert (found.producer_id, found.producer_epoch) == (pid, epoch)
        assert found.transaction_timeout == datetime.timedelta(minutes=1)
        assert found.transaction_start_time == start
        assert [(t.topic, t.partitions) for t in found.topics] == [(TOPIC, (0, 1))]
        assert unknown.transactional_id == "nope"
        assert unknown.error_code == ErrorCode.transactional_id_not_found
        assert unknown.transaction_start_time == -1
        assert empty.error_code == ErrorCode.invalid_request
        assert (idle.transaction_state, idle.transaction_start_time, idle.topics) == (
            "Empty",
            -1,
            (),
        )

    run(tmp_path, body)


def test_describe_transactions_after_commit_and_when_dead(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        pid, epoch = await h.open_txn("txn-b", 0)
        error = await h.broker.txn_coordinator.end_txn("txn-b", pid, epoch, True)
        assert error == ErrorCode.none
        for _ in range(100):  # the markers and CompleteCommit follow the answer
            if h.broker.txn_coordinator.txns["txn-b"].state == TxnState.COMPLETE_COMMIT:
                break
            await asyncio.sleep(0.01)
        response = await h.call(ApiKey.DESCRIBE_TRANSACTIONS, 0, transactional_ids=("txn-b",))
        assert response.transaction_states[0].transaction_state == "CompleteCommit"
        h.broker.txn_coordinator.txns["txn-b"].state = TxnState.DEAD  # being expired
        response = await h.call(ApiKey.DESCRIBE_TRANSACTIONS, 0, transactional_ids=("txn-b",))
        assert response.transaction_states[0].error_code == ErrorCode.transactional_id_not_found

    run(tmp_path, body)


# ---- ListTransactions ----------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2])
def test_list_transactions_filters(tmp_path: Path, version: int) -> None:
    async def body(h: Harness) -> None:
        pid_a, _ = await h.open_txn("a", 0)
        pid_b, _ = await h.open_txn("b", 1)
        init = await h.broker.txn_coordinator.init_producer_id("idle", 60_000)  # Empty

        async def listed(**filters: Any) -> list[tuple[str, int, str]]:
            response = await h.call(ApiKey.LIST_TRANSACTIONS, version, **filters)
            assert response.error_code == ErrorCode.none
            return [
                (t.transactional_id, t.producer_id, t.transaction_state)
                for t in response.transaction_states
            ]

        everything = await listed(state_filters=(), producer_id_filters=())
        assert everything == [
            ("a", pid_a, "Ongoing"),
            ("b", pid_b, "Ongoing"),
            ("idle", init.producer_id, "Empty"),
        ]
        assert await listed(state_filters=("Empty",), producer_id_filters=()) == [
            ("idle", init.producer_id, "Empty")
        ]
        assert await listed(state_filters=(), producer_id_filters=(pid_b, 12345)) == [
            ("b", pid_b, "Ongoing")
        ]
        response = await h.call(
            ApiKey.LIST_TRANSACTIONS,
            version,
            state_filters=("Ongoing", "Bogus"),
            producer_id_filters=(),
        )
        assert response.unknown_state_filters == ("Bogus",)
        assert [t.transactional_id for t in response.transaction_states] == ["a", "b"]

    run(tmp_path, body)


def test_list_transactions_duration_filter_counts_running_transactions_only(
    tmp_path: Path,
) -> None:
    async def body(h: Harness) -> None:
        await h.open_txn("old", 0)
        await h.broker.txn_coordinator.init_producer_id("idle", 60_000)
        h.clock.advance(10 * MINUTE_MS)
        await h.open_txn("young", 1)
        h.clock.advance(MINUTE_MS)

        async def longer_than(ms: int) -> list[str]:
            response = await h.call(
                ApiKey.LIST_TRANSACTIONS,
                1,
                state_filters=(),
                producer_id_filters=(),
                duration_filter=ms,
            )
            return [t.transactional_id for t in response.transaction_states]

        assert await longer_than(-1) == ["idle", "old", "young"]
        assert await longer_than(0) == ["old", "young"]  # "idle" runs nothing
        assert await longer_than(5 * MINUTE_MS) == ["old"]
        assert await longer_than(11 * MINUTE_MS) == []  # 11 min exactly is not longer

    run(tmp_path, body)


def test_list_transactions_pattern_filter_matches_whole_ids_with_the_other_filters(
    tmp_path: Path,
) -> None:
    async def body(h: Harness) -> None:
        pid, _ = await h.open_txn("orders-1", 0)
        await h.open_txn("orders-2", 1)
        await h.broker.txn_coordinator.init_producer_id("orders-idle", 60_000)
        await h.broker.txn_coordinator.init_producer_id("payments-1", 60_000)

        async def listed(pattern: str | None, **filters: Any) -> list[str]:
            response = await h.call(
                ApiKey.LIST_TRANSACTIONS,
                2,
                state_filters=filters.get("states", ()),
                producer_id_filters=filters.get("pids", ()),
                transactional_id_pattern=pattern,
            )
            assert response.error_code == ErrorCode.none
            return [t.transactional_id for t in response.transaction_states]

        everything = ["orders-1", "orders-2", "orders-idle", "payments-1"]
        assert await listed(None) == everything
        assert await listed("") == everything  # empty: no filter
        assert await listed("orders-.*") == ["orders-1", "orders-2", "orders-idle"]
        assert await listed("orders-\\d") == ["orders-1", "orders-2"]
        assert await listed("orders") == []  # the whole id must match, as Java's matches()
        assert await listed(".*-1") == ["orders-1", "payments-1"]
        assert await listed("orders-.*", states=("Empty",)) == ["orders-idle"]
        assert await listed(".*-1", pids=(pid,)) == ["orders-1"]

    run(tmp_path, body)


@pytest.mark.parametrize("pattern", ["(unclosed", "(a)\\1", "(?=a)a", "a{1001}"])
def test_list_transactions_refuses_a_pattern_re2_refuses(tmp_path: Path, pattern: str) -> None:
    async def body(h: Harness) -> None:
        await h.open_txn("orders-1", 0)
        response = await h.call(
            ApiKey.LIST_TRANSACTIONS,
            2,
            state_filters=(),
            producer_id_filters=(),
            transactional_id_pattern=pattern,
        )
        assert response.error_code == ErrorCode.invalid_regular_expression
        assert response.transaction_states == ()

    run(tmp_path, body)


# ---- WriteTxnMarkers -----------------------------------------------------------------------


@pytest.mark.parametrize("version", [1, 2])
def test_abort_marker_ends_a_hanging_transaction(tmp_path: Path, version: int) -> None:
    async def body(h: Harness) -> None:
        plog = h.plog(0)
        first = h.append(0, HANGING_PID, transactional=True, count=2)
        h.append(0, 5, count=3)
        await h.broker.flusher.durable(plog, plog.log_end_offset - 1)
        assert plog.last_stable_offset == first == 0
        response = await h.call(
            WRITE_TXN_MARKERS,
            version,
            **marker_request(version, HANGING_PID, 0, -1, {TOPIC: (0,)}),
        )
        assert response.markers[0].producer_id == HANGING_PID
        assert marker_errors(response) == {(TOPIC, 0): ErrorCode.none}
        # Durable before the answer: the marker is below the flushed offset already.
        assert plog.flushed_offset == plog.log_end_offset == 6
        assert plog.last_stable_offset == plog.high_watermark == 6
        assert plog.aborted_between(0, 6) == [(HANGING_PID, 0)]
        entry = plog.producer_state.producers[HANGING_PID]
        assert entry.txn_first_offset == -1

    run(tmp_path, body)


def test_markers_answer_per_partition_errors(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        h.append(0, HANGING_PID, epoch=3, transactional=True)
        h.append(1, HANGING_PID, epoch=0, transactional=True)
        # A marker from coordinator epoch 5 sets the partition's coordinator epoch.
        response = await h.call(
            WRITE_TXN_MARKERS, 1, **marker_request(1, HANGING_PID, 0, 5, {TOPIC: (1,)})
        )
        assert marker_errors(response) == {(TOPIC, 1): ErrorCode.none}
        h.append(1, HANGING_PID, epoch=0, sequence=1, transactional=True)

        response = await h.call(
            WRITE_TXN_MARKERS,
            1,
            **marker_request(1, HANGING_PID, 2, 4, {TOPIC: (0, 1, 9), "missing": (0,)}),
        )
        assert marker_errors(response) == {
            (TOPIC, 0): ErrorCode.invalid_producer_epoch,  # epoch 2 < 3
            (TOPIC, 1): ErrorCode.transaction_coordinator_fenced,  # coordinator epoch 4 < 5
            (TOPIC, 9): ErrorCode.unknown_topic_or_partition,
            ("missing", 0): ErrorCode.unknown_topic_or_partition,
        }
        assert h.plog(0).last_stable_offset == 0  # nothing was ended
        assert h.plog(1).producer_state.producers[HANGING_PID].txn_first_offset == 2

    run(tmp_path, body)


def test_markers_on_consumer_offsets_settle_pending_offsets(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        settled: list[tuple[int, bool, int]] = []

        def record(producer_id: int, commit: bool, partition: int) -> None:
            settled.append((producer_id, commit, partition))

        cast(Any, h.broker.group_coordinator).complete_txn = record
        response = await h.call(
            WRITE_TXN_MARKERS,
            2,
            **marker_request(
                2, HANGING_PID, 0, 0, {TOPIC: (0,), "__consumer_offsets": (1,)}, commit=True
            ),
        )
        assert set(marker_errors(response).values()) == {ErrorCode.none}
        assert settled == [(HANGING_PID, True, 1)]

    run(tmp_path, body)
