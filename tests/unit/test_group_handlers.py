"""Group API handlers at their lowest and highest versions, against a stub broker.

Every response is encoded with the real codec and decoded back, proving it serialises at
the request's exact version.
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
from tests.unit.test_group_txn_handlers import txn_topics

from onceflow.broker.handlers.base import RequestContext
from onceflow.broker.handlers.group import (
    HANDLERS,
    OPERATIONS_NOT_REQUESTED,
)
from onceflow.clock import ManualClock
from onceflow.coordinator.group import (
    GroupCoordinator,
    GroupCoordinatorConfig,
    InMemoryOffsetsLog,
)
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import SUPPORTED_VERSIONS, ApiKey
from onceflow.protocol.codec import RequestHeader, build, encode_body, request_type
from onceflow.security.acl import SUPPORTED_OPERATIONS, ResourceType

T = TypeVar("T")
MS = datetime.timedelta(milliseconds=1)
# Without an authorizer a principal may do every operation Kafka supports on a group.
ALL_GROUP_OPERATIONS = sum(1 << op for op in SUPPORTED_OPERATIONS[ResourceType.GROUP])


def run(make_coro: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(make_coro())


class NoShareGroups:
    """The share coordinator of a broker without share groups (ListGroups, DeleteGroups)."""

    def group_ids(self) -> list[str]:
        return []

    def is_share_group(self, _group_id: str) -> bool:
        return False


class StubBroker:
    node_id = 7
    advertised_host = "broker.example"
    advertised_port = 19092
    authorizer = None  # no ACLs: every request is allowed, as on an unsecured broker

    def __init__(self) -> None:
        self.clock = ManualClock()
        self.log = InMemoryOffsetsLog()
        config = GroupCoordinatorConfig(
            offsets_topic_num_partitions=5, group_initial_rebalance_delay_ms=0
        )
        self.group_coordinator = GroupCoordinator(self.log, self.clock, config)
        self.partitions = {("t", 0), ("t", 1)}
        self.share_coordinator = NoShareGroups()

    def has_partition(self, topic: str, partition: int) -> bool:
        return (topic, partition) in self.partitions

    def coordinator_available(self, key_type: int, key: str) -> bool:
        return key_type != 0 or self.group_coordinator.owns(key)

    def coordinator_node(
        self, key_type: int, key: str, listener: str | None = None
    ) -> tuple[int, str, int] | None:
        return self.node_id, self.advertised_host, self.advertised_port

    async def find_coordinator(
        self, key_type: int, key: str, listener: str | None = None
    ) -> tuple[int, str, int] | None:
        return self.coordinator_node(key_type, key, listener)

    async def call(self, api: ApiKey, version: int, /, **fields: Any) -> Any:
        """Build the request of this exact version, run the handler, round-trip the reply."""
        request = build(request_type(api, version), **fields)
        header = RequestHeader(api, version, 1, "client-1")
        ctx = RequestContext(header, cast(Any, self))
        response = await HANDLERS[api](ctx, request)
        raw = encode_body(response)
        decoded, size = entity_reader(type(response))(raw, 0)
        assert size == len(raw)
        assert decoded == response
        return response


def nested(api: ApiKey, version: int, entity_name: str, /, **fields: Any) -> Any:
    """A nested request entity (e.g. JoinGroupRequestProtocol) of this exact version."""
    module = load_payload_module(api, version, EntityType.request)
    return build(getattr(module, entity_name), **fields)


def lowest(key: ApiKey) -> int:
    return SUPPORTED_VERSIONS[key][0]


def highest(key: ApiKey) -> int:
    return SUPPORTED_VERSIONS[key][1]


def test_every_group_api_has_a_handler() -> None:
    assert set(HANDLERS) == {
        ApiKey.FIND_COORDINATOR,
        ApiKey.JOIN_GROUP,
        ApiKey.SYNC_GROUP,
        ApiKey.HEARTBEAT,
        ApiKey.LEAVE_GROUP,
        ApiKey.OFFSET_COMMIT,
        ApiKey.OFFSET_FETCH,
        ApiKey.DESCRIBE_GROUPS,
        ApiKey.LIST_GROUPS,
        ApiKey.TXN_OFFSET_COMMIT,
    }


@pytest.mark.parametrize("version", [0, 2])
def test_find_coordinator(version: int) -> None:
    async def scenario() -> None:
        broker = StubBroker()
        for key_type in (0, 1) if version >= 1 else (0,):
            response = await broker.call(
                ApiKey.FIND_COORDINATOR, version, key="g", key_type=key_type
            )
            assert response.error_code is ErrorCode.none
            assert (response.node_id, response.host, response.port) == (
                7,
                "broker.example",
                19092,
            )
        if version >= 1:
            bad = await broker.call(ApiKey.FIND_COORDINATOR, version, key="g", key_type=9)
            assert bad.error_code is ErrorCode.invalid_request
            assert bad.node_id == -1 and bad.error_message

    run(scenario)


async def join(
    broker: StubBroker,
    version: int,
    member_id: str = "",
    *,
    group: str = "g",
    instance: str | None = None,
) -> Any:
    key = ApiKey.JOIN_GROUP
    protocol = nested(key, version, "JoinGroupRequestProtocol", name="range", metadata=b"sub")
    return await broker.call(
        key,
        version,
        group_id=group,
        session_timeout=10_000 * MS,
        rebalance_timeout=30_000 * MS,
        member_id=member_id,
        group_instance_id=instance,
        protocol_type="consumer",
        protocols=(protocol,),
    )


def assignment(key: ApiKey, version: int, member_id: str, data: bytes) -> Any:
    return nested(key, version, "SyncGroupRequestAssignment", member_id=member_id, assignment=data)


def commit_topics(version: int, offsets: dict[int, int], topic: str = "t") -> tuple[Any, ...]:
    key = ApiKey.OFFSET_COMMIT
    partitions = tuple(
        nested(
            key,
            version,
            "OffsetCommitRequestPartition",
            partition_index=p,
            committed_offset=o,
            committed_leader_epoch=4,
            committed_metadata="md",
        )
        for p, o in offsets.items()
    )
    return (nested(key, version, "OffsetCommitRequestTopic", name=topic, partitions=partitions),)


def fetch_topics(version: int, indexes: tuple[int, ...]) -> tuple[Any, ...]:
    entity = "OffsetFetchRequestTopics" if version >= 8 else "OffsetFetchRequestTopic"
    return (nested(ApiKey.OFFSET_FETCH, version, entity, name="t", partition_indexes=indexes),)


def fetch_groups(version: int, group: str, topics: tuple[Any, ...] | None) -> dict[str, Any]:
    """OffsetFetch's fields for one group: its own from v8 (`groups`), else top level."""
    if version < 8:
        return {"group_id": group, "topics": topics}
    entry = nested(
        ApiKey.OFFSET_FETCH,
        version,
        "OffsetFetchRequestGroup",
        group_id=group,
        member_id=None,
        member_epoch=-1,
        topics=topics,
    )
    return {"groups": (entry,)}


