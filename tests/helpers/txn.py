"""Helpers for transaction tests: the three clients' transactional producers behind one
interface, read_committed / read_uncommitted readers of the three clients, the last stable
offset, fencing errors, and an on-disk view of partitions and `__transaction_state`.

Every call has a deadline. A reader reads from the beginning of each partition until its
position reaches a given end offset (positions move past control records, so a reader that
reaches the end has seen every record it will ever be given below that offset).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import OffsetSpec

from onceflow.coordinator.transaction.log import decode_key, decode_value
from onceflow.coordinator.transaction.metadata import TxnTransit
from onceflow.errors import ErrorCode
from onceflow.records.batch import BatchHeader, scan_batches
from onceflow.records.builder import build_batch
from onceflow.records.control import ControlType, parse_control_record
from onceflow.records.record import decode_records
from onceflow.storage.indexes.txn import ENTRY as TXN_INDEX_ENTRY
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import QUIET_LOGGER, admin_client
from tests.helpers.wire import RawConnection, produce_request

__all__ = [
    "CLIENTS",
    "HANGING_PRODUCER_ID",
    "TXN_BROKER_OVERRIDES",
    "DiskBatch",
    "Rec",
    "TxnProducer",
    "call_with_deadline",
    "confluent_txn_producer",
    "end_offset",
    "end_offsets",
    "fencing_error",
    "last_txn_state",
    "make_txn_producer",
    "markers_after",
    "partition_batches",
    "produce_hanging_transaction",
    "producers",
    "read_records",
    "truncate_batch",
    "txn_log_records",
    "wait_for",
    "wait_stable",
]

for _name in ("kafka", "aiokafka"):
    logging.getLogger(_name).setLevel(logging.CRITICAL)

OP_TIMEOUT_S = 30.0
CLIENTS = ("confluent", "kafka-python", "aiokafka")

# The coordinator looks for timed-out transactions every 500 ms instead of every 10 s.
TXN_BROKER_OVERRIDES: dict[str, str] = {
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
}

T = TypeVar("T")


class Rec(NamedTuple):
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def wait_for(
    predicate: Callable[[], T], timeout: float = OP_TIMEOUT_S, what: str = "a condition"
) -> T:
    """Call `predicate` until it returns something truthy; return that. Fail after
    `timeout` naming what was awaited (never a timing assertion: only a deadline)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def call_with_deadline(call: Callable[[], T], timeout: float = OP_TIMEOUT_S, what: str = "") -> T:
    """Run a blocking client call that takes no timeout of its own (kafka-python's
    transactional calls wait without one) in a thread; fail if it has not returned in time."""
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = call()
        except BaseException as exc:
            result["error"] = exc

    thread = threading.Thread(target=run, name=f"deadline-{what}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise AssertionError(f"{what or call} did not return within {timeout} s")
    if "error" in result:
        raise result["error"]
    return result["value"]  # type: ignore[no-any-return]


# ---- transactional producers -----------------------------------------------------------


def confluent_txn_producer(bootstrap: str, txn_id: str, **extra: Any) -> Producer:
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "transactional.id": txn_id,
        "linger.ms": 5,
        "logger": QUIET_LOGGER,
        "log_level": 0,
        **extra,
    }
    return Producer(conf)


def fencing_error(exc: BaseException) -> str | None:
    """Why `exc` says its producer was fenced (or is fatally broken), else None.

    confluent-kafka: a fatal KafkaError, or PRODUCER_FENCED / INVALID_PRODUCER_EPOCH /
    _FENCED. kafka-python and aiokafka: their fenced / epoch errors. Exceptions it was
    raised from count too (confluent-kafka can raise a fatal error out of a callback).
    """
    fenced_codes = {
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
        KafkaError._FENCED,
    }
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, KafkaException) and cur.args and isinstance(cur.args[0], KafkaError):
            err = cur.args[0]
            if err.fatal() or err.code() in fenced_codes:
                return f"confluent {err.name()} fatal={err.fatal()}: {err.str()}"
        else:
            name = type(cur).__name__
            if "Fenced" in name or "ProducerEpoch" in name:
                return f"{name}: {cur}"
        cur = cur.__cause__ or cur.__context__
    return None


