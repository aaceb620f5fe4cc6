"""A follower fetches from its leader by topic id (Fetch v17, the follower in ReplicaState),
so a replica never copies a recreated topic of the same name: the leader does not know the
old id and answers UNKNOWN_TOPIC_ID. A topic without an id on record is fetched by name.

The leader here is a socket that decodes each request with kio and answers as told.
"""

from __future__ import annotations

import asyncio
import datetime
import struct
import uuid
from collections.abc import Callable
from typing import Any

from onceflow.clock import ManualClock
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import build, decode_request, encode_response, nested, response_type
from onceflow.records.builder import build_batch
from onceflow.replication.fetcher import FetcherSettings, ReplicaFetcher
from onceflow.replication.partition import LeaderAndIsr, Partition
from onceflow.storage.fs import SimFileSystem
from onceflow.storage.partition_log import LogConfig, PartitionLog
from onceflow.storage.recovery import open_partition

LEADER, LOCAL = 1, 2
TOPIC_ID = uuid.UUID("8a1e6c1e-62f4-4b1a-9f7d-0d5c2f3b9e11")
BATCH = build_batch([(None, b"copied", ())], timestamp_ms=1_000, partition_leader_epoch=0)
# One fetch's decoded request in, one topic's (id or name, error, records) out.
Answer = Callable[[int, Any], tuple[Any, ErrorCode, bytes | None]]


class _Host:
    def appended(self, plog: PartitionLog) -> None:
        pass

    async def durable(self, plog: PartitionLog, offset: int, follower: bool = False) -> None:
        pass


def _following(topic_id: uuid.UUID | None) -> Partition:
    clock = ManualClock(1_000_000)
    plog, _ = open_partition(SimFileSystem(), "/data/t-0", "t", 0, LogConfig(), clock, 0, False)
    partition = Partition(plog, LOCAL, clock, topic_id)
    partition.make_follower(LeaderAndIsr(LEADER, 0, (LEADER, LOCAL), (LEADER, LOCAL), 0))
    return partition


def _response(version: int, topic: Any, error: ErrorCode, records: bytes | None) -> Any:
    data = build(
        nested(ApiKey.FETCH, version, "PartitionData"),
        partition_index=0,
        error_code=error,
        high_watermark=1 if records else -1,
        last_stable_offset=-1,
        log_start_offset=0,
        aborted_transactions=None,
        records=records,
    )
    head = {"topic_id": topic} if version >= 13 else {"topic": topic}
    result = build(
        nested(ApiKey.FETCH, version, "FetchableTopicResponse"), partitions=(data,), **head
    )
    return build(
        response_type(ApiKey.FETCH, version),
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        responses=(result,),
    )


def _run(partition: Partition, answer: Answer, fetches: int) -> list[tuple[int, Any]]:
    """Follow `partition` until the leader has answered `fetches` fetches; the requests."""

    async def main() -> list[tuple[int, Any]]:
        seen: list[tuple[int, Any]] = []
        done = asyncio.Event()

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while len(seen) < fetches:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                header, request = decode_request(await reader.readexactly(size))
                seen.append((header.api_version, request))
                topic, error, records = answer(header.api_version, request)
                body = encode_response(header, _response(header.api_version, topic, error, records))
                writer.write(struct.pack(">i", len(body)) + body)
                await writer.drain()
            done.set()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        settings = FetcherSettings(backoff_ms=10, max_wait_ms=10)
        fetcher = ReplicaFetcher(LOCAL, LEADER, ("127.0.0.1", port), settings, _Host())
        try:
            fetcher.follow(partition)
            await asyncio.wait_for(done.wait(), 30)
            return seen
        finally:
            await fetcher.stop()
            server.close()

    return asyncio.run(main())


def test_a_follower_fetches_by_topic_id_and_appends_the_answer() -> None:
    partition = _following(TOPIC_ID)
    seen = _run(partition, lambda v, r: (r.topics[0].topic_id, ErrorCode.none, BATCH), 1)
    ((version, request),) = seen
    assert version == 17
    assert request.replica_state.replica_id == LOCAL
    assert [(t.topic_id, [p.partition for p in t.partitions]) for t in request.topics] == [
        (TOPIC_ID, [0])
    ]
    assert request.topics[0].partitions[0].last_fetched_epoch == -1  # truncation is by epoch
    assert partition.log.log_end_offset == 1


def test_an_id_the_leader_does_not_know_copies_nothing() -> None:
    """The topic was deleted and made again under the same name: the leader's topic has
    another id, and this replica of the old one must not take its records."""
    partition = _following(TOPIC_ID)
    seen = _run(partition, lambda v, r: (r.topics[0].topic_id, ErrorCode.unknown_topic_id, None), 2)
    assert [v for v, _ in seen] == [17, 17]  # asked again after the backoff, still by id
    assert partition.log.log_end_offset == 0


def test_records_answered_for_another_topic_id_are_not_copied() -> None:
    """An answer naming a topic id this replica did not ask for (the recreated topic's) is
    no answer for its partition, however well-formed its records."""
    partition = _following(TOPIC_ID)
    other = uuid.uuid4()
    _run(partition, lambda v, r: (other, ErrorCode.none, BATCH), 2)
    assert partition.log.log_end_offset == 0


def test_a_topic_without_an_id_is_fetched_by_name() -> None:
    partition = _following(None)
    seen = _run(partition, lambda v, r: (r.topics[0].topic, ErrorCode.none, BATCH), 1)
    ((version, request),) = seen
    assert version == 12
    assert (request.replica_id, request.topics[0].topic) == (LOCAL, "t")
    assert partition.log.log_end_offset == 1
