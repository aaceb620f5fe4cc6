"""ElectLeaders' handler on a single broker: ALTER on the cluster or
CLUSTER_AUTHORIZATION_FAILED (top level from v1, and every partition asked); allowed, each
partition needs no election, an unknown one is UNKNOWN_TOPIC_OR_PARTITION, and asked for
every partition the answer leaves out those that needed none."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest
from tests.unit.test_handler_authorization import OPEN, Harness, Op, cluster, nested, run

from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey

DENIED = ErrorCode.cluster_authorization_failed


def request(version: int, partitions: dict[str, list[int]] | None, kind: int = 0) -> Any:
    topics = None
    if partitions is not None:
        topics = tuple(
            nested(ApiKey.ELECT_LEADERS, version, "TopicPartitions", topic=t, partitions=tuple(p))
            for t, p in partitions.items()
        )
    return {
        "election_type": kind,
        "topic_partitions": topics,
        "timeout": datetime.timedelta(seconds=5),
    }


def results(response: Any) -> dict[tuple[str, int], ErrorCode]:
    return {
        (r.topic, p.partition_id): p.error_code
        for r in response.replica_election_results
        for p in r.partition_result
    }


@pytest.mark.parametrize("version", [0, 1, 2])
def test_elect_leaders_needs_alter_on_the_cluster(tmp_path: Path, version: int) -> None:
    async def body(h: Harness) -> None:
        asked = {OPEN: [0, 1]}
        denied = await h.call(ApiKey.ELECT_LEADERS, version, **request(version, asked))
        assert results(denied) == {(OPEN, 0): DENIED, (OPEN, 1): DENIED}
        if version >= 1:
            assert denied.error_code == DENIED
        h.acl.grant(cluster(Op.ALTER))
        for kind in (0, 1) if version >= 1 else (0,):
            asked = {OPEN: [0, 1, 5], "missing": [0]}
            allowed = await h.call(ApiKey.ELECT_LEADERS, version, **request(version, asked, kind))
            assert results(allowed) == {
                (OPEN, 0): ErrorCode.election_not_needed,
                (OPEN, 1): ErrorCode.election_not_needed,
                (OPEN, 5): ErrorCode.unknown_topic_or_partition,
                ("missing", 0): ErrorCode.unknown_topic_or_partition,
            }
            every = await h.call(ApiKey.ELECT_LEADERS, version, **request(version, None, kind))
            assert results(every) == {}

    run(tmp_path, body)