class TxnProducer(ABC):
    """One transactional producer of any of the three clients, driven synchronously.

    `send` queues a record; `flush` waits for every queued record and returns their
    (partition, offset, value), raising on the first delivery error.
    """

    client: str

    @abstractmethod
    def init(self) -> None: ...

    @abstractmethod
    def begin(self) -> None: ...

    @abstractmethod
    def send(self, topic: str, partition: int, value: bytes, key: bytes | None = None) -> None: ...

    @abstractmethod
    def flush(self) -> list[tuple[int, int, bytes]]: ...

    @abstractmethod
    def commit(self) -> None: ...

    @abstractmethod
    def abort(self) -> None: ...

    @abstractmethod
    def close(self) -> None: ...


class _ConfluentTxn(TxnProducer):
    client = "confluent"

    def __init__(self, bootstrap: str, txn_id: str, timeout_ms: int | None) -> None:
        extra: dict[str, Any] = {}
        if timeout_ms is not None:
            extra["transaction.timeout.ms"] = timeout_ms
            extra["message.timeout.ms"] = timeout_ms
        self.p = confluent_txn_producer(bootstrap, txn_id, **extra)
        self._pending: list[tuple[KafkaError | None, Any]] = []

    def init(self) -> None:
        self.p.init_transactions(OP_TIMEOUT_S)

    def begin(self) -> None:
        self.p.begin_transaction()

    def send(self, topic: str, partition: int, value: bytes, key: bytes | None = None) -> None:
        def cb(err: KafkaError | None, msg: Any) -> None:
            self._pending.append((err, msg))

        self.p.produce(topic, value=value, key=key, partition=partition, on_delivery=cb)
        self.p.poll(0)

    def flush(self) -> list[tuple[int, int, bytes]]:
        try:
            left = self.p.flush(OP_TIMEOUT_S)
        except SystemError as exc:
            # A fatal error raised while a delivery callback ran: surface the real one.
            if isinstance(exc.__context__, KafkaException):
                raise exc.__context__ from None
            raise
        assert left == 0, f"{left} records undelivered after {OP_TIMEOUT_S} s"
        done, self._pending = self._pending, []
        for err, _ in done:
            if err is not None:
                raise KafkaException(err)
        return [(m.partition(), m.offset(), m.value()) for _, m in done]

    def commit(self) -> None:
        self.p.commit_transaction(OP_TIMEOUT_S)

    def abort(self) -> None:
        self.p.abort_transaction(OP_TIMEOUT_S)

    def close(self) -> None:
        # A fenced producer cannot flush; purge so close never waits on a dead transaction.
        with contextlib.suppress(Exception):
            self.p.purge()
        with contextlib.suppress(KafkaException):
            self.p.flush(0)


class _KafkaPythonTxn(TxnProducer):
    client = "kafka-python"

    def __init__(self, bootstrap: str, txn_id: str, timeout_ms: int | None) -> None:
        from kafka import KafkaProducer

        extra: dict[str, Any] = {}
        if timeout_ms is not None:
            extra["transaction_timeout_ms"] = timeout_ms
        self.p = KafkaProducer(
            bootstrap_servers=bootstrap,
            transactional_id=txn_id,
            linger_ms=5,
            request_timeout_ms=int(OP_TIMEOUT_S * 1000),
            max_block_ms=int(OP_TIMEOUT_S * 1000),
            **extra,
        )
        self._futures: list[Any] = []

    def init(self) -> None:
        call_with_deadline(self.p.init_transactions, what="init_transactions")

    def begin(self) -> None:
        self.p.begin_transaction()

    def send(self, topic: str, partition: int, value: bytes, key: bytes | None = None) -> None:
        self._futures.append(self.p.send(topic, value=value, key=key, partition=partition))

    def flush(self) -> list[tuple[int, int, bytes]]:
        self.p.flush(timeout=OP_TIMEOUT_S)
        futures, self._futures = self._futures, []
        out = []
        for f in futures:
            md = f.get(timeout=OP_TIMEOUT_S)
            out.append((md.partition, md.offset, b""))
        return out

    def commit(self) -> None:
        call_with_deadline(self.p.commit_transaction, what="commit_transaction")

    def abort(self) -> None:
        call_with_deadline(self.p.abort_transaction, what="abort_transaction")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.p.close(timeout=5)


