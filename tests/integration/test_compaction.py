"""Log compaction against a real broker, seen through confluent-kafka and the data dir.

A compacted topic ends up holding only the latest value per key in its closed segments, at
the offsets they were written at; tombstones go once delete.retention.ms has passed; keyless
records are refused. `__consumer_offsets` is compacted too, so many commits by one group keep
its partition small, and the committed offset survives restarts.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Message, TopicPartition

from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import (
    assign_from,
    committed_offsets,
    consume_until,
    consumer,
    create_topic,
    produce_and_confirm,
    producer,
)

CLEANER = {
    "log.cleaner.backoff.ms": "200",
    # Fewer internal partitions start faster; the group's is then partition 0.
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.num.partitions": "1",
}
COMPACTED = {
    "cleanup.policy": "compact",
    "segment.bytes": "2048",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "1000",
}
WAIT_S = 30.0

Record = tuple[bytes | None, bytes | None]


def segment_bases(broker: BrokerProcess, name: str) -> list[int]:
    directory = Path(broker.data_dir) / name
    return sorted(int(n[:-4]) for n in os.listdir(directory) if n.endswith(".log"))


def log_bytes(broker: BrokerProcess, name: str) -> int:
    directory = Path(broker.data_dir) / name
    return sum(f.stat().st_size for f in directory.iterdir() if f.name.endswith(".log"))


def read_all(bootstrap: str, topic: str) -> list[Message]:
    """Every record of partition 0, from the log start to the high watermark."""
    c = consumer(bootstrap)
    try:
        _, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        if high <= 0:
            return []
        assign_from(c, topic, [0])
        return consume_until(
            c, lambda got: bool(got) and got[-1].offset() >= high - 1, what=f"{topic} to {high}"
        )
    finally:
        c.close()


def located(message: Message) -> tuple[int, Record]:
    offset = message.offset()
    assert offset is not None
    return offset, (message.key(), message.value())


def table(records: list[tuple[int, Record]]) -> dict[bytes, bytes]:
    state: dict[bytes, bytes] = {}
    for _, (key, value) in sorted(records):
        assert key is not None
        if value is None:
            state.pop(key, None)
        else:
            state[key] = value
    return state


def poll_until(check: Callable[[], str | None], nudge: Callable[[], None], what: str) -> None:
    """Run `check` (None: done, else why not yet), nudging in between, until the deadline."""
    deadline = time.monotonic() + WAIT_S
    while True:
        why = check()
        if why is None:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached in {WAIT_S} s: {why}")
        nudge()
        time.sleep(0.3)


@pytest.mark.broker_overrides(CLEANER)
def test_a_compacted_topic_keeps_the_latest_value_per_key(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, config=COMPACTED)
    p = producer(broker.bootstrap)
    written: dict[int, Record] = {}

    def produce(records: list[Record]) -> None:
        done = produce_and_confirm(p, topic, [(0, k, v, None) for k, v in records])
        assert not done.errors, done.errors
        for _, offset, key, value, _ in done.ok:
            written[offset] = (key, value)

    produce([(b"dead-%d" % i, b"alive") for i in range(3)])
    for r in range(50):
        produce([(b"key-%d" % k, b"value-%d-%d-" % (k, r) + b"x" * 40) for k in range(8)])
        if r == 10:
            produce([(b"dead-%d" % i, None) for i in range(3)])  # tombstones
    fillers = iter(range(1_000_000))

    def nudge() -> None:
        # Closes another segment: the cleaner only runs when closed segments are dirty.
        produce([(b"filler", b"f%d-" % next(fillers) + b"y" * 100) for _ in range(20)])

    def check() -> str | None:
        messages = read_all(broker.bootstrap, topic)
        seen = [located(m) for m in messages]
        for offset, record in seen:
            assert written[offset] == record, f"offset {offset} holds another record"
        assert table(seen) == table(list(written.items()))
        active = segment_bases(broker, f"{topic}-0")[-1]
        closed = [record for offset, record in seen if offset < active]
        keys = [key for key, _ in closed]
        if len(keys) != len(set(keys)):
            return f"{len(keys) - len(set(keys))} older values left in closed segments"
        if any(value is None for _, value in closed):
            return "a tombstone is still there"
        return None

    poll_until(check, nudge, "compaction of the closed segments")
    final = [located(m) for m in read_all(broker.bootstrap, topic)]
    assert len(final) < len(written) // 4, "compaction removed most records"
    offsets = [offset for offset, _ in final]
    assert offsets[0] > 0 and len(offsets) < offsets[-1] + 1, "consumers see the gaps"
    assert not [key for _, (key, _) in final if key is not None and key.startswith(b"dead-")]
    assert "cleaned " + topic in broker.log


@pytest.mark.broker_overrides(CLEANER)
def test_a_compacted_topic_refuses_a_record_without_a_key(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, config=COMPACTED)
    p = producer(broker.bootstrap)
    refused = produce_and_confirm(p, topic, [(0, None, b"no key", None)])
    assert [e.code() for e in refused.errors] == [KafkaError.INVALID_RECORD], refused.errors
    accepted = produce_and_confirm(p, topic, [(0, b"key", b"value", None)])
    assert not accepted.errors and [o for _, o, *_ in accepted.ok] == [0]


def test_consumer_offsets_stay_small_under_many_commits(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory({**CLEANER, "offsets.topic.segment.bytes": "4096"})
    topic = create_topic(broker.bootstrap)
    commits = 600
    c = consumer(broker.bootstrap, group_id="many-commits")
    try:
        for i in range(1, commits + 1):
            c.commit(offsets=[TopicPartition(topic, 0, i)], asynchronous=False)
    finally:
        c.close()
    offsets_log = "__consumer_offsets-0"
    bound = 3 * 4096  # the active segment, and what cleaning left of the closed ones

    def check() -> str | None:
        size, files = log_bytes(broker, offsets_log), len(segment_bases(broker, offsets_log))
        return None if size <= bound and files <= 3 else f"{size} bytes in {files} segments"

    poll_until(check, lambda: None, f"{offsets_log} below {bound} bytes")
    assert segment_bases(broker, offsets_log)[-1] > commits // 2, "it did roll many times"

    def committed() -> int:
        reader = consumer(broker.bootstrap, group_id="many-commits")
        try:
            return committed_offsets(reader, topic, [0])[0]
        finally:
            reader.close()

    assert committed() == commits
    broker.restart()
    assert committed() == commits
    broker.restart(kill=True)
    assert committed() == commits
    assert log_bytes(broker, offsets_log) <= bound