def test_lowest_versions_full_cycle() -> None:
    async def scenario() -> None:
        broker = StubBroker()
        await broker.group_coordinator.load()
        v = lowest(ApiKey.JOIN_GROUP)
        joined = await join(broker, v)
        assert joined.error_code is ErrorCode.none
        assert joined.generation_id == 1 and joined.protocol_name == "range"
        assert joined.member_id.startswith("client-1-")
        assert [m.metadata for m in joined.members] == [b"sub"]
        me = joined.member_id

        v = lowest(ApiKey.SYNC_GROUP)
        synced = await broker.call(
            ApiKey.SYNC_GROUP,
            v,
            group_id="g",
            generation_id=1,
            member_id=me,
            assignments=(assignment(ApiKey.SYNC_GROUP, v, me, b"A"),),
        )
        assert (synced.error_code, synced.assignment) == (ErrorCode.none, b"A")

        hb = await broker.call(
            ApiKey.HEARTBEAT, lowest(ApiKey.HEARTBEAT), group_id="g", generation_id=1, member_id=me
        )
        assert hb.error_code is ErrorCode.none

        v = lowest(ApiKey.OFFSET_COMMIT)
        committed = await broker.call(
            ApiKey.OFFSET_COMMIT,
            v,
            group_id="g",
            generation_id_or_member_epoch=1,
            member_id=me,
            retention_time=-1 * MS,
            topics=commit_topics(v, {0: 10, 5: 50}),
        )
        (topic,) = committed.topics
        assert [(p.partition_index, p.error_code) for p in topic.partitions] == [
            (0, ErrorCode.none),
            (5, ErrorCode.unknown_topic_or_partition),
        ]

        v = lowest(ApiKey.OFFSET_FETCH)
        fetched = await broker.call(
            ApiKey.OFFSET_FETCH, v, group_id="g", topics=fetch_topics(v, (0, 1))
        )
        (topic,) = fetched.topics
        assert [(p.committed_offset, p.metadata) for p in topic.partitions] == [
            (10, "md"),
            (-1, ""),
        ]

        described = await broker.call(
            ApiKey.DESCRIBE_GROUPS, lowest(ApiKey.DESCRIBE_GROUPS), groups=("g", "nope")
        )
        stable, missing = described.groups
        assert (stable.group_state, stable.protocol_type, stable.protocol_data) == (
            "Stable",
            "consumer",
            "range",
        )
        (member,) = stable.members
        assert (member.member_id, member.client_id) == (me, "client-1")
        assert (member.member_metadata, member.member_assignment) == (b"sub", b"A")
        assert (missing.error_code, missing.group_state) == (ErrorCode.none, "Dead")

        listed = await broker.call(ApiKey.LIST_GROUPS, lowest(ApiKey.LIST_GROUPS))
        assert listed.error_code is ErrorCode.none
        assert [(g.group_id, g.protocol_type) for g in listed.groups] == [("g", "consumer")]

        left = await broker.call(
            ApiKey.LEAVE_GROUP, lowest(ApiKey.LEAVE_GROUP), group_id="g", member_id=me
        )
        assert left.error_code is ErrorCode.none
        again = await broker.call(
            ApiKey.LEAVE_GROUP, lowest(ApiKey.LEAVE_GROUP), group_id="g", member_id=me
        )
        assert again.error_code is ErrorCode.unknown_member_id

    run(scenario)