class _AioKafkaTxn(TxnProducer):
    """aiokafka on an event loop of its own, so synchronous tests can drive it."""

    client = "aiokafka"

    def __init__(self, bootstrap: str, txn_id: str, timeout_ms: int | None) -> None:
        from aiokafka import AIOKafkaProducer

        self.loop = asyncio.new_event_loop()
        extra: dict[str, Any] = {}
        if timeout_ms is not None:
            extra["transaction_timeout_ms"] = timeout_ms

        async def make() -> Any:
            return AIOKafkaProducer(
                bootstrap_servers=bootstrap,
                transactional_id=txn_id,
                linger_ms=5,
                request_timeout_ms=int(OP_TIMEOUT_S * 1000),
                **extra,
            )

        self.p = self.run(make())
        self._futures: list[Any] = []

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = OP_TIMEOUT_S) -> T:
        return self.loop.run_until_complete(asyncio.wait_for(coro, timeout))

    def init(self) -> None:
        self.run(self.p.start())  # start() runs InitProducerId for a transactional producer

    def begin(self) -> None:
        self.run(self.p.begin_transaction())

    def send(self, topic: str, partition: int, value: bytes, key: bytes | None = None) -> None:
        self._futures.append(
            self.run(self.p.send(topic, value=value, key=key, partition=partition))
        )

    def flush(self) -> list[tuple[int, int, bytes]]:
        futures, self._futures = self._futures, []
        out = []
        for f in futures:
            md = self.run(f)
            out.append((md.partition, md.offset, b""))
        return out

    def commit(self) -> None:
        self.run(self.p.commit_transaction())

    def abort(self) -> None:
        self.run(self.p.abort_transaction())

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.run(self.p.stop(), timeout=10)
        self.loop.close()


def make_txn_producer(
    client: str, bootstrap: str, txn_id: str, timeout_ms: int | None = None
) -> TxnProducer:
    """A transactional producer of `client` (not yet initialised: call `init()`)."""
    kinds: dict[str, type[TxnProducer]] = {
        "confluent": _ConfluentTxn,
        "kafka-python": _KafkaPythonTxn,
        "aiokafka": _AioKafkaTxn,
    }
    return kinds[client](bootstrap, txn_id, timeout_ms)  # type: ignore[call-arg]


# ---- offsets ---------------------------------------------------------------------------


def end_offset(bootstrap: str, topic: str, partition: int, committed: bool) -> int:
    """One partition's end_offsets: the LSO with `committed`, else the high watermark."""
    return end_offsets(bootstrap, topic, [partition], committed)[partition]


def end_offsets(
    bootstrap: str,
    topic: str,
    partitions: Iterable[int],
    committed: bool,
    timeout: float = OP_TIMEOUT_S,
) -> dict[int, int]:
    """ListOffsets latest: the LSO with `committed`, else the high watermark."""
    admin = admin_client(bootstrap)
    level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    futures = admin.list_offsets(
        {TopicPartition(topic, p): OffsetSpec.latest() for p in partitions},
        isolation_level=level,
        request_timeout=timeout,
    )
    return {tp.partition: f.result(timeout=timeout).offset for tp, f in futures.items()}


