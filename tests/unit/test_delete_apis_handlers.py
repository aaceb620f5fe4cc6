"""DeleteGroups, OffsetDelete and DeleteRecords handlers on a real in-process Broker: Kafka's
ACL checks (the fake authorizer of test_handler_authorization), error codes and levels, and
every response encoded at its version."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.unit.test_handler_authorization import (
    GROUP_DENIED,
    OPEN,
    SECONDS,
    SECRET,
    TOPIC_DENIED,
    Harness,
    nested,
    partition_errors,
    produce_fields,
    run,
    topic,
)

from onceflow.coordinator.group import OffsetCommitEntry, TopicPartition
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.security.acl import AclOperation, ResourceType

Op = AclOperation
R = ResourceType


def group(op: AclOperation, name: str) -> tuple[AclOperation, ResourceType, str]:
    return (op, R.GROUP, name)


async def commit(h: Harness, group_id: str, *tps: tuple[str, int]) -> None:
    entries = {TopicPartition(t, p): OffsetCommitEntry(5) for t, p in tps}
    codes = await h.broker.group_coordinator.commit_offsets(group_id, "", -1, entries)
    assert set(codes.values()) == {ErrorCode.none}


def committed(h: Harness, group_id: str) -> set[tuple[str, int]]:
    result = h.broker.group_coordinator.fetch_offsets(group_id, None)
    return {(tp.topic, tp.partition) for tp in result.partitions}


# ---- DeleteGroups ----------------------------------------------------------------------


def test_delete_groups_needs_delete_on_each_group(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        await commit(h, "a", (OPEN, 0))
        await commit(h, "b", (OPEN, 0))
        h.acl.grant(group(Op.DELETE, "a"), group(Op.DELETE, "ghost"))
        for version in (0, 1, 2):
            response = await h.call(
                ApiKey.DELETE_GROUPS, version, groups_names=("a", "b", "ghost", "a")
            )
            codes = {r.group_id: r.error_code for r in response.results}
            assert codes == {
                "a": ErrorCode.none if version == 0 else ErrorCode.group_id_not_found,
                "b": GROUP_DENIED,
                "ghost": ErrorCode.group_id_not_found,
            }
            assert len(response.results) == 3
        assert committed(h, "a") == set() and committed(h, "b") == {(OPEN, 0)}
        asked = [c for c in h.acl.calls if c[1] is R.GROUP]
        assert asked.count(group(Op.DELETE, "a")) == 3  # once per request, not per mention

    run(tmp_path, body)


# ---- OffsetDelete ----------------------------------------------------------------------


def offset_delete_fields(group_id: str, partitions: dict[str, tuple[int, ...]]) -> dict[str, Any]:
    return {
        "group_id": group_id,
        "topics": tuple(
            nested(
                ApiKey.OFFSET_DELETE,
                0,
                "OffsetDeleteRequestTopic",
                name=name,
                partitions=tuple(
                    nested(
                        ApiKey.OFFSET_DELETE, 0, "OffsetDeleteRequestPartition", partition_index=p
                    )
                    for p in parts
                ),
            )
            for name, parts in partitions.items()
        ),
    }


def test_offset_delete_needs_delete_on_the_group_then_read_on_topics(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        await commit(h, "g", (OPEN, 0), (OPEN, 1), (SECRET, 0))
        fields = offset_delete_fields("g", {OPEN: (0, 7), SECRET: (0,), "ghost": (0,)})
        refused = await h.call(ApiKey.OFFSET_DELETE, 0, **fields)
        assert (refused.error_code, refused.topics) == (GROUP_DENIED, ())
        assert h.acl.calls == [group(Op.DELETE, "g")]  # no topic asked about
        h.acl.grant(group(Op.DELETE, "g"), topic(Op.READ), topic(Op.READ, "ghost"))
        response = await h.call(ApiKey.OFFSET_DELETE, 0, **fields)
        assert response.error_code == ErrorCode.none
        assert partition_errors(response.topics) == {
            (OPEN, 0): ErrorCode.none,
            (OPEN, 7): ErrorCode.unknown_topic_or_partition,
            (SECRET, 0): TOPIC_DENIED,
            ("ghost", 0): ErrorCode.unknown_topic_or_partition,
        }
        assert committed(h, "g") == {(OPEN, 1), (SECRET, 0)}
        h.acl.grant(group(Op.DELETE, "nobody"))
        missing = await h.call(
            ApiKey.OFFSET_DELETE, 0, **offset_delete_fields("nobody", {OPEN: (0,)})
        )
        assert (missing.error_code, missing.topics) == (ErrorCode.group_id_not_found, ())

    run(tmp_path, body)


# ---- DeleteRecords ---------------------------------------------------------------------


def delete_records_fields(offsets: dict[tuple[str, int], int]) -> dict[str, Any]:
    topics: dict[str, list[Any]] = {}
    for (name, index), offset in offsets.items():
        topics.setdefault(name, []).append(
            nested(
                ApiKey.DELETE_RECORDS,
                2,
                "DeleteRecordsPartition",
                partition_index=index,
                offset=offset,
            )
        )
    return {
        "topics": tuple(
            nested(ApiKey.DELETE_RECORDS, 2, "DeleteRecordsTopic", name=name, partitions=tuple(ps))
            for name, ps in topics.items()
        ),
        "timeout": 5 * SECONDS,
    }


def answers(response: Any) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> (low watermark, error code)."""
    return {
        (t.name, p.partition_index): (p.low_watermark, p.error_code)
        for t in response.topics
        for p in t.partitions
    }


