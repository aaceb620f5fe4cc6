"""The network adapter: asyncio Protocols around the sans-IO protocol core.

Each connection receives straight into its FrameDecoder's buffers (a BufferedProtocol, so
a large produce request is never copied on the way in), processes requests one at a time in
arrival order (as Kafka does), and writes responses in the same order. A produce waiting for
its fsync does not hold up the next request: its response is a Deferred that the writer
awaits in turn, so pipelined produces share group commits. Record bytes of a fetch go from
the segment file to the socket with sendfile (over TLS, which must encrypt them, in chunks).
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from onceflow.broker.authentication import AuthState, ConnectionAuth, IllegalSaslState
from onceflow.broker.handlers.base import Handler, RequestContext
from onceflow.broker.responses import Deferred, NoResponse, RawBody
from onceflow.broker.throttling import apply_quotas, timed
from onceflow.errors import KafkaError, ProtocolError
from onceflow.protocol import codec
from onceflow.protocol.api_versions import ApiKey, is_supported
from onceflow.protocol.framing import Frame, FrameDecoder, size_prefix
from onceflow.security.principal import principal_from_certificate
from onceflow.storage.partition_log import FileRegion

if TYPE_CHECKING:
    from onceflow.broker.security import ListenerSecurity
    from onceflow.broker.services import BrokerServices

log = logging.getLogger(__name__)
audit = logging.getLogger("onceflow.audit")

# Regions below this size are read and written with the header in one write: for small
# regions a read is cheaper than pausing the transport for sendfile.
SENDFILE_MIN_BYTES = 64 * 1024
# Where sendfile cannot be used (TLS), a region is read and written in chunks of this size,
# each once the transport has room: a client may ask for a partition's records 50 MB at a
# time, and that region whole, read, then encrypted, then queued, is three copies of it.
COPY_CHUNK_BYTES = 1 << 20
# Requests a connection may have decoded but not yet answered before it stops reading.
MAX_QUEUED_REQUESTS = 16
# A client that has not finished its TLS handshake by then is disconnected.
TLS_HANDSHAKE_TIMEOUT_S = 10.0


class _FdFile:
    """The file-like object loop.sendfile wants, over a descriptor we keep owning."""

    mode = "rb"

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def fileno(self) -> int:
        return self._fd

    def seek(self, offset: int, whence: int = 0) -> int:
        return offset  # sendfile passes explicit offsets; the position is never used


class TlsAcceptor(asyncio.Protocol):
    """Accepts a TLS connection: runs the handshake, then hands the connection over.

    The handshake is driven here (not by create_server's ssl=) so that a failed one, a
    plaintext client or garbage, is logged for the audit with the client's address."""

    def __init__(self, connection: KafkaConnection, context: ssl.SSLContext) -> None:
        self.connection = connection
        self.context = context
        self._task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.pause_reading()  # the TLS protocol takes over reading
        self._task = asyncio.get_running_loop().create_task(self._handshake(transport))

    async def _handshake(self, transport: asyncio.Transport) -> None:
        peer = _peer(transport)
        try:
            tls = await asyncio.get_running_loop().start_tls(
                transport,
                self.connection,
                self.context,
                server_side=True,
                ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S,
            )
        except (OSError, ConnectionError, TimeoutError, ssl.SSLError) as exc:
            if isinstance(exc, (ssl.SSLError, TimeoutError)):
                audit.info("Failed authentication with %s (SSL handshake failed: %s)", peer, exc)
            else:  # closed before a handshake began: a port probe, not a failed login
                log.debug("connection from %s closed during the TLS handshake: %r", peer, exc)
            transport.abort()
            return
        if tls is None:  # the client went away during the handshake
            return
        self.connection.connection_made(tls)

    def data_received(self, data: bytes) -> None:  # pragma: no cover - reading is paused
        pass

    def connection_lost(self, exc: Exception | None) -> None:
        pass


def _peer(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    return f"{peer[0]}:{peer[1]}" if peer else "?"


class KafkaConnection(asyncio.BufferedProtocol):
    def __init__(
        self, broker: BrokerServices, handlers: Mapping[int, Handler], listener: ListenerSecurity
    ) -> None:
        self.broker = broker
        self.handlers = handlers
        self.listener = listener
        self.auth: ConnectionAuth | None = None
        self.decoder = FrameDecoder(broker.max_request_bytes)
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self._requests: asyncio.Queue[Frame] = asyncio.Queue()
        # Each response with the time its request's handling started (for the metrics).
        self._responses: asyncio.Queue[tuple[codec.RequestHeader, Any, float]] = asyncio.Queue(
            MAX_QUEUED_REQUESTS
        )
        self._writable = asyncio.Event()
        self._writable.set()
        self._tasks: list[asyncio.Task[None]] = []
        self._paused = False
        self._in_flight = 0
        self._handling = False
        self._writing = False  # the writer task holds a response it has not finished
        self._closed = False
        self._mute_ms = 0  # what the last request's quota check asked for (throttling.py)

    @property
    def busy(self) -> bool:
        """True while a received request has not been fully answered."""
        return self._in_flight > 0 or self.decoder.buffered > 0

    # ---- asyncio.BufferedProtocol -----------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.auth = ConnectionAuth(self.listener, self.broker.security, peer[0] if peer else "?")
        if self.listener.tls is not None and not self.listener.sasl:
            self._authenticate_certificate(transport)
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._process_requests()),
            loop.create_task(self._write_responses()),
        ]
        self.broker.connections.add(self)

    def _authenticate_certificate(self, transport: asyncio.Transport) -> None:
        """An SSL listener's principal: the client certificate's, else ANONYMOUS."""
        assert self.auth is not None and self.listener.principal_mapper is not None
        ssl_object = transport.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        if not der:
            return
        try:
            principal = principal_from_certificate(der, self.listener.principal_mapper)
        except ValueError as exc:  # no mapping rule matches, or an unreadable subject
            audit.info("Failed authentication with %s (SSL principal: %s)", self.peer, exc)
            self.auth.state = AuthState.FAILED
            transport.abort()
            return
        self.auth.set_tls_principal(principal)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.decoder.buffer()

    def buffer_updated(self, nbytes: int) -> None:
        try:
            frames = self.decoder.received(nbytes)
        except ProtocolError as exc:
            self.abort(f"malformed frame: {exc}")
            return
        for frame in frames:
            self._in_flight += 1
            self._requests.put_nowait(frame)
        # (With TLS, a first request can arrive with the handshake's last bytes, before
        # connection_made: it simply waits in the queue.)
        if (
            self._requests.qsize() >= MAX_QUEUED_REQUESTS
            and not self._paused
            and self.transport is not None
        ):
            self.transport.pause_reading()
            self._paused = True

    def connection_lost(self, exc: Exception | None) -> None:
        # A request being handled runs to its end and only its response is dropped:
        # cancelling a handler halfway (between a coordinator's log write and the state
        # change after it) left a transaction pending forever. Idle tasks are cancelled.
        self._closed = True
        processor, writer = self._tasks or (None, None)
        if writer is not None:
            writer.cancel()
        if processor is not None and not self._handling:
            processor.cancel()
        self._writable.set()
        self.broker.connections.discard(self)

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    # ---- request processing ----------------------------------------------------------

    def abort(self, reason: str) -> None:
        log.warning("closing connection from %s: %s", self.peer, reason)
        if self.transport is not None:
            self.transport.abort()

    async def _process_requests(self) -> None:
        metrics = self.broker.metrics
        while True:
            frame = await self._requests.get()
            started = time.perf_counter()
            if self._paused and self._requests.qsize() < MAX_QUEUED_REQUESTS // 2:
                assert self.transport is not None
                self.transport.resume_reading()
                self._paused = False
            self._handling = True
            try:
                header, result = await self._handle(frame)
            except IllegalSaslState as exc:
                audit.info("closing connection from %s: %s", self.peer, exc)
                self.abort(str(exc))
                return
            except ProtocolError as exc:
                self.abort(str(exc))
                return
            except Exception:
                log.exception("request from %s failed; closing the connection", self.peer)
                self.abort("internal error")
                return
            finally:
                self._handling = False
                if metrics is not None:
                    metrics.received(len(frame) + 4)
                self.decoder.recycle(frame)  # decoding copied what the request keeps
            if self._closed:
                return  # the client is gone; the work is done, the answer has nowhere to go
            mute, self._mute_ms = self._mute_ms, 0
            if isinstance(result, NoResponse):
                self._in_flight -= 1
                if metrics is not None:
                    metrics.request_done(header.api_key, started, None, 0)
            elif not self._write_now(header, result, started):
                await self._responses.put((header, result, started))
            if mute > 0:
                await self._mute(mute)

    async def _mute(self, ms: int) -> None:
        """KIP-219: after a throttled response, read no request from the client for the
        throttle time (its response goes out meanwhile)."""
        assert self.transport is not None
        if not self._paused:
            self.transport.pause_reading()
            self._paused = True
        await asyncio.sleep(ms / 1000)
        if self._paused and not self._closed and self._requests.qsize() < MAX_QUEUED_REQUESTS // 2:
            self.transport.resume_reading()
            self._paused = False

    async def _handle(self, frame: Frame) -> tuple[codec.RequestHeader, Any]:
        prefix = codec.peek_header(frame)
        if not is_supported(prefix.api_key, prefix.api_version):
            if prefix.api_key == ApiKey.API_VERSIONS:
                from onceflow.broker.handlers.api_versions import unsupported_version_response

                return (
                    codec.RequestHeader(ApiKey.API_VERSIONS, 0, prefix.correlation_id, None),
                    unsupported_version_response(),
                )
            # Kafka 4 closes the connection: there is no schema to answer an unknown version
            # in. Named once per client (unsupported_versions.py), not once per request.
            from onceflow.broker.unsupported_versions import report

            report(frame, prefix, self.peer)
            self._closed = True  # nothing after it on this connection is handled
            assert self.transport is not None
            self.transport.abort()
            return prefix, NoResponse()
        auth = self.auth
        assert auth is not None
        auth.check(prefix.api_key)
        header, request = codec.decode_request(frame)
        handler = self.handlers[header.api_key]
        ctx = RequestContext(header, self.broker, auth.session, auth)
        quotas = self.broker.client_quotas
        if not quotas.active:
            return header, await handler(ctx, request)
        work = timed(handler(ctx, request))  # the handler's own time, not its waits
        result = await work
        result, self._mute_ms = apply_quotas(
            quotas, ctx, request, result, len(frame) + 4, work.seconds
        )
        return header, result

    # ---- response writing ------------------------------------------------------------

    async def _write_responses(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._writing = False
            header, result, started = await self._responses.get()
            self._writing = True
            if isinstance(result, Deferred):
                try:
                    result = await _settle(result)
                except Exception:
                    log.exception("deferred response to %s failed", self.peer)
                    self.abort("internal error")
                    return
            try:
                head, parts = _encoded(header, result)
            except Exception:
                # A response its schema refuses is a broker bug: say so and close, rather
                # than leave the client waiting for an answer that never comes.
                log.exception("encoding the response to %s failed", self.peer)
                self.abort("internal error")
                return
            sent = await self._send(loop, head, parts)
            if self._answered(header, started, result, sent):
                return

    def _write_now(self, header: codec.RequestHeader, result: Any, started: float) -> bool:
        """Write a response that is ready, small and first in line at once (False: it goes
        to the writer task). Most answers are; handing each to the writer cost a task
        wake-up per request, a good part of a small request's CPU on a busy broker."""
        if (
            self._writing
            or isinstance(result, Deferred)
            or not self._responses.empty()
            or not self._writable.is_set()
            or self.transport is None
        ):
            return False
        try:
            head, parts = _encoded(header, result)
        except Exception:
            return False  # the writer encodes it again, says why it fails and closes
        if any(isinstance(p, FileRegion) and p.size >= SENDFILE_MIN_BYTES for p in parts):
            return False  # sendfile waits for the socket: the writer's job
        total = _body_size(head, parts)
        frame = [size_prefix(total), head]
        frame.extend(p.read() if isinstance(p, FileRegion) else p for p in parts)
        self.transport.write(b"".join(frame))
        self._answered(header, started, result, total + 4)
        return True

    def _answered(
        self, header: codec.RequestHeader, started: float, result: Any, sent: int
    ) -> bool:
        """Account for a response on the wire; True when the connection closes after it."""
        self._in_flight -= 1
        metrics = self.broker.metrics
        if metrics is not None:
            metrics.request_done(header.api_key, started, result, sent)
        if self.auth is not None and self.auth.failed:
            # Kafka answers a failed authentication, then closes the connection.
            assert self.transport is not None
            self.transport.close()
            return True
        return False

    async def _send(self, loop: asyncio.AbstractEventLoop, head: bytes, parts: list[Any]) -> int:
        """Write one response; returns its size on the wire."""
        transport = self.transport
        assert transport is not None
        total = _body_size(head, parts)
        pending = [size_prefix(total), head]
        for part in parts:
            if not isinstance(part, FileRegion):
                pending.append(part)
                continue
            fd = part.file.fileno()
            if fd is None or part.size < SENDFILE_MIN_BYTES:
                pending.append(part.read())
                continue
            transport.write(b"".join(pending))
            pending = []
            await self._sendfile(loop, transport, fd, part)
        if pending:
            transport.write(b"".join(pending))
        if not self._writable.is_set():
            await self._writable.wait()
        return total + 4

    async def _sendfile(
        self,
        loop: asyncio.AbstractEventLoop,
        transport: asyncio.Transport,
        fd: int,
        part: FileRegion,
    ) -> None:
        sent = 0
        if transport.get_extra_info("ssl_object") is None:  # TLS never takes sendfile
            try:
                sent = await loop.sendfile(
                    transport,
                    _FdFile(fd),  # type: ignore[arg-type]
                    part.position,
                    part.size,
                    fallback=False,
                )
            except (OSError, RuntimeError, NotImplementedError, asyncio.SendfileNotAvailableError):
                sent = 0
        if sent < part.size:
            # sendfile is unavailable here, or was cut short: copy the rest.
            await self._copy(transport, fd, part.position + sent, part.size - sent)

    async def _copy(self, transport: asyncio.Transport, fd: int, position: int, size: int) -> None:
        """Write `size` bytes of `fd` from `position`, COPY_CHUNK_BYTES at a time, waiting
        for the transport to drain below its limit before each chunk."""
        end = position + size
        while position < end:
            if not self._writable.is_set():
                await self._writable.wait()
                if self._closed:
                    return
            want = min(COPY_CHUNK_BYTES, end - position)
            chunk = os.pread(fd, want, position)
            if len(chunk) < want:
                self.abort("segment shrank while it was being sent")
                return
            transport.write(chunk)
            position += want


def _encoded(header: codec.RequestHeader, result: Any) -> tuple[bytes, list[Any]]:
    """A response's header and body parts (a RawBody's parts may hold file regions)."""
    head = codec.response_header(header.api_key, header.api_version, header.correlation_id)
    return head, result.parts if isinstance(result, RawBody) else [codec.encode_body(result)]


def _body_size(head: bytes, parts: list[Any]) -> int:
    """The response's size after its length prefix."""
    return len(head) + sum(p.size if isinstance(p, FileRegion) else len(p) for p in parts)


async def _settle(deferred: Deferred) -> Any:
    """The response of a Deferred once its futures are done."""
    if deferred.finish is None:
        for wait in deferred.waits:
            await wait
        if isinstance(deferred.response, asyncio.Future):  # responses.answered_later
            return deferred.response.result()
        return deferred.response
    errors: list[KafkaError | None] = []
    for wait in deferred.waits:
        try:
            await wait
            errors.append(None)
        except KafkaError as exc:
            errors.append(exc)
    return deferred.response if not any(errors) else deferred.finish(errors)
