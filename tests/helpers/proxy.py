"""A fault-injecting Kafka proxy, for tests of what clients do when the network misbehaves.

The proxy listens on a loopback port and forwards every connection to the broker. The
broker advertises the proxy's address (`advertised.listeners`), so clients reach it through
the proxy after bootstrap and after every reconnect. The proxy reads Kafka frames in both
directions (a 4-byte size, then the request header or the response's correlation id) and
can inject, seeded and counted:

- `drop_produce_response_every` / `drop_produce_responses`: the response to the Nth Produce
  request is awaited from the broker (so the batch is appended, and with acks=all durable)
  and then both connections are cut without forwarding it. The client must retry a batch
  the broker already has.
- `delay_probability` / `max_delay_s`: a response waits a random time before it is
  forwarded (responses on a connection keep their order, as Kafka's do).
- `cut_after_produce_probability` / `max_cut_delay_s`: a connection is cut at a random
  moment shortly after a Produce request was forwarded; the response may or may not have
  come back.
- `hold_responses()`: swallow every response until `release_responses()`, which cuts the
  connections that lost one. Used to make sure batches are appended but unanswered when a
  broker is killed.

Produce requests (v3-v8) and their responses are decoded, so the proxy knows which batches
(producer id, epoch, sequences) a client sent, which it sent again, and which batches the
broker acknowledged but whose acknowledgement the client never got. A test asserts that
the faults fired and that such batches were retried, so it cannot pass vacuously.

`read_partition` reads a partition straight from the broker with raw Fetch requests,
behind the proxy's back, with each record's producer id and sequence.

Everything runs on an asyncio loop in a daemon thread, so synchronous clients can use it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import random
import struct
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, TypeVar

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader

from onceflow.records.batch import scan_batches
from onceflow.records.record import decode_records
from tests.helpers.wire import RawConnection, fetch_request

__all__ = [
    "BatchKey",
    "FaultProxy",
    "Faults",
    "LoggedRecord",
    "PartitionContents",
    "ProxyStats",
    "read_partition",
]

PRODUCE = 0
MAX_DECODED_PRODUCE_VERSION = 12
FIRST_FLEXIBLE_PRODUCE_VERSION = 9  # request header v2, response header v1: tag buffers
MAX_FRAME_BYTES = 200 * 1024 * 1024
CONNECT_TIMEOUT_S = 5.0
CALL_TIMEOUT_S = 10.0
SEQUENCE_MODULUS = 1 << 31

T = TypeVar("T")


class BatchKey(NamedTuple):
    """One producer batch, as a retry of it looks the same."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_sequence: int


@dataclass(frozen=True)
class Faults:
    """What to inject. The defaults inject nothing: the proxy is a plain forwarder."""

    drop_produce_response_every: int = 0  # every Nth Produce request (1-based); 0: never
    drop_produce_responses: frozenset[int] = frozenset()  # or exactly these ordinals
    delay_probability: float = 0.0
    max_delay_s: float = 0.0
    cut_after_produce_probability: float = 0.0
    max_cut_delay_s: float = 0.0


@dataclass
class ProxyStats:
    """What the proxy saw and did. Produce requests with acks=0 are forwarded, never counted."""

    connections: int = 0
    refused_connections: int = 0  # the broker was not listening
    produce_requests: int = 0
    dropped_responses: int = 0  # fault (a)
    delayed_responses: int = 0  # fault (b)
    random_cuts: int = 0  # fault (c)
    held_responses: int = 0  # swallowed by hold_responses()
    batches_sent: int = 0  # producer batches forwarded, retries included
    batches_resent: int = 0  # forwards of a batch that had been forwarded before
    # Batches the broker answered with success but whose answer the client never got ...
    unanswered_appends: set[BatchKey] = field(default_factory=set)
    # ... and those of them that the client then sent again.
    retried_appends: set[BatchKey] = field(default_factory=set)

    def copy(self) -> ProxyStats:
        return replace(
            self,
            unanswered_appends=set(self.unanswered_appends),
            retried_appends=set(self.retried_appends),
        )


@dataclass
class _Pending:
    """A forwarded Produce request whose response has not come back yet."""

    version: int
    drop: bool
    batches: dict[tuple[str, int], list[BatchKey]]