def test_highest_versions_full_cycle() -> None:
    async def scenario() -> None:
        broker = StubBroker()
        await broker.group_coordinator.load()
        v = highest(ApiKey.JOIN_GROUP)
        first = await join(broker, v)
        assert first.error_code is ErrorCode.member_id_required
        joined = await join(broker, v, first.member_id)
        assert joined.error_code is ErrorCode.none and joined.member_id == first.member_id
        me = joined.member_id
        static = await join(broker, v, group="static", instance="host-9")
        assert static.error_code is ErrorCode.none  # static members skip MEMBER_ID_REQUIRED
        assert static.member_id.startswith("host-9-")
        hb = await broker.call(
            ApiKey.HEARTBEAT,
            highest(ApiKey.HEARTBEAT),
            group_id="g",
            generation_id=1,
            member_id=me,
            group_instance_id=None,
        )
        assert hb.error_code in (ErrorCode.none, ErrorCode.rebalance_in_progress)
        assert hb.throttle_time == datetime.timedelta(0)

        v = highest(ApiKey.SYNC_GROUP)
        synced = await broker.call(
            ApiKey.SYNC_GROUP,
            v,
            group_id="g",
            generation_id=1,
            member_id="stranger",
            group_instance_id=None,
            assignments=(),
        )
        assert synced.error_code is ErrorCode.unknown_member_id

        v = highest(ApiKey.OFFSET_COMMIT)
        committed = await broker.call(
            ApiKey.OFFSET_COMMIT,
            v,
            group_id="simple",
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            topics=commit_topics(v, {0: 10, 1: 11}),
        )
        assert {p.error_code for p in committed.topics[0].partitions} == {ErrorCode.none}

        v = highest(ApiKey.OFFSET_FETCH)
        answer = await broker.call(ApiKey.OFFSET_FETCH, v, **fetch_groups(v, "simple", None))
        (everything,) = answer.groups
        assert (everything.group_id, everything.error_code) == ("simple", ErrorCode.none)
        (topic,) = everything.topics
        assert [
            (p.partition_index, p.committed_offset, p.committed_leader_epoch)
            for p in topic.partitions
        ] == [(0, 10, 4), (1, 11, 4)]

        described = await broker.call(
            ApiKey.DESCRIBE_GROUPS,
            highest(ApiKey.DESCRIBE_GROUPS),
            groups=("simple",),
            include_authorized_operations=True,
        )
        (group,) = described.groups
        assert group.group_state == "Empty" and group.authorized_operations == ALL_GROUP_OPERATIONS
        plain = await broker.call(
            ApiKey.DESCRIBE_GROUPS,
            highest(ApiKey.DESCRIBE_GROUPS),
            groups=("simple",),
            include_authorized_operations=False,
        )
        assert plain.groups[0].authorized_operations == OPERATIONS_NOT_REQUESTED

        listed = await broker.call(ApiKey.LIST_GROUPS, highest(ApiKey.LIST_GROUPS))
        assert {g.group_id for g in listed.groups} == {"g", "static", "simple"}

        v = highest(ApiKey.LEAVE_GROUP)
        identity = load_payload_module(ApiKey.LEAVE_GROUP, v, EntityType.request).MemberIdentity
        left = await broker.call(
            ApiKey.LEAVE_GROUP,
            v,
            group_id="g",
            members=(
                identity(member_id=me, group_instance_id=None),
                identity(member_id="ghost", group_instance_id=None),
            ),
        )
        assert left.error_code is ErrorCode.none
        assert [m.error_code for m in left.members] == [
            ErrorCode.none,
            ErrorCode.unknown_member_id,
        ]

    run(scenario)