def wait_stable(
    bootstrap: str, topic: str, partitions: Iterable[int], timeout: float = OP_TIMEOUT_S
) -> dict[int, int]:
    """Wait until no transaction is open on the partitions (LSO == high watermark, which
    means every marker is written); return the end offsets."""
    parts = list(partitions)
    last: list[Any] = [None]

    def stable() -> dict[int, int] | None:
        try:
            lso = end_offsets(bootstrap, topic, parts, committed=True, timeout=10)
            hw = end_offsets(bootstrap, topic, parts, committed=False, timeout=10)
        except (KafkaException, TimeoutError) as exc:  # starting, or a dead leader still named
            last[0] = exc
            return None
        last[0] = (lso, hw)
        return hw if lso == hw else None

    try:
        return wait_for(stable, timeout, f"LSO == high watermark on {topic}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last (LSO, HW) or error: {last[0]}") from None


# ---- readers ---------------------------------------------------------------------------


def read_records(
    client: str,
    bootstrap: str,
    topic: str,
    ends: Mapping[int, int],
    *,
    committed: bool,
    timeout: float = OP_TIMEOUT_S,
    linger: float = 0.0,
) -> list[Rec]:
    """Every record a consumer of `client` is given from the start of each partition in
    `ends` until its position reaches `ends[p]`; then `linger` seconds more of polling, so
    a test can show that nothing beyond arrives. Sorted by (partition, offset)."""
    readers = {
        "confluent": _read_confluent,
        "kafka-python": _read_kafka_python,
        "aiokafka": _read_aiokafka,
    }
    got = readers[client](bootstrap, topic, dict(ends), committed, timeout, linger)
    return sorted(got)


def _reached(positions: Mapping[int, int], ends: Mapping[int, int]) -> bool:
    # An empty partition (end 0) is reached at once: librdkafka reports no position
    # (-1001) for a partition it never fetched a record from.
    return all(end <= 0 or positions.get(p, 0) >= end for p, end in ends.items())


def _read_confluent(
    bootstrap: str,
    topic: str,
    ends: dict[int, int],
    committed: bool,
    timeout: float,
    linger: float,
) -> list[Rec]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "txn-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "isolation.level": "read_committed" if committed else "read_uncommitted",
            "logger": QUIET_LOGGER,
            "log_level": 0,
        }
    )
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        got: list[Rec] = []
        deadline = time.monotonic() + timeout
        stop_at: float | None = None
        while True:
            now = time.monotonic()
            if stop_at is None:
                positions = {
                    tp.partition: tp.offset
                    for tp in c.position([TopicPartition(topic, p) for p in ends])
                }
                if _reached(positions, ends):
                    stop_at = now + linger
            if stop_at is not None and now >= stop_at:
                return got
            if now > deadline:
                raise AssertionError(
                    f"confluent reader of {topic} did not reach {ends} within {timeout} s; "
                    f"positions {positions}, {len(got)} records"
                )
            for msg in c.consume(1000, 0.1):
                if msg.error() is not None:
                    raise AssertionError(f"consumer error reading {topic}: {msg.error()}")
                got.append(Rec(msg.partition(), msg.offset(), msg.key(), msg.value()))
    finally:
        c.close()


def _read_kafka_python(
    bootstrap: str,
    topic: str,
    ends: dict[int, int],
    committed: bool,
    timeout: float,
    linger: float,
) -> list[Rec]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    c = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed" if committed else "read_uncommitted",
        request_timeout_ms=int(OP_TIMEOUT_S * 1000) + 5000,
    )
    try:
        tps = [KTP(topic, p) for p in ends]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        got: list[Rec] = []
        deadline = time.monotonic() + timeout
        stop_at: float | None = None
        positions: dict[int, int] = {}
        while True:
            now = time.monotonic()
            if stop_at is None:
                positions = {tp.partition: c.position(tp, timeout_ms=10_000) for tp in tps}
                if _reached(positions, ends):
                    stop_at = now + linger
            if stop_at is not None and now >= stop_at:
                return got
            if now > deadline:
                raise AssertionError(
                    f"kafka-python reader of {topic} did not reach {ends} within {timeout} s; "
                    f"positions {positions}, {len(got)} records"
                )
            for _tp, msgs in c.poll(timeout_ms=100, max_records=5000).items():
                got.extend(Rec(m.partition, m.offset, m.key, m.value) for m in msgs)
    finally:
        c.close()


