"""AlterPartitionReassignments and ListPartitionReassignments on a single broker: ALTER
(DESCRIBE) on the cluster or CLUSTER_AUTHORIZATION_FAILED at the top level; allowed, a
broker alone is every partition's only replica, so [itself] is the one valid target (it
changes nothing), another broker is not alive, a cancel finds nothing in progress, and
nothing is ever listed."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest
from tests.unit.test_handler_authorization import OPEN, Harness, Op, cluster, nested, run

from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey

ALTER, LIST = ApiKey.ALTER_PARTITION_REASSIGNMENTS, ApiKey.LIST_PARTITION_REASSIGNMENTS
DENIED = ErrorCode.cluster_authorization_failed


def alter_fields(version: int, targets: dict[tuple[str, int], tuple[int, ...] | None]) -> Any:
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), replicas in targets.items():
        by_topic.setdefault(topic, []).append(
            nested(
                ALTER,
                version,
                "ReassignablePartition",
                partition_index=partition,
                replicas=replicas,
            )
        )
    return {
        "timeout": datetime.timedelta(seconds=5),
        "topics": tuple(
            nested(ALTER, version, "ReassignableTopic", name=t, partitions=tuple(ps))
            for t, ps in by_topic.items()
        ),
    }


def answers(response: Any) -> dict[tuple[str, int], ErrorCode]:
    return {
        (t.name, p.partition_index): p.error_code for t in response.responses for p in t.partitions
    }


@pytest.mark.parametrize("version", [0, 1])
def test_alter_partition_reassignments_alone(tmp_path: Path, version: int) -> None:
    async def body(h: Harness) -> None:
        me = h.broker.config.node_id
        asked = {(OPEN, 0): (me,)}
        denied = await h.call(ALTER, version, **alter_fields(version, asked))
        assert denied.error_code == DENIED and answers(denied) == {}
        h.acl.grant(cluster(Op.ALTER))
        allowed = await h.call(
            ALTER,
            version,
            **alter_fields(
                version,
                {
                    (OPEN, 0): (me,),
                    (OPEN, 1): None,
                    (OPEN, 7): (me,),
                    ("missing", 0): (me,),
                    (OPEN, 2): (me, me + 1),
                },
            ),
        )
        assert allowed.error_code == ErrorCode.none
        assert answers(allowed) == {
            (OPEN, 0): ErrorCode.none,
            (OPEN, 1): ErrorCode.no_reassignment_in_progress,
            (OPEN, 7): ErrorCode.unknown_topic_or_partition,
            ("missing", 0): ErrorCode.unknown_topic_or_partition,
            (OPEN, 2): ErrorCode.unknown_topic_or_partition,  # the topic has two partitions
        }
        dead = await h.call(ALTER, version, **alter_fields(version, {(OPEN, 1): (me, me + 1)}))
        assert answers(dead) == {(OPEN, 1): ErrorCode.invalid_replica_assignment}
        if version >= 1:  # KIP-860: the answer echoes allowReplicationFactorChange
            fields = alter_fields(version, {(OPEN, 0): (me,)})
            kept = await h.call(ALTER, version, allow_replication_factor_change=False, **fields)
            assert kept.allow_replication_factor_change is False
            assert answers(kept) == {(OPEN, 0): ErrorCode.none}

    run(tmp_path, body)


def test_list_partition_reassignments_alone(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        fields = {"timeout": datetime.timedelta(seconds=5), "topics": None}
        denied = await h.call(LIST, 0, **fields)
        assert denied.error_code == DENIED
        h.acl.grant(cluster(Op.DESCRIBE))
        listed = await h.call(LIST, 0, **fields)
        assert (listed.error_code, listed.topics) == (ErrorCode.none, ())
        named = nested(
            LIST, 0, "ListPartitionReassignmentsTopics", name=OPEN, partition_indexes=(0, 1)
        )
        listed = await h.call(LIST, 0, timeout=datetime.timedelta(seconds=5), topics=(named,))
        assert listed.topics == ()

    run(tmp_path, body)