class _Link:
    """One client connection and its twin to the broker."""

    def __init__(self, client: asyncio.StreamWriter, broker: asyncio.StreamWriter) -> None:
        self.client = client
        self.broker = broker
        self.pending: dict[int, _Pending] = {}
        self.closed = False
        self.frozen = False  # a response was swallowed; nothing after it may be forwarded

    def cut(self) -> None:
        """Abort both sides at once: no FIN after buffered data, like a network failure."""
        if self.closed:
            return
        self.closed = True
        for writer in (self.client, self.broker):
            with contextlib.suppress(Exception):
                writer.transport.abort()


async def _read_frame(reader: asyncio.StreamReader) -> bytes | None:
    """A whole frame with its size prefix, or None at EOF, a reset or a nonsense size."""
    try:
        head = await reader.readexactly(4)
        (size,) = struct.unpack(">i", head)
        if size < 0 or size > MAX_FRAME_BYTES:
            return None
        return head + await reader.readexactly(size)
    except (asyncio.IncompleteReadError, ConnectionError, OSError):
        return None


def _request_header(frame: bytes) -> tuple[int, int, int, int]:
    """(api key, version, correlation id, body position) of a v1 request header, or of a
    v2 one (its tag buffer skipped) for a flexible Produce."""
    api_key, version, correlation = struct.unpack_from(">hhi", frame, 4)
    (client_id_len,) = struct.unpack_from(">h", frame, 12)
    pos = 14 + max(client_id_len, 0)
    if api_key == PRODUCE and version >= FIRST_FLEXIBLE_PRODUCE_VERSION:
        count, pos = _uvarint(frame, pos)
        for _ in range(count):
            _, pos = _uvarint(frame, pos)  # tag
            size, pos = _uvarint(frame, pos)
            pos += size
    return api_key, version, correlation, pos


