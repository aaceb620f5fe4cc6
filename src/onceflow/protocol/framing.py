"""Sans-IO framing: bytes in, whole request frames out.

A Kafka frame is a 4-byte big-endian size followed by that many bytes. The decoder never
touches a socket: the server asks it where to receive (`buffer`), then says how many bytes
arrived (`received`), and gets back every frame now complete. Small frames are received in
a reusable scratch buffer and copied out once; a frame too large for it (a produce request
of a megabyte) gets a buffer of its own, and the socket receives straight into it, so its
bytes are never copied on the way in. The caller hands a large frame back (`recycle`) once
decoded, and the next large frame reuses its buffer: a fresh megabyte per request costs
more in page faults than the copies it saves. A frame over `in_place_max_bytes` is gathered
piece by piece as it arrives instead, so memory follows the bytes actually received.
"""

from __future__ import annotations

import struct

from onceflow.errors import ProtocolError

_SIZE = struct.Struct(">i")
SCRATCH_BYTES = 64 * 1024
# Frames up to this size are received in place, into a buffer made (or recycled) when the
# size prefix arrives; one is kept per connection for the next. A larger frame (rare: clients
# cap requests at about 1 MB) is gathered as it arrives, so a size prefix alone can never
# make the broker set aside up to socket.request.max.bytes for a connection.
IN_PLACE_MAX_BYTES = 2 << 20

# A complete frame: bytes (small or gathered frames) or a read-only view of its own buffer.
Frame = bytes | memoryview


class FrameTooLarge(ProtocolError):
    """A frame larger than socket.request.max.bytes: the connection is closed."""


class FrameDecoder:
    """Accumulates received bytes and yields complete frames in order."""

    def __init__(
        self,
        max_frame_bytes: int,
        scratch_bytes: int = SCRATCH_BYTES,
        in_place_max_bytes: int = IN_PLACE_MAX_BYTES,
    ) -> None:
        self._max = max_frame_bytes
        self._in_place_max = in_place_max_bytes
        self._scratch = bytearray(scratch_bytes)
        self._start = 0  # first unparsed byte in the scratch buffer
        self._end = 0  # end of the received bytes in the scratch buffer
        self._large: memoryview | None = None  # a large frame's own buffer, being filled
        self._filled = 0
        self._spare: bytearray | None = None  # a recycled buffer for the next large frame
        self._pieces: list[bytes] | None = None  # a frame over in_place_max, as it arrives
        self._missing = 0  # bytes of that frame still to come

    def buffer(self) -> memoryview:
        """Where the next received bytes go; never empty."""
        if self._large is not None:
            return self._large[self._filled :]
        if self._pieces is not None:
            return memoryview(self._scratch)[: min(len(self._scratch), self._missing)]
        return memoryview(self._scratch)[self._end :]

    def received(self, count: int) -> list[Frame]:
        """`count` bytes were written at the start of `buffer()`; return finished frames."""
        if self._large is not None:
            self._filled += count
            if self._filled < len(self._large):
                return []
            done = self._large.toreadonly()
            self._large = None
            return [done]
        if self._pieces is not None:
            self._pieces.append(bytes(self._scratch[:count]))
            self._missing -= count
            if self._missing:
                return []
            whole = b"".join(self._pieces)
            self._pieces = None
            return [whole]
        self._end += count
        return self._parse()

    def feed(self, data: bytes) -> list[Frame]:
        """Add received bytes (from a socket read elsewhere); return every frame complete."""
        view = memoryview(data)
        frames: list[Frame] = []
        while view:
            target = self.buffer()
            count = min(len(target), len(view))
            target[:count] = view[:count]
            view = view[count:]
            frames += self.received(count)
        return frames

    def recycle(self, frame: Frame) -> None:
        """The caller is done with `frame` and holds no view of it: a large frame's buffer
        may receive the next one. (kio copies every bytes field it decodes, which
        tests/unit/test_framing_reuse.py checks, so a decoded request never points into it.)"""
        if isinstance(frame, memoryview) and isinstance(frame.obj, bytearray):
            buf = frame.obj
            try:
                frame.release()
            except BufferError:
                return  # someone still holds a view of it: leave the buffer to them
            # Only in-place frames are views, so the buffer is at most twice in_place_max.
            if self._spare is None or len(buf) > len(self._spare):
                self._spare = buf

    def _buffer_for(self, size: int) -> memoryview:
        spare = self._spare
        if spare is not None and len(spare) >= size:
            self._spare = None
            return memoryview(spare)[:size]
        # Rounded up, so the next frame of about the same size fits in it again.
        return memoryview(bytearray(1 << (size - 1).bit_length()))[:size]

    @property
    def buffered(self) -> int:
        """Bytes received but not yet handed out as frames."""
        if self._pieces is not None:
            return sum(len(piece) for piece in self._pieces)
        return self._end - self._start + (self._filled if self._large is not None else 0)

    def _parse(self) -> list[Frame]:
        buf = self._scratch
        frames: list[Frame] = []
        while self._end - self._start >= 4:
            (size,) = _SIZE.unpack_from(buf, self._start)
            if size < 0:
                raise ProtocolError(f"negative frame size {size}")
            if size > self._max:
                raise FrameTooLarge(
                    f"frame of {size} bytes exceeds socket.request.max.bytes={self._max}"
                )
            body = self._start + 4
            have = self._end - body
            if have >= size:
                frames.append(bytes(buf[body : body + size]))
                self._start = body + size
            elif 4 + size > len(buf):
                # Too large for the scratch buffer: receive the rest in place, or gather it.
                if size <= self._in_place_max:
                    self._large = self._buffer_for(size)
                    self._large[:have] = buf[body : self._end]
                    self._filled = have
                else:
                    self._pieces = [bytes(buf[body : self._end])]
                    self._missing = size - have
                self._start = self._end = 0
                return frames
            else:
                break
        # Keep the partial frame (smaller than the scratch buffer) at the front, so the
        # rest of it always fits.
        rest = self._end - self._start
        if rest and self._start:
            buf[:rest] = buf[self._start : self._end]
        self._start, self._end = 0, rest
        return frames


def frame(payload_parts: list[bytes]) -> bytes:
    """Prefix the joined parts with their total size."""
    body = b"".join(payload_parts)
    return _SIZE.pack(len(body)) + body


def size_prefix(size: int) -> bytes:
    return _SIZE.pack(size)
