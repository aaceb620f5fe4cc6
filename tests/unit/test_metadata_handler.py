"""Metadata at every version on a real in-process Broker: what each version carries (leader
epochs, offline replicas, topic ids, authorized operations, v13's error code), topics by id
(v12+) and Kafka's INVALID_REQUEST for ids before v12, stable topic ids, and Kafka's order
and errors for the topics it cannot describe."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from tests.unit.test_handler_authorization import (
    OPEN,
    SECRET,
    TOPIC_DENIED,
    Harness,
    cluster,
    nested,
    run,
    topic,
)

from onceflow.broker.broker import Broker
from onceflow.config import BrokerConfig
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import SUPPORTED_VERSIONS, ApiKey
from onceflow.security.acl import AclOperation

API = ApiKey.METADATA
VERSIONS = range(SUPPORTED_VERSIONS[API][0], SUPPORTED_VERSIONS[API][1] + 1)
NO_OPERATIONS = -(2**31)
INTERNAL = ("__consumer_offsets", "__share_group_state", "__transaction_state")
Key = str | uuid.UUID


def fields(version: int, keys: tuple[Key, ...] | None, **extra: Any) -> dict[str, Any]:
    """A request for topics by name (str) or id (UUID); None asks for every topic."""
    topics = None
    if keys is not None:
        topics = tuple(
            nested(API, version, "MetadataRequestTopic", name=k, topic_id=None)
            if isinstance(k, str)
            else nested(API, version, "MetadataRequestTopic", name=None, topic_id=k)
            for k in keys
        )
    return {
        "topics": topics,
        "allow_auto_topic_creation": False,
        "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False,
    } | extra


def answered(response: Any) -> list[tuple[Any, ...]]:
    return [(t.name, t.error_code, len(t.partitions)) for t in response.topics]


def test_kafka_4_1s_range() -> None:
    assert SUPPORTED_VERSIONS[API] == (0, 13)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_version_describes_a_topic(tmp_path: Path, version: int) -> None:
    async def body(h: Harness) -> None:
        h.use(None)
        response = await h.call(API, version, **fields(version, (OPEN,)))
        node = h.broker.node_id
        assert [(b.node_id, b.port > 0) for b in response.brokers] == [(node, True)]
        (described,) = response.topics
        assert (described.name, described.error_code) == (OPEN, ErrorCode.none)
        assert [p.partition_index for p in described.partitions] == [0, 1]
        for p in described.partitions:
            assert (p.leader_id, p.replica_nodes, p.isr_nodes) == (node, (node,), (node,))
            if version >= 7:
                assert p.leader_epoch == 0
            if version >= 5:
                assert p.offline_replicas == ()
        if version >= 1:
            assert response.controller_id == node and described.is_internal is False
        if version >= 2:
            assert response.cluster_id == h.broker.cluster_id
        if version >= 10:
            assert described.topic_id == h.broker.topic_id(OPEN) is not None
        if version >= 13:
            assert response.error_code == ErrorCode.none

    run(tmp_path, body)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_topic_internal_ones_marked(tmp_path: Path, version: int) -> None:
    async def body(h: Harness) -> None:
        h.use(None)
        keys = () if version == 0 else None  # v0's "every topic" is the empty list
        response = await h.call(API, version, **fields(version, keys))
        names = [t.name for t in response.topics]
        assert names == [OPEN, SECRET, *INTERNAL]
        if version >= 1:
            assert [t.is_internal for t in response.topics] == [False, False] + [True] * len(
                INTERNAL
            )
        if version >= 10:
            ids = [t.topic_id for t in response.topics]
            assert None not in ids and len(set(ids)) == 2 + len(INTERNAL)
        if version >= 1:  # an empty list asks for no topic at all
            none = await h.call(API, version, **fields(version, ()))
            assert none.topics == ()

    run(tmp_path, body)


@pytest.mark.parametrize("version", [1, 4, 9, 12, 13])
def test_missing_topics_without_auto_creation(tmp_path: Path, version: int) -> None:
    async def body(h: Harness) -> None:
        h.use(None)
        response = await h.call(API, version, **fields(version, ("ghost", "bad name", OPEN)))
        by_name = {t.name: t for t in response.topics}
        assert by_name["ghost"].error_code == ErrorCode.unknown_topic_or_partition
        assert by_name["bad name"].error_code == ErrorCode.invalid_topic_exception
        if version >= 10:
            assert by_name["ghost"].topic_id is None
        assert h.broker.topic_partition_count("ghost") is None

    # v1-3 have no allow_auto_topic_creation (it is implied): turn it off on the broker.
    run(tmp_path, body, auto_create_topics_enable=False)


@pytest.mark.parametrize("version", [1, 4, 12, 13])
def test_auto_creation(tmp_path: Path, version: int) -> None:
    async def body(h: Harness) -> None:
        h.use(None)
        asked = fields(version, ("fresh", "bad name"), allow_auto_topic_creation=True)
        response = await h.call(API, version, **asked)
        by_name = {t.name: t for t in response.topics}
        assert by_name["fresh"].error_code == ErrorCode.none
        assert len(by_name["fresh"].partitions) == 1
        assert by_name["bad name"].error_code == ErrorCode.invalid_topic_exception
        if version >= 10:
            assert by_name["fresh"].topic_id == h.broker.topic_id("fresh") is not None

    run(tmp_path, body)


@pytest.mark.parametrize("version", [10, 11])
def test_ids_and_null_names_before_v12_are_invalid_request(tmp_path: Path, version: int) -> None:
    async def body(h: Harness) -> None:
        h.use(None)
        opened = h.broker.topic_id(OPEN)
        assert opened is not None
        for keys in ((OPEN, opened), (opened,)):
            response = await h.call(API, version, **fields(version, keys))
            assert [(t.name, t.topic_id, t.error_code) for t in response.topics] == [
                (k, None, ErrorCode.invalid_request)
                if isinstance(k, str)
                else ("", k, ErrorCode.invalid_request)
                for k in keys
            ]
            assert (response.brokers, response.cluster_id, response.controller_id) == (
                (),
                None,
                -1,
            )

    run(tmp_path, body)


@pytest.mark.parametrize("version", [12, 13])
def test_topics_by_id(tmp_path: Path, version: int) -> None:
    async def body(h: Harness) -> None:
        h.acl.grant(topic(AclOperation.DESCRIBE))
        opened, secret = h.broker.topic_id(OPEN), h.broker.topic_id(SECRET)
        assert opened is not None and secret is not None and opened != secret
        ghost = uuid.uuid4()
        # With any id, names are ignored (Kafka's useTopicId); each id is answered once.
        keys: tuple[Key, ...] = (secret, "ignored", opened, ghost, opened)
        response = await h.call(API, version, **fields(version, keys))
        assert [(t.name, t.topic_id, t.error_code, len(t.partitions)) for t in response.topics] == [
            (None, ghost, ErrorCode.unknown_topic_id, 0),
            (OPEN, opened, ErrorCode.none, 2),
            (None, secret, TOPIC_DENIED, 0),  # the id is no secret; the name is not given
        ]
        # Neither a name nor an id.
        empty = await h.call(
            API,
            version,
            **fields(version, (OPEN,))
            | {"topics": (nested(API, version, "MetadataRequestTopic", name=None, topic_id=None),)},
        )
        assert [(t.name, t.error_code) for t in empty.topics] == [("", ErrorCode.invalid_request)]

    run(tmp_path, body)


@pytest.mark.parametrize("version", [8, 10, 11, 13])
def test_authorized_operations_and_kafkas_order(tmp_path: Path, version: int) -> None:
    async def body(h: Harness) -> None:
        h.acl.grant(topic(AclOperation.DESCRIBE), topic(AclOperation.DESCRIBE, "fresh"))
        h.acl.grant(cluster(AclOperation.DESCRIBE))
        asked = fields(
            version,
            (SECRET, "fresh", OPEN, OPEN),
            allow_auto_topic_creation=True,
            include_cluster_authorized_operations=True,
            include_topic_authorized_operations=True,
        )
        response = await h.call(API, version, **asked)
        # Described first, then refused CREATE, then refused DESCRIBE; each name once.
        assert answered(response) == [
            (OPEN, 0, 2),
            ("fresh", TOPIC_DENIED, 0),
            (SECRET, TOPIC_DENIED, 0),
        ]
        operations = [t.topic_authorized_operations for t in response.topics]
        assert operations == [1 << AclOperation.DESCRIBE, NO_OPERATIONS, NO_OPERATIONS]
        if version <= 10:
            assert response.cluster_authorized_operations == 1 << AclOperation.DESCRIBE
        else:
            assert not hasattr(response, "cluster_authorized_operations")
        assert h.broker.topic_partition_count("fresh") is None

    run(tmp_path, body)


@pytest.mark.parametrize("version", [5, 13])
def test_an_offline_log_is_an_offline_replica(tmp_path: Path, version: int) -> None:
    async def body(h: Harness) -> None:
        h.use(None)
        plog = h.broker.logs.get(OPEN, 1)
        assert plog is not None
        plog.take_offline("test")
        response = await h.call(API, version, **fields(version, (OPEN,)))
        first, second = response.topics[0].partitions
        node = h.broker.node_id
        assert (first.error_code, first.leader_id, first.offline_replicas) == (0, node, ())
        assert (second.error_code, second.leader_id, second.offline_replicas) == (
            ErrorCode.leader_not_available,
            -1,
            (node,),
        )

    run(tmp_path, body)


def test_topic_ids_survive_restarts_and_change_with_recreation(tmp_path: Path) -> None:
    async def main() -> None:
        config = BrokerConfig(log_dirs=(str(tmp_path / "data"),))
        broker = Broker(config)
        await broker.start()
        try:
            await broker.create_topic("kept", 1)
            await broker.create_topic("again", 1)
            kept, again = broker.topic_id("kept"), broker.topic_id("again")
            internal = broker.topic_id("__consumer_offsets")
        finally:
            await broker.stop()
        broker = Broker(config)
        await broker.start()
        try:
            assert broker.topic_id("kept") == kept is not None
            assert broker.topic_id("__consumer_offsets") == internal is not None
            await broker.delete_topic("again")
            assert broker.topic_id("again") is None
            await broker.create_topic("again", 1)
            assert broker.topic_id("again") not in (None, again)
            assert broker.topics_by_id()[kept] == "kept"
        finally:
            await broker.stop()

    asyncio.run(main())