def _uvarint(frame: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = frame[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


class FaultProxy:
    def __init__(
        self,
        target_port: int | None = None,
        *,
        faults: Faults | None = None,
        seed: int = 0,
        host: str = "127.0.0.1",
    ) -> None:
        self.host = host
        self.target_port = target_port  # may be set or changed later (a broker moved)
        self.port = 0
        self._faults = faults or Faults()
        self._rng = random.Random(seed)
        self._stats = ProxyStats()
        self._batch_sends: Counter[BatchKey] = Counter()
        self._links: set[_Link] = set()
        self._holding = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None

    # ---- lifecycle (any thread) --------------------------------------------------------

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, port: int = 0) -> FaultProxy:
        if self._loop is not None:
            raise RuntimeError("proxy already started")
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="fault-proxy", daemon=True)
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._listen(port), loop)
        future.result(CALL_TIMEOUT_S)
        return self

    async def _listen(self, port: int) -> None:
        self._server = await asyncio.start_server(self._serve_client, self.host, port)
        self.port = int(self._server.sockets[0].getsockname()[1])

    def stop(self) -> None:
        loop = self._loop
        if loop is None:
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(CALL_TIMEOUT_S)
        loop.call_soon_threadsafe(loop.stop)
        assert self._thread is not None
        self._thread.join(CALL_TIMEOUT_S)
        if not self._thread.is_alive():
            loop.close()
        self._loop = None

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for link in list(self._links):
            link.cut()
        # Let the connection tasks see the cut and finish.
        for _ in range(50):
            if not self._links:
                break
            await asyncio.sleep(0.01)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- control (any thread) ----------------------------------------------------------

    def _in_loop(self, fn: Callable[[], T]) -> T:
        loop = self._loop
        if loop is None:
            return fn()
        if threading.current_thread() is self._thread:
            return fn()
        result: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            try:
                result.set_result(fn())
            except BaseException as exc:  # handed to the caller's thread
                result.set_exception(exc)

        loop.call_soon_threadsafe(run)
        return result.result(CALL_TIMEOUT_S)

    def set_faults(self, faults: Faults, seed: int | None = None) -> None:
        """Replace the faults (and reseed); counting of Produce requests goes on."""

        def apply() -> None:
            self._faults = faults
            if seed is not None:
                self._rng = random.Random(seed)

        self._in_loop(apply)

    def clear_faults(self) -> None:
        self.set_faults(Faults())

    def stats(self) -> ProxyStats:
        return self._in_loop(self._stats.copy)

    def reset_stats(self) -> None:
        def reset() -> None:
            self._stats = ProxyStats()
            self._batch_sends.clear()

        self._in_loop(reset)

    def cut_all(self) -> int:
        """Cut every open connection; return how many there were."""

        def cut() -> int:
            links = [link for link in self._links if not link.closed]
            for link in links:
                link.cut()
            return len(links)

        return self._in_loop(cut)

    def hold_responses(self) -> None:
        """Forward requests but swallow every response from now on."""

        def hold() -> None:
            self._holding = True

        self._in_loop(hold)

    def release_responses(self) -> int:
        """Stop swallowing; cut the connections that lost a response. Returns their number."""

        def release() -> int:
            self._holding = False
            frozen = [link for link in self._links if link.frozen and not link.closed]
            for link in frozen:
                link.cut()
            return len(frozen)

        return self._in_loop(release)

    # ---- the connections (loop thread) -------------------------------------------------

    async def _serve_client(
        self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
    ) -> None:
        self._stats.connections += 1
        try:
            if self.target_port is None:
                raise ConnectionRefusedError("no target port")
            broker_reader, broker_writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.target_port), CONNECT_TIMEOUT_S
            )
        except (OSError, TimeoutError):
            self._stats.refused_connections += 1
            client_writer.transport.abort()
            return
        link = _Link(client_writer, broker_writer)
        self._links.add(link)
        up = asyncio.create_task(self._upstream(link, client_reader))
        down = asyncio.create_task(self._downstream(link, broker_reader))
        try:
            await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            link.cut()
            for task in (up, down):
                task.cancel()
            await asyncio.gather(up, down, return_exceptions=True)
            self._links.discard(link)

    async def _upstream(self, link: _Link, reader: asyncio.StreamReader) -> None:
        while not link.closed:
            frame = await _read_frame(reader)
            if frame is None or link.closed:
                return
            pending = self._inspect_request(link, frame)
            link.broker.write(frame)
            await link.broker.drain()
            faults = self._faults
            if (
                pending is not None
                and faults.cut_after_produce_probability > 0
                and self._rng.random() < faults.cut_after_produce_probability
            ):
                delay = self._rng.uniform(0.0, faults.max_cut_delay_s)
                asyncio.get_running_loop().call_later(delay, self._random_cut, link)

    def _random_cut(self, link: _Link) -> None:
        if not link.closed:
            self._stats.random_cuts += 1
            link.cut()

    async def _downstream(self, link: _Link, reader: asyncio.StreamReader) -> None:
        while not link.closed:
            frame = await _read_frame(reader)
            if frame is None or link.closed:
                return
            (correlation,) = struct.unpack_from(">i", frame, 4)
            pending = link.pending.pop(correlation, None)
            if pending is not None and pending.drop:
                self._stats.dropped_responses += 1
                self._note_unanswered(pending, frame)
                link.cut()
                return
            if self._holding or link.frozen:
                self._stats.held_responses += 1
                if pending is not None:
                    self._note_unanswered(pending, frame)
                link.frozen = True
                continue
            faults = self._faults
            if faults.delay_probability > 0 and self._rng.random() < faults.delay_probability:
                self._stats.delayed_responses += 1
                await asyncio.sleep(self._rng.uniform(0.0, faults.max_delay_s))
                if link.closed:
                    return
            link.client.write(frame)
            await link.client.drain()

    # ---- decoding (loop thread) --------------------------------------------------------

    def _inspect_request(self, link: _Link, frame: bytes) -> _Pending | None:
        """Count a Produce request and its batches; decide whether to drop its response."""
        if len(frame) < 14:
            return None
        api_key, version, correlation, pos = _request_header(frame)
        if api_key != PRODUCE or not 3 <= version <= MAX_DECODED_PRODUCE_VERSION:
            return None
        request: Any
        try:
            request, _ = entity_reader(load_request_schema(PRODUCE, version))(frame, pos)
        except Exception:
            return None  # the broker will refuse it; nothing to count
        if int(request.acks) == 0:
            return None  # no response will come
        batches: dict[tuple[str, int], list[BatchKey]] = {}
        for topic in request.topic_data:
            for part in topic.partition_data:
                keys = []
                found, _ = scan_batches(part.records or b"", verify_crc=False)
                for scanned in found:
                    h = scanned.header
                    if h.producer_id < 0:
                        continue
                    key = BatchKey(
                        str(topic.name),
                        int(part.index),
                        h.producer_id,
                        h.producer_epoch,
                        h.base_sequence,
                        h.last_sequence,
                    )
                    keys.append(key)
                    self._note_sent(key)
                batches[(str(topic.name), int(part.index))] = keys
        stats = self._stats
        stats.produce_requests += 1
        n = stats.produce_requests
        every = self._faults.drop_produce_response_every
        drop = (every > 0 and n % every == 0) or n in self._faults.drop_produce_responses
        pending = _Pending(version, drop, batches)
        link.pending[correlation] = pending
        return pending

    def _note_sent(self, key: BatchKey) -> None:
        stats = self._stats
        stats.batches_sent += 1
        if self._batch_sends[key]:
            stats.batches_resent += 1
        self._batch_sends[key] += 1
        if key in stats.unanswered_appends:
            stats.retried_appends.add(key)

    def _note_unanswered(self, pending: _Pending, frame: bytes) -> None:
        """Remember the batches of a lost response that the broker had accepted."""
        response: Any
        try:
            body = 9 if pending.version >= FIRST_FLEXIBLE_PRODUCE_VERSION else 8  # tag buffer
            schema = load_response_schema(PRODUCE, pending.version)
            response, _ = entity_reader(schema)(frame, body)
        except Exception:
            return
        for topic in response.responses:
            for part in topic.partition_responses:
                if part.error_code.value == 0:
                    keys = pending.batches.get((str(topic.name), int(part.index)), [])
                    self._stats.unanswered_appends.update(keys)


