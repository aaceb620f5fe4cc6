"""Produce v13 names topics by id (KIP-516): authorized by the topic's name, an unknown id
answers UNKNOWN_TOPIC_ID before any authorization."""

from __future__ import annotations

import uuid
from pathlib import Path

from tests.unit.test_handler_authorization import (
    OPEN,
    SECONDS,
    SECRET,
    Harness,
    nested,
    run,
    topic,
)

from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.records.builder import build_batch
from onceflow.security.acl import AclOperation as Op


def by_id(partitions: dict[uuid.UUID, tuple[int, ...]]) -> dict[str, object]:
    batch = build_batch([(b"k", b"v", ())], timestamp_ms=0)
    topics = tuple(
        nested(
            ApiKey.PRODUCE,
            13,
            "TopicProduceData",
            topic_id=topic_id,
            partition_data=tuple(
                nested(ApiKey.PRODUCE, 13, "PartitionProduceData", index=p, records=batch)
                for p in parts
            ),
        )
        for topic_id, parts in partitions.items()
    )
    return {"transactional_id": None, "acks": -1, "timeout": 30 * SECONDS, "topic_data": topics}


def test_produce_v13_by_topic_id(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        h.acl.grant(topic(Op.WRITE))
        open_id, secret_id = h.broker.topic_id(OPEN), h.broker.topic_id(SECRET)
        assert open_id is not None and secret_id is not None
        unknown = uuid.uuid4()
        response = await h.call(
            ApiKey.PRODUCE, 13, **by_id({open_id: (0, 1), secret_id: (0,), unknown: (0,)})
        )
        errors = {
            (t.topic_id, p.index): ErrorCode(p.error_code)
            for t in response.responses
            for p in t.partition_responses
        }
        assert errors == {
            (open_id, 0): ErrorCode.none,
            (open_id, 1): ErrorCode.none,
            (secret_id, 0): ErrorCode.topic_authorization_failed,
            (unknown, 0): ErrorCode.unknown_topic_id,
        }
        assert (h.end_offset(OPEN, 0), h.end_offset(SECRET)) == (1, 0)
        assert sorted(h.acl.calls) == sorted([topic(Op.WRITE), topic(Op.WRITE, SECRET)])

    run(tmp_path, body)


def test_a_recreated_topic_is_found_by_its_new_id_only(tmp_path: Path) -> None:
    """Names by id are remembered between requests, but never trusted: the topic a
    remembered name names must still have that id."""

    async def body(h: Harness) -> None:
        h.use(None)
        old_id = h.broker.topic_id(OPEN)
        assert old_id is not None
        first = await h.call(ApiKey.PRODUCE, 13, **by_id({old_id: (0,)}))
        assert first.responses[0].partition_responses[0].error_code == ErrorCode.none
        await h.broker.delete_topic(OPEN)
        await h.broker.create_topic(OPEN, 2)
        new_id = h.broker.topic_id(OPEN)
        assert new_id is not None and new_id != old_id
        stale = await h.call(ApiKey.PRODUCE, 13, **by_id({old_id: (0,)}))
        assert stale.responses[0].partition_responses[0].error_code == ErrorCode.unknown_topic_id
        fresh = await h.call(ApiKey.PRODUCE, 13, **by_id({new_id: (0,)}))
        assert fresh.responses[0].partition_responses[0].error_code == ErrorCode.none
        assert h.end_offset(OPEN, 0) == 1

    run(tmp_path, body)
