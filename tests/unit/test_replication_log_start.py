"""The log start offset across replicas (DeleteRecords on a cluster): the leader's low
watermark over its followers' reported starts and the waits on it; a follower moving its
start up to its leader's, and starting over where the leader's log starts when its fetch
falls below it. The fetcher runs against a scripted leader (no network)."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import pytest

from onceflow.client.wire import encode_request_body
from onceflow.clock import ManualClock
from onceflow.errors import ErrorCode, KafkaError
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import build, decode_request, nested, response_type
from onceflow.records.batch import validate_produced_batches
from onceflow.records.builder import build_batch
from onceflow.replication.fetcher import FetcherSettings, ReplicaFetcher
from onceflow.replication.partition import LeaderAndIsr, Partition
from onceflow.storage.fs import SimFileSystem
from onceflow.storage.partition_log import LogConfig, PartitionLog
from onceflow.storage.recovery import open_partition

LEADER, LOCAL = 1, 2
ALL = frozenset({1, 2, 3})


def make(local: int, records: int = 0) -> Partition:
    clock = ManualClock(1_000_000)
    plog, _ = open_partition(
        SimFileSystem(), "/d/t-0", "t", 0, LogConfig(durable=False), clock, 0, False
    )
    if records:
        data = build_batch([(None, b"v", ()) for _ in range(records)], timestamp_ms=1_000_000)
        plog.append_batches(data, validate_produced_batches(data, 1 << 20))
    return Partition(plog, local_id=local, clock=clock)


# ---- the leader's low watermark --------------------------------------------------------


def test_low_watermark_is_the_lowest_start_of_the_live_replicas() -> None:
    async def main() -> None:
        partition = make(1, records=10)
        partition.make_leader(LeaderAndIsr(1, 0, (1, 2, 3), (1, 2, 3), 0))
        for replica in (2, 3):
            partition.follower_fetched(replica, 10)
        partition.log.update_high_watermark(10)
        partition.log.increment_log_start_offset(6)
        assert partition.low_watermark(ALL) == -1  # the followers have not said yet
        waiting = partition.wait_low_watermark(6, ALL)
        partition.follower_fetched(2, 10, 6)
        partition.check_low_watermark(ALL)
        assert partition.low_watermark(ALL) == -1 and not waiting.done()
        partition.follower_fetched(3, 10, 4)
        partition.check_low_watermark(ALL)
        assert partition.low_watermark(ALL) == 4 and not waiting.done()
        assert partition.low_watermark(frozenset({1, 2})) == 6  # broker 3 is gone
        partition.follower_fetched(3, 10, 6)
        partition.check_low_watermark(ALL)
        assert waiting.done() and waiting.result() == 6
        assert not partition.awaits_low_watermark

    asyncio.run(main())


def test_low_watermark_waits_fail_when_leadership_moves() -> None:
    async def main() -> None:
        partition = make(1, records=4)
        partition.make_leader(LeaderAndIsr(1, 0, (1, 2), (1, 2), 0))
        waiting = partition.wait_low_watermark(2, frozenset({1, 2}))
        partition.make_follower(LeaderAndIsr(2, 1, (1, 2), (1, 2), 1))
        with pytest.raises(KafkaError) as failed:
            await waiting
        assert failed.value.code is ErrorCode.not_leader_or_follower

    asyncio.run(main())


# ---- the follower ----------------------------------------------------------------------


class ScriptedLeader:
    """Answers a fetcher's requests: its epochs end at `end`, its log starts at `start`
    and its high watermark is `hw`; a fetch below its start answers OFFSET_OUT_OF_RANGE
    without saying where it starts (as a leader's error answers do)."""

    def __init__(self, start: int, hw: int, end: int, *, strict: bool = True) -> None:
        self.start, self.hw, self.end = start, hw, end
        self.strict = strict  # False: serve a fetch below its start all the same
        self.fetched: list[tuple[int, int]] = []  # (fetch offset, log start offset)
        self.asked_start = 0

    def close(self) -> None:
        pass

    async def request(self, api_key: int, version: int, body: Any) -> Any:
        if api_key == ApiKey.OFFSET_FOR_LEADER_EPOCH:
            result = nested(api_key, version, "EpochEndOffset")
            return build(
                response_type(api_key, version),
                throttle_time=datetime.timedelta(0),
                topics=(
                    build(
                        nested(api_key, version, "OffsetForLeaderTopicResult"),
                        topic="t",
                        partitions=(
                            build(
                                result,
                                error_code=0,
                                partition=0,
                                leader_epoch=0,
                                end_offset=self.end,
                            ),
                        ),
                    ),
                ),
            )
        if api_key == ApiKey.LIST_OFFSETS:
            self.asked_start += 1
            return build(
                response_type(api_key, version),
                topics=(
                    build(
                        nested(api_key, version, "ListOffsetsTopicResponse"),
                        name="t",
                        partitions=(
                            build(
                                nested(api_key, version, "ListOffsetsPartitionResponse"),
                                partition_index=0,
                                error_code=0,
                                offset=self.start,
                            ),
                        ),
                    ),
                ),
            )
        assert api_key == ApiKey.FETCH
        # The follower packs its Fetch (protocol/follower_fetch.py): read as a leader would.
        _, body = decode_request(encode_request_body(api_key, version, 1, "follower", body)[4:])
        asked = body.topics[0].partitions[0]
        self.fetched.append((int(asked.fetch_offset), int(asked.log_start_offset)))
        await asyncio.sleep(0.01)
        below = self.strict and asked.fetch_offset < self.start
        data = build(
            nested(api_key, version, "PartitionData"),
            partition_index=0,
            error_code=ErrorCode.offset_out_of_range if below else ErrorCode.none,
            high_watermark=-1 if below else self.hw,
            log_start_offset=-1 if below else self.start,
            aborted_transactions=None,
            records=b"",
        )
        return build(
            response_type(api_key, version),
            throttle_time=datetime.timedelta(0),
            error_code=0,
            responses=(
                build(
                    nested(api_key, version, "FetchableTopicResponse"),
                    topic="t",
                    partitions=(data,),
                ),
            ),
        )


class _Host:
    def appended(self, plog: PartitionLog) -> None:
        pass

    async def durable(self, plog: PartitionLog, offset: int, follower: bool = False) -> None:
        pass


async def follow(leader: ScriptedLeader, records: int, until: Any) -> Partition:
    partition = make(LOCAL, records)
    partition.make_follower(LeaderAndIsr(LEADER, 0, (LEADER, LOCAL), (LEADER, LOCAL), 0))
    fetcher = ReplicaFetcher(LOCAL, LEADER, ("127.0.0.1", 1), FetcherSettings(), _Host())
    fetcher._conn = leader  # type: ignore[assignment]
    fetcher.follow(partition)
    try:
        for _ in range(500):
            if until(partition.log):
                return partition
            await asyncio.sleep(0.01)
        raise AssertionError(f"never reached; fetched {leader.fetched[-3:]}")
    finally:
        await fetcher.stop()


def test_a_follower_moves_its_start_to_its_leaders() -> None:
    async def main() -> None:
        leader = ScriptedLeader(start=6, hw=10, end=10)
        partition = await follow(leader, 10, lambda plog: plog.log_start_offset == 6)
        assert partition.log.high_watermark == 10
        await asyncio.sleep(0)
        # ...and says so in its next fetch, for the leader's low watermark.
        assert (10, 6) in leader.fetched

    asyncio.run(main())


def test_a_follower_never_moves_its_start_past_its_own_high_watermark() -> None:
    async def main() -> None:
        leader = ScriptedLeader(start=7, hw=9, end=9, strict=False)
        partition = await follow(leader, 5, lambda plog: plog.log_start_offset > 0)
        assert partition.log.log_start_offset == partition.log.high_watermark == 5

    asyncio.run(main())


def test_a_follower_below_the_leaders_start_starts_over_there() -> None:
    async def main() -> None:
        leader = ScriptedLeader(start=20, hw=25, end=3)
        partition = await follow(leader, 3, lambda plog: plog.log_end_offset == 20)
        assert partition.log.log_start_offset == 20
        assert leader.asked_start >= 1  # the fetch's answer did not say; ListOffsets did

    asyncio.run(main())
