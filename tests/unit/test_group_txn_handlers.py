"""TxnOffsetCommit (v0, v3) and OffsetFetch (v6, v7) handlers, encoded at their exact versions.

A stub broker stands in for the real one; every response is encoded with the real codec and
decoded back. The transaction's marker is simulated the way the broker reports it: a marker
in the in-memory log, then `complete_txn`.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar, cast

import pytest
from kio.index import load_payload_module
from kio.serial import entity_reader
from kio.static.constants import EntityType

from onceflow.broker.handlers.base import RequestContext
from onceflow.broker.handlers.group import HANDLERS
from onceflow.clock import ManualClock
from onceflow.coordinator.group import (
    GroupCoordinator,
    GroupCoordinatorConfig,
    InMemoryOffsetsLog,
    OffsetCommitEntry,
    TopicPartition,
)
from onceflow.errors import ErrorCode, KafkaError
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import RequestHeader, build, encode_body, request_type

T = TypeVar("T")
MS = datetime.timedelta(milliseconds=1)
PID = 77
EPOCH = 2


def run(make_coro: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(make_coro())


class StubBroker:
    node_id = 1
    advertised_host = "localhost"
    advertised_port = 9092
    authorizer = None  # no ACLs: every request is allowed, as on an unsecured broker

    def __init__(self) -> None:
        self.clock = ManualClock()
        self.log = InMemoryOffsetsLog()
        config = GroupCoordinatorConfig(
            offsets_topic_num_partitions=5, group_initial_rebalance_delay_ms=0
        )
        self.group_coordinator = GroupCoordinator(self.log, self.clock, config)
        self.partitions = {("t", 0), ("t", 1)}

    def has_partition(self, topic: str, partition: int) -> bool:
        return (topic, partition) in self.partitions

    async def call(self, api: ApiKey, version: int, /, **fields: Any) -> Any:
        request = build(request_type(api, version), **fields)
        ctx = RequestContext(RequestHeader(api, version, 1, "client-1"), cast(Any, self))
        response = await HANDLERS[api](ctx, request)
        raw = encode_body(response)
        decoded, size = entity_reader(type(response))(raw, 0)
        assert size == len(raw)
        assert decoded == response
        return response

    def end_txn(self, group: str, *, commit: bool) -> None:
        partition = self.group_coordinator.partition_for(group)
        self.log.write_marker(partition, PID, commit=commit, producer_epoch=EPOCH)
        self.group_coordinator.complete_txn(PID, commit, partition)


def nested(api: ApiKey, version: int, entity_name: str, /, **fields: Any) -> Any:
    module = load_payload_module(api, version, EntityType.request)
    return build(getattr(module, entity_name), **fields)


def txn_topics(version: int, offsets: dict[int, int]) -> tuple[Any, ...]:
    key = ApiKey.TXN_OFFSET_COMMIT
    partitions = tuple(
        nested(
            key,
            version,
            "TxnOffsetCommitRequestPartition",
            partition_index=p,
            committed_offset=o,
            committed_leader_epoch=6,
            committed_metadata="md",
        )
        for p, o in offsets.items()
    )
    return (nested(key, version, "TxnOffsetCommitRequestTopic", name="t", partitions=partitions),)


async def txn_commit(broker: StubBroker, version: int, offsets: dict[int, int], **kw: Any) -> Any:
    return await broker.call(
        ApiKey.TXN_OFFSET_COMMIT,
        version,
        transactional_id="tx",
        group_id="g",
        producer_id=PID,
        producer_epoch=EPOCH,
        topics=txn_topics(version, offsets),
        **kw,
    )


def codes(response: Any) -> list[tuple[int, ErrorCode]]:
    (topic,) = response.topics
    return [(p.partition_index, p.error_code) for p in topic.partitions]


async def fetch(broker: StubBroker, version: int, **kw: Any) -> Any:
    topic = nested(
        ApiKey.OFFSET_FETCH, version, "OffsetFetchRequestTopic", name="t", partition_indexes=(0, 1)
    )
    return await broker.call(ApiKey.OFFSET_FETCH, version, group_id="g", topics=(topic,), **kw)


def partitions(response: Any) -> list[tuple[int, int, int, str | None, ErrorCode]]:
    (topic,) = response.topics
    return [
        (p.partition_index, p.committed_offset, p.committed_leader_epoch, p.metadata, p.error_code)
        for p in topic.partitions
    ]


def test_txn_offset_commit_is_registered() -> None:
    assert ApiKey.TXN_OFFSET_COMMIT in HANDLERS


def test_txn_offset_commit_v0_then_commit_marker() -> None:
    async def scenario() -> None:
        broker = StubBroker()
        await broker.group_coordinator.load()
        response = await txn_commit(broker, 0, {0: 10, 9: 90})
        assert response.throttle_time == datetime.timedelta(0)
        assert codes(response) == [(0, ErrorCode.none), (9, ErrorCode.unknown_topic_or_partition)]
        partition = broker.group_coordinator.partition_for("g")
        assert broker.log.appends == [(partition, "tx")]
        assert partitions(await fetch(broker, 5)) == [
            (0, -1, -1, "", ErrorCode.none),
            (1, -1, -1, "", ErrorCode.none),
        ]
        broker.end_txn("g", commit=True)
        # v0 has no leader epoch: the stored one is -1.
        assert partitions(await fetch(broker, 5))[0] == (0, 10, -1, "md", ErrorCode.none)

    run(scenario)


def test_txn_offset_commit_v3_checks_the_member() -> None:
    async def scenario() -> None:
        broker = StubBroker()
        coord = broker.group_coordinator
        await coord.load()
        joined = await coord.join_group(
            "g",
            "",
            protocol_type="consumer",
            protocols=[("range", b"")],
            session_timeout_ms=10_000,
            rebalance_timeout_ms=10_000,
        )
        await coord.sync_group("g", joined.generation_id, joined.member_id, assignments={})
        member = {"member_id": joined.member_id, "group_instance_id": None}
        stale = await txn_commit(
            broker, 3, {0: 10}, generation_id=joined.generation_id + 1, **member
        )
        assert codes(stale) == [(0, ErrorCode.illegal_generation)]
        unknown = await txn_commit(
            broker, 3, {0: 10}, generation_id=joined.generation_id, member_id="who"
        )
        assert codes(unknown) == [(0, ErrorCode.unknown_member_id)]
        ok = await txn_commit(
            broker, 3, {0: 10, 1: 11}, generation_id=joined.generation_id, **member
        )
        assert codes(ok) == [(0, ErrorCode.none), (1, ErrorCode.none)]
        broker.end_txn("g", commit=True)
        assert partitions(await fetch(broker, 7)) == [
            (0, 10, 6, "md", ErrorCode.none),
            (1, 11, 6, "md", ErrorCode.none),
        ]

    run(scenario)


def test_txn_offset_commit_reports_a_fenced_producer_per_partition() -> None:
    async def scenario() -> None:
        broker = StubBroker()
        await broker.group_coordinator.load()
        broker.log.fail_with = KafkaError(ErrorCode.invalid_producer_epoch)
        response = await txn_commit(broker, 3, {0: 1, 1: 2})
        assert codes(response) == [
            (0, ErrorCode.invalid_producer_epoch),
            (1, ErrorCode.invalid_producer_epoch),
        ]

    run(scenario)


@pytest.mark.parametrize("version", [6, 7])
def test_offset_fetch_flexible_versions_and_require_stable(version: int) -> None:
    async def scenario() -> None:
        broker = StubBroker()
        coord = broker.group_coordinator
        await coord.load()
        await txn_commit(broker, 3, {0: 10})
        plain = await coord.commit_offsets(
            "g", "", -1, {TopicPartition("t", 1): OffsetCommitEntry(5)}
        )
        assert set(plain.values()) == {ErrorCode.none}
        relaxed = await fetch(broker, version)
        assert relaxed.error_code is ErrorCode.none
        assert partitions(relaxed) == [
            (0, -1, -1, "", ErrorCode.none),
            (1, 5, -1, "", ErrorCode.none),
        ]
        if version >= 7:
            stable = await fetch(broker, version, require_stable=True)
            # Kafka puts UNSTABLE_OFFSET_COMMIT on the partition; the top level stays NONE.
            assert stable.error_code is ErrorCode.none
            assert partitions(stable) == [
                (0, -1, -1, "", ErrorCode.unstable_offset_commit),
                (1, 5, -1, "", ErrorCode.none),
            ]
        broker.end_txn("g", commit=False)
        if version >= 7:
            settled = await fetch(broker, version, require_stable=True)
            assert partitions(settled)[0] == (0, -1, -1, "", ErrorCode.none)
        everything = await broker.call(ApiKey.OFFSET_FETCH, version, group_id="g", topics=None)
        assert partitions(everything) == [(1, 5, -1, "", ErrorCode.none)]

    run(scenario)


def test_offset_fetch_v7_before_load_is_a_group_level_error() -> None:
    async def scenario() -> None:
        broker = StubBroker()
        response = await fetch(broker, 7, require_stable=True)
        assert response.error_code is ErrorCode.coordinator_load_in_progress
        assert response.topics == ()

    run(scenario)
