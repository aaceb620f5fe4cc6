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
