"""Whatever a damaged `__consumer_offsets` record holds, its partition still loads.

A coordinator that cannot load a partition serves none of its groups, so one bad record
would take every group of the partition down. Each example damages one record the
coordinator wrote (cut short, or a byte changed), appends it as the newest value of its key,
and loads the partition on a new coordinator.
"""

from __future__ import annotations

from hypothesis import given, settings
from tests.helpers.damage import damaged_value
from tests.unit.test_consumer_group_classic_members import Mixed, subscription
from tests.unit.test_consumer_group_protocol import TOPIC_ID, run

from onceflow.coordinator.group import GroupCoordinator, OffsetCommitEntry, TopicPartition
from onceflow.errors import ErrorCode
from onceflow.records.builder import build_batch

CLASSIC = "classic-1"  # in the same partition as "g"


def _written() -> tuple[Mixed, int, list[tuple[bytes, bytes]]]:
    """A consumer group with a classic member, its offsets, and a classic group, all in one
    partition; returns the harness, that partition and its records (key, value)."""
    h = Mixed(group_initial_rebalance_delay_ms=0)
    h.join("new")
    assert h.classic_join("old").error is ErrorCode.none
    assert h.classic_sync("old") is ErrorCode.none
    entries = {TopicPartition("t", 0): OffsetCommitEntry(5, metadata="meta")}
    member, generation = h.classic_ids["old"], h.generations["old"]
    assert run(lambda: h.coord.commit_offsets("g", member, generation, entries)) == {
        TopicPartition("t", 0): ErrorCode.none
    }
    partition = h.coord.partition_for("g")
    assert h.coord.partition_for(CLASSIC) == partition

    async def classic_group() -> None:
        join = await h.coord.join_group(
            CLASSIC,
            "",
            protocol_type="consumer",
            protocols=[("range", subscription(("t",)))],
            session_timeout_ms=10_000,
            rebalance_timeout_ms=10_000,
        )
        assert join.error is ErrorCode.none
        sync = await h.coord.sync_group(
            CLASSIC, join.generation_id, join.member_id, assignments={join.member_id: b"x"}
        )
        assert sync.error is ErrorCode.none

    run(classic_group)
    records = [
        (entry.key, entry.value)
        for entry in h.log.read(partition)
        if entry.key is not None and entry.value is not None
    ]
    return h, partition, records


_, _, SAMPLE = _written()


@settings(max_examples=max(settings().max_examples, 300), deadline=None)
@given(damaged_value([v for _, v in SAMPLE]))
def test_a_damaged_record_never_keeps_its_partition_from_loading(
    damaged: tuple[int, bytes],
) -> None:
    h, partition, records = _written()
    index, value = damaged
    key = records[index][0]
    batch = build_batch([(key, value, ())], timestamp_ms=0)
    run(lambda: h.log.append(partition, batch))
    reloaded = GroupCoordinator(h.log, h.clock, h.coord.config, topics=lambda name: (TOPIC_ID, 6))
    run(reloaded.load)
    # Every group of the partition is served: described, and its offsets fetched.
    for group_id in ("g", CLASSIC):
        assert reloaded.fetch_offsets(group_id, None).error is ErrorCode.none
    assert reloaded.group("g") is not None
