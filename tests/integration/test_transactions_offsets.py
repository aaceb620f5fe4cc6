"""Consume-transform-produce with `send_offsets_to_transaction`, with real clients.

A consumer (read_committed) in a group reads an input topic; a transactional producer
writes a transformed copy to an output topic and puts the consumer's positions into the same
transaction (AddOffsetsToTxn + TxnOffsetCommit). The group's committed offsets move only
when a transaction commits: an aborted one leaves them as they were, and pending ones stay
invisible to OffsetFetch (and answer UNSTABLE_OFFSET_COMMIT to require_stable).
"""

from __future__ import annotations

import asyncio
import uuid
from abc import ABC, abstractmethod
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import pytest
from confluent_kafka import Consumer, TopicPartition
from kio.schema.offset_fetch.v7 import request as offset_fetch_v7
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32

from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import (
    QUIET_LOGGER,
    create_topic,
    produce_and_confirm,
)
from tests.helpers.clients import producer as plain_producer
from tests.helpers.txn import (
    CLIENTS,
    OP_TIMEOUT_S,
    Rec,
    call_with_deadline,
    confluent_txn_producer,
    read_records,
    running_without_internal_errors,
    wait_for,
    wait_stable,
)
from tests.helpers.txn import (
    txn_broker_process_each_version as txn_broker_process_each_version,  # the fixture
)
from tests.helpers.wire import RawConnection

T = TypeVar("T")

PARTITIONS = 2
PER_PARTITION = 15
UNSTABLE_OFFSET_COMMIT = 88
NO_OFFSET = -1


@pytest.fixture
def broker(txn_broker_process_each_version: BrokerProcess) -> Iterator[BrokerProcess]:
    """Each test at transaction versions 0 and 2, one broker per module and version."""
    yield from running_without_internal_errors(txn_broker_process_each_version)


def _seed(bootstrap: str) -> tuple[str, list[bytes]]:
    topic = create_topic(bootstrap, partitions=PARTITIONS)
    values = [f"in-{p}-{i:03d}".encode() for i in range(PER_PARTITION) for p in range(PARTITIONS)]
    p = plain_producer(bootstrap)
    out = produce_and_confirm(p, topic, [(int(v[3:4]), None, v, None) for v in values])
    assert not out.errors, out.errors
    return topic, values


def _transform(value: bytes) -> bytes:
    return b"out:" + value


# ---- one consume-transform-produce application per client -------------------------------


class App(ABC):
    """A read_committed consumer in `group` plus a transactional producer."""

    client: str

    @abstractmethod
    def poll(self, n: int) -> list[Rec]:
        """Exactly `n` more records (fails if they do not come in time)."""

    @abstractmethod
    def positions(self) -> dict[int, int]: ...

    @abstractmethod
    def rewind(self, offsets: dict[int, int]) -> None: ...

    @abstractmethod
    def begin(self) -> None: ...

    @abstractmethod
    def send(self, value: bytes) -> None: ...

    @abstractmethod
    def flush(self) -> None: ...

    @abstractmethod
    def send_offsets(self, offsets: dict[int, int]) -> None: ...

    @abstractmethod
    def commit(self) -> None: ...

    @abstractmethod
    def abort(self) -> None: ...

    @abstractmethod
    def close(self) -> None: ...