def _read_aiokafka(
    bootstrap: str,
    topic: str,
    ends: dict[int, int],
    committed: bool,
    timeout: float,
    linger: float,
) -> list[Rec]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATP

    async def run() -> list[Rec]:
        c = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed" if committed else "read_uncommitted",
        )
        await c.start()
        try:
            tps = [ATP(topic, p) for p in ends]
            c.assign(tps)
            await c.seek_to_beginning(*tps)
            got: list[Rec] = []
            stop_at: float | None = None
            while True:
                now = time.monotonic()
                if stop_at is None:
                    positions = {tp.partition: await c.position(tp) for tp in tps}
                    if _reached(positions, ends):
                        stop_at = now + linger
                if stop_at is not None and now >= stop_at:
                    return got
                batch = await c.getmany(timeout_ms=100)
                for _tp, msgs in batch.items():
                    got.extend(Rec(m.partition, m.offset, m.key, m.value) for m in msgs)
        finally:
            await c.stop()

    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(asyncio.wait_for(run(), timeout + linger + 10))
    except TimeoutError:
        raise AssertionError(
            f"aiokafka reader of {topic} did not reach {ends} within {timeout} s"
        ) from None
    finally:
        loop.close()


# ---- on disk ---------------------------------------------------------------------------


@dataclass(frozen=True)
class DiskBatch:
    """One batch of a partition's segment files, as a crash left them."""

    path: Path
    position: int
    header: BatchHeader
    marker: ControlType | None  # COMMIT / ABORT for a control batch
    records: tuple[tuple[bytes | None, bytes | None], ...]

    @property
    def end(self) -> int:
        return self.position + self.header.size


def partition_batches(data_dir: str | Path, topic: str, partition: int) -> list[DiskBatch]:
    """Every whole batch of `<data_dir>/<topic>-<partition>/*.log`, oldest first."""
    out: list[DiskBatch] = []
    directory = Path(data_dir) / f"{topic}-{partition}"
    for path in sorted(directory.glob("*.log")):
        data = path.read_bytes()
        batches, _ = scan_batches(data)
        for b in batches:
            raw = data[b.position : b.position + b.header.size]
            marker = parse_control_record(raw)[0] if b.header.is_control else None
            records = () if marker is not None else decode_records(raw)
            out.append(
                DiskBatch(
                    path,
                    b.position,
                    b.header,
                    marker,
                    tuple((r.key, r.value) for r in records),
                )
            )
    return out


def txn_log_records(
    data_dir: str | Path, transactional_id: str, num_partitions: int = 50
) -> list[tuple[DiskBatch, TxnTransit | None]]:
    """The `__transaction_state` records of one transactional id in log order, each with
    the batch holding it (None for a tombstone)."""
    out: list[tuple[DiskBatch, TxnTransit | None]] = []
    for partition in range(num_partitions):
        for batch in partition_batches(data_dir, "__transaction_state", partition):
            for key, value in batch.records:
                if key is None or decode_key(key) != transactional_id:
                    continue
                out.append(
                    (batch, None if value is None else decode_value(transactional_id, value))
                )
    return out


def markers_after(batches: Sequence[DiskBatch], producer_id: int, offset: int) -> list[DiskBatch]:
    """The control batches of `producer_id` at or after `offset`."""
    return [
        b
        for b in batches
        if b.marker is not None
        and b.header.producer_id == producer_id
        and b.header.base_offset >= offset
    ]