async def produce(h: Harness, name: str, count: int) -> None:
    h.acl.grant(topic(Op.WRITE, name))
    for _ in range(count):
        response = await h.call(ApiKey.PRODUCE, 8, **produce_fields({name: (0,)}))
        assert set(partition_errors(response.responses, "partition_responses").values()) == {0}


def test_delete_records_needs_delete_on_each_topic(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        await produce(h, OPEN, 5)
        await produce(h, SECRET, 5)
        h.acl.grant(topic(Op.DELETE), topic(Op.DELETE, "ghost"))
        fields = delete_records_fields(
            {(OPEN, 0): 3, (OPEN, 9): 1, (SECRET, 0): 3, ("ghost", 0): 1, ("hidden", 0): 1}
        )
        response = await h.call(ApiKey.DELETE_RECORDS, 2, **fields)
        assert answers(response) == {
            (OPEN, 0): (3, ErrorCode.none),
            (OPEN, 9): (-1, ErrorCode.unknown_topic_or_partition),
            (SECRET, 0): (-1, TOPIC_DENIED),
            ("ghost", 0): (-1, ErrorCode.unknown_topic_or_partition),
            ("hidden", 0): (-1, TOPIC_DENIED),  # never said not to exist
        }
        assert h.broker.logs.get(SECRET, 0).log_start_offset == 0  # type: ignore[union-attr]
        asked = [c for c in h.acl.calls if c[0] is Op.DELETE]
        assert len(asked) == 4  # once per topic

    run(tmp_path, body)


def test_delete_records_offsets_and_policies(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        h.use(None)
        await h.broker.create_topic("compacted", 1, {"cleanup.policy": "compact"})
        await produce(h, OPEN, 6)
        for version in (0, 1, 2):
            response = await h.call(
                ApiKey.DELETE_RECORDS,
                version,
                **delete_records_fields(
                    {
                        (OPEN, 0): 2,
                        (OPEN, 1): 1,  # empty: its high watermark is 0
                        ("compacted", 0): 0,
                        ("__consumer_offsets", 0): 0,
                    }
                ),
            )
            assert answers(response) == {
                (OPEN, 0): (2, ErrorCode.none),
                (OPEN, 1): (-1, ErrorCode.offset_out_of_range),
                ("compacted", 0): (-1, ErrorCode.policy_violation),
                ("__consumer_offsets", 0): (-1, ErrorCode.invalid_topic_exception),
            }
        beyond = await h.call(ApiKey.DELETE_RECORDS, 2, **delete_records_fields({(OPEN, 0): 7}))
        assert answers(beyond) == {(OPEN, 0): (-1, ErrorCode.offset_out_of_range)}
        bad = await h.call(ApiKey.DELETE_RECORDS, 2, **delete_records_fields({(OPEN, 0): -5}))
        assert answers(bad) == {(OPEN, 0): (-1, ErrorCode.offset_out_of_range)}
        back = await h.call(ApiKey.DELETE_RECORDS, 2, **delete_records_fields({(OPEN, 0): 1}))
        assert answers(back) == {(OPEN, 0): (2, ErrorCode.none)}  # never back
        everything = await h.call(
            ApiKey.DELETE_RECORDS, 2, **delete_records_fields({(OPEN, 0): -1})
        )
        assert answers(everything) == {(OPEN, 0): (6, ErrorCode.none)}  # the high watermark

    run(tmp_path, body)


def test_delete_records_is_not_a_success_until_checkpointed(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        h.use(None)
        await produce(h, OPEN, 4)
        checkpoint = tmp_path / "data" / "log-start-offset-checkpoint"
        checkpoint.unlink(missing_ok=True)
        checkpoint.mkdir()  # the file cannot be replaced now
        both = delete_records_fields({(OPEN, 0): 2, (OPEN, 1): 0})
        failed = await h.call(ApiKey.DELETE_RECORDS, 2, **both)
        assert answers(failed) == {
            (OPEN, 0): (-1, ErrorCode.kafka_storage_error),
            (OPEN, 1): (-1, ErrorCode.kafka_storage_error),
        }
        checkpoint.rmdir()
        retried = await h.call(ApiKey.DELETE_RECORDS, 2, **both)
        assert answers(retried) == {(OPEN, 0): (2, ErrorCode.none), (OPEN, 1): (0, ErrorCode.none)}
        lines = checkpoint.read_text().splitlines()
        assert lines[:2] == ["0", "1"] and lines[2] == f"{OPEN} 0 2"

    run(tmp_path, body)