class ConfluentApp(App):
    """Subscribes (a real group member with a generation), sends the consumer's group
    metadata with the offsets (KIP-447)."""

    client = "confluent"

    def __init__(self, bootstrap: str, src: str, dst: str, group: str, txn_id: str) -> None:
        self.src, self.dst = src, dst
        self.c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "logger": QUIET_LOGGER,
                "log_level": 0,
            }
        )
        self.c.subscribe([src])
        self.p = confluent_txn_producer(bootstrap, txn_id)
        self.p.init_transactions(OP_TIMEOUT_S)

    def poll(self, n: int) -> list[Rec]:
        out: list[Rec] = []

        def more() -> bool:
            for msg in self.c.consume(n - len(out), 0.2):
                assert msg.error() is None, msg.error()
                out.append(Rec(msg.partition(), msg.offset(), msg.key(), msg.value()))
            return len(out) >= n

        wait_for(more, OP_TIMEOUT_S, f"{n} input records")
        return out

    def positions(self) -> dict[int, int]:
        tps = self.c.position(self.c.assignment())
        return {tp.partition: tp.offset for tp in tps if tp.offset >= 0}

    def rewind(self, offsets: dict[int, int]) -> None:
        for tp in self.c.assignment():
            self.c.seek(TopicPartition(self.src, tp.partition, offsets.get(tp.partition, 0)))

    def begin(self) -> None:
        self.p.begin_transaction()

    def send(self, value: bytes) -> None:
        self.p.produce(self.dst, value=value, partition=0)

    def flush(self) -> None:
        assert self.p.flush(OP_TIMEOUT_S) == 0

    def send_offsets(self, offsets: dict[int, int]) -> None:
        self.p.send_offsets_to_transaction(
            [TopicPartition(self.src, p, o) for p, o in offsets.items()],
            self.c.consumer_group_metadata(),
            OP_TIMEOUT_S,
        )

    def commit(self) -> None:
        self.p.commit_transaction(OP_TIMEOUT_S)

    def abort(self) -> None:
        self.p.abort_transaction(OP_TIMEOUT_S)

    def close(self) -> None:
        self.c.close()
        self.p.flush(5)


class KafkaPythonApp(App):
    """Assigns the partitions itself (a simple group) and names the group by id."""

    client = "kafka-python"

    def __init__(self, bootstrap: str, src: str, dst: str, group: str, txn_id: str) -> None:
        from kafka import KafkaConsumer, KafkaProducer
        from kafka import TopicPartition as KTP

        self.src, self.dst, self.group = src, dst, group
        self.tps = [KTP(src, p) for p in range(PARTITIONS)]
        self.c = KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_poll_records=1,
        )
        self.c.assign(self.tps)
        self.p = KafkaProducer(
            bootstrap_servers=bootstrap,
            transactional_id=txn_id,
            max_block_ms=int(OP_TIMEOUT_S * 1000),
        )
        call_with_deadline(self.p.init_transactions, what="init_transactions")
        self._futures: list[Any] = []

    def poll(self, n: int) -> list[Rec]:
        out: list[Rec] = []

        def more() -> bool:
            for msgs in self.c.poll(timeout_ms=200, max_records=n - len(out)).values():
                out.extend(Rec(m.partition, m.offset, m.key, m.value) for m in msgs)
            return len(out) >= n

        wait_for(more, OP_TIMEOUT_S, f"{n} input records")
        return out

    def positions(self) -> dict[int, int]:
        return {tp.partition: self.c.position(tp) for tp in self.tps}

    def rewind(self, offsets: dict[int, int]) -> None:
        for tp in self.tps:
            self.c.seek(tp, offsets.get(tp.partition, 0))

    def begin(self) -> None:
        self.p.begin_transaction()

    def send(self, value: bytes) -> None:
        self._futures.append(self.p.send(self.dst, value=value, partition=0))

    def flush(self) -> None:
        self.p.flush(timeout=OP_TIMEOUT_S)
        for f in self._futures:
            f.get(timeout=OP_TIMEOUT_S)
        self._futures = []

    def send_offsets(self, offsets: dict[int, int]) -> None:
        from kafka import TopicPartition as KTP
        from kafka.structs import OffsetAndMetadata

        call_with_deadline(
            lambda: self.p.send_offsets_to_transaction(
                {KTP(self.src, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()},
                self.group,
            ),
            what="send_offsets_to_transaction",
        )

    def commit(self) -> None:
        call_with_deadline(self.p.commit_transaction, what="commit_transaction")

    def abort(self) -> None:
        call_with_deadline(self.p.abort_transaction, what="abort_transaction")

    def close(self) -> None:
        self.c.close()
        self.p.close(timeout=5)


class AioKafkaApp(App):
    """aiokafka on a loop of its own; assigns the partitions, names the group by id."""

    client = "aiokafka"

    def __init__(self, bootstrap: str, src: str, dst: str, group: str, txn_id: str) -> None:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
        from aiokafka import TopicPartition as ATP

        self.loop = asyncio.new_event_loop()
        self.src, self.dst, self.group = src, dst, group
        self.tps = [ATP(src, p) for p in range(PARTITIONS)]

        async def make() -> tuple[Any, Any]:
            c = AIOKafkaConsumer(
                bootstrap_servers=bootstrap,
                group_id=group,
                isolation_level="read_committed",
                enable_auto_commit=False,
                auto_offset_reset="earliest",
            )
            await c.start()
            c.assign(self.tps)
            p = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=txn_id)
            await p.start()
            return c, p

        self.c, self.p = self.run(make())

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(asyncio.wait_for(coro, OP_TIMEOUT_S))

    def poll(self, n: int) -> list[Rec]:
        out: list[Rec] = []

        def more() -> bool:
            got = self.run(self.c.getmany(timeout_ms=200, max_records=n - len(out)))
            for msgs in got.values():
                out.extend(Rec(m.partition, m.offset, m.key, m.value) for m in msgs)
            return len(out) >= n

        wait_for(more, OP_TIMEOUT_S, f"{n} input records")
        return out

    def positions(self) -> dict[int, int]:
        return {tp.partition: self.run(self.c.position(tp)) for tp in self.tps}

    def rewind(self, offsets: dict[int, int]) -> None:
        for tp in self.tps:
            self.c.seek(tp, offsets.get(tp.partition, 0))

    def begin(self) -> None:
        self.run(self.p.begin_transaction())

    def send(self, value: bytes) -> None:
        self.run(self.p.send_and_wait(self.dst, value=value, partition=0))

    def flush(self) -> None:
        self.run(self.p.flush())

    def send_offsets(self, offsets: dict[int, int]) -> None:
        from aiokafka import TopicPartition as ATP

        self.run(
            self.p.send_offsets_to_transaction(
                {ATP(self.src, p): o for p, o in offsets.items()}, self.group
            )
        )

    def commit(self) -> None:
        self.run(self.p.commit_transaction())

    def abort(self) -> None:
        self.run(self.p.abort_transaction())

    def close(self) -> None:
        async def stop() -> None:
            await self.c.stop()
            await self.p.stop()

        try:
            self.run(stop())
        finally:
            self.loop.close()


