"""DescribeTopicPartitions (KIP-966) on a real in-process Broker: pages of partitions with a
cursor, Kafka's errors for bad cursors and unknown or illegal topics, and DESCRIBE on each
topic (the fake authorizer of test_handler_authorization)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from tests.unit.test_handler_authorization import (
    OPEN,
    SECRET,
    TOPIC_DENIED,
    Harness,
    nested,
    run,
    topic,
)

from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.security.acl import AclOperation, ResourceType

API = ApiKey.DESCRIBE_TOPIC_PARTITIONS
NO_OPERATIONS = -(2**31)


def fields(*names: str, limit: int = 2000, cursor: tuple[str, int] | None = None) -> dict[str, Any]:
    return {
        "topics": tuple(nested(API, 0, "TopicRequest", name=n) for n in names),
        "response_partition_limit": limit,
        "cursor": None
        if cursor is None
        else nested(API, 0, "Cursor", topic_name=cursor[0], partition_index=cursor[1]),
    }


def page(response: Any) -> tuple[list[tuple[str, int, list[int]]], tuple[str, int] | None]:
    """[(topic, error, partition indexes)], and the next cursor."""
    topics = [
        (t.name, t.error_code, [p.partition_index for p in t.partitions]) for t in response.topics
    ]
    cursor = response.next_cursor
    return topics, None if cursor is None else (cursor.topic_name, cursor.partition_index)


def test_pages_follow_the_cursor(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        h.use(None)
        await h.broker.create_topic("many", 5)
        asked = ("many", OPEN, SECRET)  # in name order: many (5), orders (2), secret (1)
        first = await h.call(API, 0, **fields(*asked, limit=3))
        assert page(first) == ([("many", 0, [0, 1, 2])], ("many", 3))
        second = await h.call(API, 0, **fields(*asked, limit=3, cursor=("many", 3)))
        assert page(second) == ([("many", 0, [3, 4]), (OPEN, 0, [0])], (OPEN, 1))
        third = await h.call(API, 0, **fields(*asked, limit=3, cursor=(OPEN, 1)))
        assert page(third) == ([(OPEN, 0, [1]), (SECRET, 0, [0])], None)
        # The limit reached exactly at the end of a topic: the cursor names the next one.
        exact = await h.call(API, 0, **fields(OPEN, SECRET, limit=2))
        assert page(exact) == ([(OPEN, 0, [0, 1])], (SECRET, 0))
        described = (await h.call(API, 0, **fields(OPEN))).topics[0]
        assert described.topic_id == uuid.UUID(h.broker.logs.topics[OPEN].topic_id)
        assert not described.is_internal
        partition = described.partitions[0]
        node = h.broker.node_id
        assert (partition.leader_id, partition.replica_nodes, partition.isr_nodes) == (
            node,
            (node,),
            (node,),
        )
        assert partition.eligible_leader_replicas == () and partition.last_known_elr == ()
        everything = await h.call(API, 0, **fields())
        names = [t.name for t in everything.topics]
        assert names == sorted(names) and {OPEN, SECRET, "many"} <= set(names)

    run(tmp_path, body)


def test_bad_cursors_and_missing_topics(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        h.use(None)
        for cursor in (("elsewhere", 0), (OPEN, -1)):
            refused = await h.call(API, 0, **fields(OPEN, SECRET, cursor=cursor))
            assert page(refused) == (
                [(OPEN, ErrorCode.invalid_request, []), (SECRET, ErrorCode.invalid_request, [])],
                None,
            )
        missing = await h.call(API, 0, **fields("ghost", "bad name!"))
        assert page(missing)[0] == [
            ("bad name!", ErrorCode.invalid_topic_exception, []),
            ("ghost", ErrorCode.unknown_topic_or_partition, []),
        ]

    run(tmp_path, body)


def test_describe_needed_on_each_topic(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        h.acl.grant(topic(AclOperation.DESCRIBE))
        named = await h.call(API, 0, **fields(SECRET, OPEN, "ghost"))
        assert page(named)[0] == [
            (OPEN, 0, [0, 1]),
            ("ghost", TOPIC_DENIED, []),  # never said not to exist
            (SECRET, TOPIC_DENIED, []),
        ]
        assert named.topics[0].topic_authorized_operations == 1 << AclOperation.DESCRIBE
        assert named.topics[2].topic_authorized_operations == NO_OPERATIONS
        every = await h.call(API, 0, **fields())
        assert [t.name for t in every.topics] == [OPEN]
        asked = [c for c in h.acl.calls if c[:2] == (AclOperation.DESCRIBE, ResourceType.TOPIC)]
        assert (AclOperation.DESCRIBE, ResourceType.TOPIC, SECRET) in asked

    run(tmp_path, body)