def last_txn_state(
    data_dir: str | Path, transactional_id: str, num_partitions: int = 50
) -> TxnTransit | None:
    """The newest `__transaction_state` record of `transactional_id` on disk, if any."""
    records = txn_log_records(data_dir, transactional_id, num_partitions)
    return records[-1][1] if records else None


def truncate_batch(batch: DiskBatch) -> None:
    """Cut a segment file just before `batch`, which must be the file's last batch: the
    state a crash leaves when the process dies before writing it. An ABORT marker's
    `.txnindex` entry goes too (it is written with the marker)."""
    size = batch.path.stat().st_size
    assert size == batch.end, f"{batch.path}: batch at {batch.position} is not the last one"
    with open(batch.path, "r+b") as f:
        f.truncate(batch.position)
    if batch.marker is ControlType.ABORT:
        index = batch.path.with_suffix(".txnindex")
        if index.exists():
            raw = index.read_bytes()
            keep = [
                raw[i : i + TXN_INDEX_ENTRY.size]
                for i in range(0, len(raw), TXN_INDEX_ENTRY.size)
                if TXN_INDEX_ENTRY.unpack_from(raw, i)[3] < batch.header.base_offset
            ]
            index.write_bytes(b"".join(keep))


@pytest.fixture
def producers() -> Iterator[list[TxnProducer]]:
    """Producers a test made; closed at teardown whatever happened to them (import the
    fixture into a test module to use it)."""
    made: list[TxnProducer] = []
    yield made
    for p in made:
        p.close()


# ---- hanging transactions ----------------------------------------------------------------

HANGING_PRODUCER_ID = 4_000_000_000  # far above any id a broker hands out


def produce_hanging_transaction(bootstrap: str, topic: str, age_ms: int) -> None:
    """A transactional batch of two records at offset 0 of partition 0 whose transaction
    no coordinator will ever end, made as hanging transactions were before KIP-890: a raw
    produce, accepted because the broker's partition verification is off."""
    batch = build_batch(
        [(b"h", b"hanging-1", ()), (b"h", b"hanging-2", ())],
        timestamp_ms=int(time.time() * 1000) - age_ms,
        producer_id=HANGING_PRODUCER_ID,
        producer_epoch=0,
        base_sequence=0,
        transactional=True,
    )
    request = dataclasses.replace(
        produce_request(topic, {0: batch}), transactional_id="ghost-of-a-producer"
    )
    with RawConnection(bootstrap) as conn:
        response = conn.call(request)
    (partition,) = response.responses[0].partition_responses
    assert partition.error_code == ErrorCode.none, partition
    assert partition.base_offset == 0


# Every test of a module that takes this fixture runs against a broker at transaction
# version 0 and one at 2: librdkafka never uses version 2 (it stays on AddPartitionsToTxn and
# EndTxn v1), so finalizing it for Java clients must leave librdkafka's transactions exactly
# as they were. One broker per module and version (import the fixture into the module).
@pytest.fixture(scope="module", params=["0", "2"], ids=["tv0", "tv2"])
def txn_broker_process_each_version(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[BrokerProcess]:
    overrides = {**TXN_BROKER_OVERRIDES, "onceflow.transaction.version": request.param}
    b = BrokerProcess(tmp_path_factory.mktemp("txn") / "data", overrides)
    b.start()
    try:
        yield b
        assert b.stop() == 0, f"unclean broker shutdown; its log:\n{b.log_tail()}"
    finally:
        b.kill()


def running_without_internal_errors(b: BrokerProcess) -> Iterator[BrokerProcess]:
    """A shared broker for one test: started again if an earlier test stopped it; the test
    fails if the broker logged an internal error while it ran."""
    if not b.running:
        b.start()
    mark = b.log_size()
    yield b
    errors = b.internal_errors(mark)
    assert not errors, "the broker logged internal errors:\n" + "\n---\n".join(errors[:5])