APPS: dict[str, type[App]] = {
    "confluent": ConfluentApp,
    "kafka-python": KafkaPythonApp,
    "aiokafka": AioKafkaApp,
}


# ---- reading the group's offsets ---------------------------------------------------------


def _committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets as a plain OffsetFetch shows them (read_uncommitted:
    librdkafka's default read_committed would ask for require_stable and wait); partitions
    without one are left out."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "isolation.level": "read_uncommitted",
            "logger": QUIET_LOGGER,
            "log_level": 0,
        }
    )
    try:
        tps = c.committed(
            [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=OP_TIMEOUT_S
        )
        for tp in tps:
            assert tp.error is None, tp.error
        return {tp.partition: tp.offset for tp in tps if tp.offset >= 0}
    finally:
        c.close()


def _offset_fetch_v7(
    bootstrap: str, group: str, topic: str, require_stable: bool
) -> dict[int, tuple[int, int]]:
    """Raw OffsetFetch v7: {partition: (committed offset, error code)}; a group-level
    error is reported for every partition."""
    request = offset_fetch_v7.OffsetFetchRequest(
        group_id=GroupId(group),
        topics=(
            offset_fetch_v7.OffsetFetchRequestTopic(
                name=TopicName(topic), partition_indexes=tuple(i32(p) for p in range(PARTITIONS))
            ),
        ),
        require_stable=require_stable,
    )
    with RawConnection(bootstrap) as conn:
        response = conn.call(request)
    if response.error_code != 0:
        return dict.fromkeys(range(PARTITIONS), (NO_OFFSET, int(response.error_code)))
    return {
        int(p.partition_index): (int(p.committed_offset), int(p.error_code))
        for t in response.topics
        for p in t.partitions
    }


# ---- tests -------------------------------------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
def test_consume_transform_produce_offsets_move_only_with_committed_transactions(
    broker: BrokerProcess, client: str
) -> None:
    src, inputs = _seed(broker.bootstrap)
    dst = create_topic(broker.bootstrap, partitions=1)
    group = f"ctp-{client}-{uuid.uuid4().hex[:8]}"
    app = APPS[client](broker.bootstrap, src, dst, group, f"ctp-{uuid.uuid4().hex[:8]}")
    try:
        # 1: a committed transaction moves the group's offsets.
        app.begin()
        for rec in app.poll(10):
            assert rec.value is not None
            app.send(_transform(rec.value))
        app.flush()
        first = app.positions()
        app.send_offsets(first)
        assert _committed(broker.bootstrap, group, src) == {}, (
            "a pending transactional offset is visible to OffsetFetch"
        )
        app.commit()
        wait_for(
            lambda: _committed(broker.bootstrap, group, src) == first,
            what=f"committed offsets {first}",
        )

        # 2: an aborted transaction leaves them unchanged.
        app.begin()
        for rec in app.poll(10):
            assert rec.value is not None
            app.send(_transform(rec.value))
        app.flush()
        second = app.positions()
        assert second != first
        app.send_offsets(second)
        app.abort()

        # 3: back to the committed position; process the rest and commit.
        app.rewind(first)
        app.begin()
        rest = app.poll(len(inputs) - sum(first.values()))
        for rec in rest:
            assert rec.value is not None
            app.send(_transform(rec.value))
        # Once this transaction's writes are acknowledged, the aborted one is complete (its
        # partitions could not be added before), so its offsets would show by now.
        app.flush()
        assert _committed(broker.bootstrap, group, src) == first, (
            "the aborted transaction changed the group's committed offsets"
        )
        final = app.positions()
        assert final == dict.fromkeys(range(PARTITIONS), PER_PARTITION)
        app.send_offsets(final)
        assert _committed(broker.bootstrap, group, src) == first, "pending offsets are visible"
        app.commit()
        wait_for(
            lambda: _committed(broker.bootstrap, group, src) == final,
            what=f"committed offsets {final}",
        )
    finally:
        app.close()

    ends = wait_stable(broker.bootstrap, dst, [0])
    out = read_records("confluent", broker.bootstrap, dst, ends, committed=True)
    assert sorted(r.value for r in out) == sorted(_transform(v) for v in inputs), (  # type: ignore[type-var]
        "the output is not exactly the transformed input"
    )
    raw = read_records("confluent", broker.bootstrap, dst, ends, committed=False)
    assert len(raw) > len(out), "the aborted transaction left nothing in the log"


def test_pending_transactional_offsets_are_unstable_for_require_stable(
    broker: BrokerProcess,
) -> None:
    """OffsetFetch v7: while a transaction holds offsets for a partition, require_stable
    answers UNSTABLE_OFFSET_COMMIT for it, and a plain fetch shows the old offset."""
    src, _ = _seed(broker.bootstrap)
    group = f"stable-{uuid.uuid4().hex[:8]}"
    member = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "logger": QUIET_LOGGER,
            "log_level": 0,
        }
    )
    p = confluent_txn_producer(broker.bootstrap, f"stable-{uuid.uuid4().hex[:8]}")
    try:
        p.init_transactions(OP_TIMEOUT_S)

        def offsets_in_txn(offset: int, commit: bool) -> None:
            p.begin_transaction()
            p.send_offsets_to_transaction(
                [TopicPartition(src, 0, offset)], member.consumer_group_metadata(), OP_TIMEOUT_S
            )
            stable = _offset_fetch_v7(broker.bootstrap, group, src, require_stable=True)
            assert stable[0][1] == UNSTABLE_OFFSET_COMMIT, f"require_stable: {stable}"
            assert stable[1] == (NO_OFFSET, 0), f"partition 1 has nothing pending: {stable}"
            plain = _offset_fetch_v7(broker.bootstrap, group, src, require_stable=False)
            assert plain[0][1] == 0
            assert plain[0][0] != offset, f"a pending offset is visible: {plain}"
            p.commit_transaction(OP_TIMEOUT_S) if commit else p.abort_transaction(OP_TIMEOUT_S)

        offsets_in_txn(5, commit=True)
        wait_for(
            lambda: _offset_fetch_v7(broker.bootstrap, group, src, True)[0] == (5, 0),
            what="offset 5 stable after the commit",
        )
        offsets_in_txn(9, commit=False)
        wait_for(
            lambda: _offset_fetch_v7(broker.bootstrap, group, src, True)[0][1] == 0,
            what="a stable offset after the abort",
        )
        assert _offset_fetch_v7(broker.bootstrap, group, src, True)[0] == (5, 0)
        assert _committed(broker.bootstrap, group, src) == {0: 5}
    finally:
        member.close()
        p.flush(5)
