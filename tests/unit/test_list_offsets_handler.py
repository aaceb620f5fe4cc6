"""ListOffsets at every version on a real in-process Broker: LATEST, EARLIEST, times, and the
special timestamps of later versions (MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED) as a
Kafka without tiered storage answers them; UNSUPPORTED_VERSION below their versions,
INVALID_REQUEST for a partition named twice, read_committed and replica ids, leader epochs,
and OFFSET_NOT_AVAILABLE from a leader whose high watermark lags its epoch's start."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest
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
from onceflow.protocol.api_versions import SUPPORTED_VERSIONS, ApiKey
from onceflow.records.builder import build_batch
from onceflow.replication.partition import LeaderAndIsr, Partition
from onceflow.security.acl import AclOperation

API = ApiKey.LIST_OFFSETS
VERSIONS = range(SUPPORTED_VERSIONS[API][0], SUPPORTED_VERSIONS[API][1] + 1)
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
Asked = dict[str, tuple[tuple[int, int], ...]]  # topic -> (partition, timestamp) pairs
Got = tuple[int, int, int, int]  # error, offset, timestamp, leader epoch


def fields(version: int, asked: Asked, epoch: int = -1, **extra: Any) -> dict[str, Any]:
    topics = tuple(
        nested(
            API,
            version,
            "ListOffsetsTopic",
            name=name,
            partitions=tuple(
                nested(
                    API,
                    version,
                    "ListOffsetsPartition",
                    partition_index=p,
                    timestamp=ts,
                    current_leader_epoch=epoch,
                )
                for p, ts in parts
            ),
        )
        for name, parts in asked.items()
    )
    return {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": topics,
        "timeout": datetime.timedelta(seconds=1),
    } | extra


async def ask(
    h: Harness, version: int, asked: Asked, epoch: int = -1, **extra: Any
) -> dict[str, list[Got]]:
    response = await h.call(API, version, **fields(version, asked, epoch, **extra))
    out: dict[str, list[Got]] = {}
    for t in response.topics:
        assert t.name not in out
        out[t.name] = [
            (p.error_code, p.offset, p.timestamp, getattr(p, "leader_epoch", -1))
            for p in t.partitions
        ]
    return out


async def one(h: Harness, version: int, timestamp: int, epoch: int = -1, **extra: Any) -> Got:
    got = await ask(h, version, {OPEN: ((0, timestamp),)}, epoch=epoch, **extra)
    return got[OPEN][0]


async def produce(h: Harness, *times: int, txn: tuple[str, int, int] | None = None) -> None:
    """One batch of records at these times to OPEN-0 (in transaction (id, pid, epoch))."""
    records = [(None, f"v{i}".encode(), ()) for i in range(len(times))]
    pid, epoch = (txn[1], txn[2]) if txn else (-1, -1)
    batch = build_batch(
        records,
        timestamp_ms=times[0],
        timestamps=times,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=0 if txn else -1,
        transactional=txn is not None,
    )
    data = nested(ApiKey.PRODUCE, 8, "PartitionProduceData", index=0, records=batch)
    response = await h.call(
        ApiKey.PRODUCE,
        8,
        transactional_id=txn[0] if txn else None,
        acks=-1,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(
            nested(ApiKey.PRODUCE, 8, "TopicProduceData", name=OPEN, partition_data=(data,)),
        ),
    )
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.none


def test_kafka_4_1s_range() -> None:
    assert SUPPORTED_VERSIONS[API] == (1, 10)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_version(tmp_path: Path, version: int) -> None:
    async def body(h: Harness) -> None:
        h.use(None)
        t0 = h.clock.now_ms() - 60_000
        await produce(h, t0 + 10, t0 + 30, t0 + 20)  # offsets 0-2
        await produce(h, t0 + 30, t0 + 5)  # 3-4: the same max timestamp, later
        epoch = 0 if version >= 4 else -1  # the field exists from v4
        assert await one(h, version, LATEST) == (0, 5, -1, epoch)
        assert await one(h, version, EARLIEST) == (0, 0, -1, epoch)
        assert await one(h, version, t0 + 15) == (0, 1, t0 + 30, epoch)
        assert await one(h, version, t0 + 31) == (0, -1, -1, -1)
        unsupported = (ErrorCode.unsupported_version, -1, -1, -1)
        special = {
            MAX_TIMESTAMP: (7, (0, 1, t0 + 30, epoch)),
            EARLIEST_LOCAL: (8, (0, 0, -1, epoch)),
            LATEST_TIERED: (9, (0, -1, -1, -1)),
            -6: (1 << 15, unsupported),  # EARLIEST_PENDING_UPLOAD: Kafka 4.2's v11
            -7: (1 << 15, unsupported),
        }
        for timestamp, (since, answer) in special.items():
            expected = answer if version >= since else unsupported
            assert await one(h, version, timestamp) == expected, timestamp

    run(tmp_path, body)


@pytest.mark.parametrize("version", [1, 5, 10])
def test_duplicates_and_denied_topics(tmp_path: Path, version: int) -> None:
    async def body(h: Harness) -> None:
        h.acl.grant(topic(AclOperation.DESCRIBE), topic(AclOperation.WRITE))
        await produce(h, h.clock.now_ms())
        asked: Asked = {SECRET: ((0, LATEST),), OPEN: ((0, LATEST), (1, LATEST), (0, EARLIEST))}
        got = await ask(h, version, asked)
        epoch = 0 if version >= 4 else -1
        # Allowed topics first, a partition named twice answered once; then the refused.
        assert list(got) == [OPEN, SECRET]
        assert got[OPEN] == [(ErrorCode.invalid_request, -1, -1, -1), (0, 0, -1, epoch)]
        assert got[SECRET] == [(TOPIC_DENIED, -1, -1, -1)]

    run(tmp_path, body)


@pytest.mark.parametrize("version", [2, 7, 10])
def test_read_committed_and_replicas(tmp_path: Path, version: int) -> None:
    async def body(h: Harness) -> None:
        h.use(None)
        now = h.clock.now_ms()
        await produce(h, now - 1000)  # offset 0
        pid, producer_epoch = await h.open_txn("t", (OPEN, 0))
        await produce(h, now, txn=("t", pid, producer_epoch))  # offset 1, left open
        committed = {"isolation_level": 1}
        assert (await one(h, version, LATEST, **committed))[1] == 1  # the LSO
        assert (await one(h, version, LATEST))[1] == 2  # the high watermark
        if version >= 7:
            # The newest record is past the LSO: nothing a read_committed client may read.
            assert await one(h, version, MAX_TIMESTAMP, **committed) == (0, -1, -1, -1)
            assert (await one(h, version, MAX_TIMESTAMP))[1:3] == (1, now)
        # A replica id asks for the log end, whatever the isolation level.
        assert (await one(h, version, LATEST, replica_id=1, **committed))[1] == 2
        assert (await one(h, version, LATEST, replica_id=-2, **committed))[1] == 2

    run(tmp_path, body)


@pytest.mark.parametrize("version", [4, 5, 10])
def test_leader_epochs_and_a_lagging_high_watermark(tmp_path: Path, version: int) -> None:
    async def body(h: Harness) -> None:
        h.use(None)
        now = h.clock.now_ms()
        await produce(h, now - 1000)
        await produce(h, now - 500)  # offsets 0-1, epoch 0
        stale = await ask(h, version, {OPEN: ((0, LATEST),)})
        assert stale[OPEN] == [(0, 2, -1, 0)]
        assert (await one(h, version, LATEST, epoch=3))[0] == ErrorCode.unknown_leader_epoch
        # Elected leader at epoch 1 with the log end at 2, its high watermark not yet there.
        plog = h.broker.logs.get(OPEN, 0)
        assert plog is not None
        partition = Partition(plog, h.broker.node_id, h.clock)
        partition.make_leader(LeaderAndIsr(h.broker.node_id, 1, (0, 1), (0, 1), 0))
        h.broker.replicated = lambda log: partition if log is plog else None  # type: ignore[method-assign]
        assert plog.high_watermark == 0
        lagging = ErrorCode.offset_not_available if version >= 5 else ErrorCode.leader_not_available
        assert await one(h, version, LATEST) == (lagging, -1, -1, -1)
        assert await one(h, version, now - 600) == (lagging, -1, -1, -1)  # record 1: above
        assert await one(h, version, EARLIEST) == (0, 0, -1, 0)  # the first epoch's
        assert (await one(h, version, LATEST, replica_id=1))[:2] == (0, 2)  # not a client
        plog.set_high_watermark(2)
        assert await one(h, version, LATEST) == (0, 2, -1, 1)
        assert await one(h, version, now - 600) == (0, 1, now - 500, 0)  # its batch's epoch
        assert (await one(h, version, LATEST, epoch=0))[0] == ErrorCode.fenced_leader_epoch

    run(tmp_path, body)


def test_max_timestamp_takes_the_first_segment_and_batch_with_it(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        h.use(None)
        t0 = h.clock.now_ms() - 60_000
        plog = h.broker.logs.get(OPEN, 0)
        assert plog is not None
        await produce(h, t0 + 10, t0 + 50)  # offsets 0-1
        plog.roll()
        await produce(h, t0 + 50, t0 + 20)  # 2-3: the same largest time, a later segment
        assert await one(h, 7, MAX_TIMESTAMP) == (0, 1, t0 + 50, 0)
        plog.roll()
        await produce(h, t0 + 70)  # 4
        await produce(h, t0 + 70)  # 5
        assert await one(h, 7, MAX_TIMESTAMP) == (0, 4, t0 + 70, 0)
        assert await one(h, 7, t0 + 60) == (0, 4, t0 + 70, 0)

    run(tmp_path, body)
