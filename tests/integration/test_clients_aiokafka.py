"""aiokafka (0.14) against a real broker: produce, assignment, groups, offsets by time."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import create_topic

TIMEOUT_S = 20.0
R = TypeVar("R")


def run(coro: Awaitable[R], timeout: float = 60.0) -> R:
    """Run a test coroutine with an overall deadline, so a bug cannot hang the test."""

    async def bounded() -> R:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


def _producer(bs: str, **extra: Any) -> AIOKafkaProducer:
    return AIOKafkaProducer(
        bootstrap_servers=bs, enable_idempotence=False, request_timeout_ms=20_000, **extra
    )


def _consumer(bs: str, *topics: str, **extra: Any) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        *topics,
        bootstrap_servers=bs,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        request_timeout_ms=30_000,
        session_timeout_ms=10_000,
        heartbeat_interval_ms=1000,
        **extra,
    )


async def _get(c: AIOKafkaConsumer, n: int, timeout: float = TIMEOUT_S) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < n:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {n} records; got {len(got)}")
        batches = await c.getmany(timeout_ms=200)
        for records in batches.values():
            got.extend(records)
    return got


def test_produce_and_consume_by_assignment(shared_broker: BrokerProcess) -> None:
    bs = shared_broker.bootstrap
    topic = create_topic(bs, partitions=2)

    async def main() -> None:
        p = _producer(bs, acks="all", linger_ms=5)
        await p.start()
        sent: dict[int, list[tuple[bytes, bytes, list[tuple[str, bytes]]]]] = defaultdict(list)
        try:
            futures = []
            for i in range(50):
                part = i % 2
                key, value = f"k{i}".encode(), bytes([i]) * (i + 1)
                headers = [("i", str(i).encode())]
                futures.append(await p.send(topic, value, key=key, partition=part, headers=headers))
                sent[part].append((key, value, headers))
            mds = await asyncio.gather(*futures)
        finally:
            await p.stop()
        offsets: dict[int, list[int]] = defaultdict(list)
        for md in mds:
            offsets[md.partition].append(md.offset)
        assert offsets == {0: list(range(25)), 1: list(range(25))}

        c = _consumer(bs)
        await c.start()
        try:
            tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
            c.assign(tps)
            await c.seek_to_beginning(*tps)
            got = await _get(c, 50)
            assert await c.end_offsets(tps) == {tps[0]: 25, tps[1]: 25}
            c.seek(tps[0], 20)
            tail = await _get(c, 5)
        finally:
            await c.stop()
        by_part: dict[int, list[Any]] = defaultdict(list)
        for r in got:
            by_part[r.partition].append(r)
        for part in (0, 1):
            recs = by_part[part]
            assert [r.offset for r in recs] == list(range(25))
            assert [(r.key, r.value, list(r.headers)) for r in recs] == sent[part]
        assert [(r.partition, r.offset) for r in tail] == [(0, o) for o in range(20, 25)]

    run(main())


def test_offsets_for_times(shared_broker: BrokerProcess) -> None:
    bs = shared_broker.bootstrap
    topic = create_topic(bs, partitions=1)
    base = int(time.time() * 1000) - 50_000

    async def main() -> None:
        # acks=all: the records are then below the high watermark (durable) when the
        # ListOffsets arrives; with acks=1 they may not be yet, exactly as in Kafka.
        p = _producer(bs, acks="all", linger_ms=0)
        await p.start()
        try:
            for i in range(8):
                await p.send_and_wait(
                    topic, f"v{i}".encode(), partition=0, timestamp_ms=base + i * 100
                )
        finally:
            await p.stop()
        tp = TopicPartition(topic, 0)
        c = _consumer(bs)
        await c.start()
        try:
            c.assign([tp])
            found = (await c.offsets_for_times({tp: base + 250}))[tp]
            assert (found.offset, found.timestamp) == (3, base + 300)
            assert (await c.offsets_for_times({tp: base + 10_000}))[tp] is None
            c.seek(tp, found.offset)
            got = await _get(c, 5)
            assert [r.value for r in got] == [f"v{i}".encode() for i in range(3, 8)]
            assert (await c.beginning_offsets([tp]))[tp] == 0
        finally:
            await c.stop()

    run(main())


def test_group_consume_commit_and_resume(shared_broker: BrokerProcess) -> None:
    bs = shared_broker.bootstrap
    topic = create_topic(bs, partitions=2)
    group = f"aiog-{uuid.uuid4().hex[:8]}"

    async def main() -> None:
        p = _producer(bs, acks="all")
        await p.start()
        try:
            for i in range(20):
                await p.send(topic, f"a{i}".encode(), partition=i % 2)
            await p.flush()

            c = _consumer(bs, topic, group_id=group)
            await c.start()
            try:
                got = await _get(c, 20, timeout=40)
                assert sorted((r.partition, r.offset) for r in got) == [
                    (q, o) for q in range(2) for o in range(10)
                ]
                await c.commit()
                assert await c.committed(TopicPartition(topic, 0)) == 10
                assert await c.committed(TopicPartition(topic, 1)) == 10
            finally:
                await c.stop()

            await p.send_and_wait(topic, b"late-0", partition=0)
            await p.send_and_wait(topic, b"late-1", partition=1)
        finally:
            await p.stop()

        c = _consumer(bs, topic, group_id=group)
        await c.start()
        try:
            got = await _get(c, 2, timeout=40)
            extra = await c.getmany(timeout_ms=700)
            got += [r for rs in extra.values() for r in rs]
            assert sorted((r.partition, r.offset, r.value) for r in got) == [
                (0, 10, b"late-0"),
                (1, 10, b"late-1"),
            ]
        finally:
            await c.stop()

    run(main(), timeout=120)