# ---- reading the log behind the proxy's back ------------------------------------------------


class LoggedRecord(NamedTuple):
    offset: int
    producer_id: int
    producer_epoch: int
    sequence: int  # -1 without a producer id
    key: bytes | None
    value: bytes | None


class PartitionContents(NamedTuple):
    high_watermark: int
    log_start_offset: int
    records: list[LoggedRecord]

    def values(self) -> list[bytes | None]:
        return [r.value for r in self.records]


def read_partition(
    bootstrap: str, topic: str, partition: int, max_bytes: int = 4 * 1024 * 1024
) -> PartitionContents:
    """Every record of a partition up to its high watermark, with CRCs checked.

    Talks to `bootstrap` directly with Fetch v11 (read_uncommitted), so metadata and the
    advertised address play no part: this is what the broker's log holds.
    """
    records: list[LoggedRecord] = []
    offset = -1
    high_watermark = log_start = 0
    with RawConnection(bootstrap) as conn:
        while True:
            response = conn.call(
                fetch_request(
                    topic,
                    {partition: (max(offset, 0), -1)},
                    max_bytes=max_bytes,
                    max_wait_ms=0,
                    min_bytes=0,
                )
            )
            (topic_response,) = response.responses
            (part,) = topic_response.partitions
            error = part.error_code.value
            assert error == 0, f"fetch of {topic}-{partition} at {offset} failed: error {error}"
            high_watermark = int(part.high_watermark)
            log_start = int(part.log_start_offset)
            if offset < 0:
                offset = log_start
            if offset >= high_watermark:
                break
            data = part.records or b""
            found, _ = scan_batches(data, verify_crc=True)
            assert found, f"no whole batch at {topic}-{partition}@{offset} ({len(data)} bytes)"
            for scanned in found:
                h = scanned.header
                batch = memoryview(data)[scanned.position : scanned.position + h.size]
                for record in decode_records(batch):
                    if record.offset < offset:
                        continue  # a batch that starts below the fetch offset
                    seq = (
                        (h.base_sequence + record.offset - h.base_offset) % SEQUENCE_MODULUS
                        if h.base_sequence >= 0
                        else -1
                    )
                    records.append(
                        LoggedRecord(
                            record.offset,
                            h.producer_id,
                            h.producer_epoch,
                            seq,
                            record.key,
                            record.value,
                        )
                    )
                offset = max(offset, h.next_offset)
    return PartitionContents(high_watermark, log_start, records)