def test_offset_fetch_group_errors_by_version() -> None:
    async def scenario() -> None:
        broker = StubBroker()  # not loaded: COORDINATOR_LOAD_IN_PROGRESS
        v1 = await broker.call(ApiKey.OFFSET_FETCH, 1, group_id="g", topics=fetch_topics(1, (0,)))
        assert v1.topics[0].partitions[0].error_code is ErrorCode.coordinator_load_in_progress
        v5 = await broker.call(ApiKey.OFFSET_FETCH, 5, group_id="g", topics=fetch_topics(5, (0,)))
        assert v5.error_code is ErrorCode.coordinator_load_in_progress and v5.topics == ()

    run(scenario)


def test_every_version_of_every_group_api_encodes() -> None:
    """A cheap sweep: each handled version builds a response that serialises."""

    async def scenario() -> None:
        broker = StubBroker()
        await broker.group_coordinator.load()
        for key in HANDLERS:
            for version in range(lowest(ApiKey(key)), highest(ApiKey(key)) + 1):
                await _minimal_call(broker, ApiKey(key), version)  # call() round-trips

    run(scenario)


async def _minimal_call(broker: StubBroker, key: ApiKey, version: int) -> Any:
    if key is ApiKey.JOIN_GROUP:
        return await join(broker, version, group=f"sweep-{version}")
    fields: dict[str, Any] = {"group_id": "g", "group_instance_id": None, "assignments": ()}
    if key is ApiKey.FIND_COORDINATOR:
        fields |= {"key": "g", "key_type": 0}
    elif key in (ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT):
        fields |= {"generation_id": 1, "member_id": "x"}
    elif key is ApiKey.LEAVE_GROUP:
        fields |= {"member_id": "x", "members": ()}
    elif key is ApiKey.OFFSET_COMMIT:
        fields |= {
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "retention_time": -1 * MS,
            "topics": commit_topics(version, {0: 1}),
        }
    elif key is ApiKey.OFFSET_FETCH:
        fields |= fetch_groups(version, "g", fetch_topics(version, (0,)))
    elif key is ApiKey.TXN_OFFSET_COMMIT:
        fields |= {
            "transactional_id": "tx",
            "producer_id": 1,
            "producer_epoch": 0,
            "topics": txn_topics(version, {0: 1}),
        }
    elif key is ApiKey.DESCRIBE_GROUPS:
        fields |= {"groups": ("g",), "include_authorized_operations": True}
    return await broker.call(key, version, **fields)
