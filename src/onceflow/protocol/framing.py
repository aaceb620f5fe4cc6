"""Sans-IO framing: bytes in, whole request frames out.

A Kafka frame is a 4-byte big-endian size followed by that many bytes. The decoder never
touches a socket; the server feeds it whatever arrived and sends back what it answers.
"""

from __future__ import annotations

import struct

from onceflow.errors import ProtocolError

_SIZE = struct.Struct(">i")


class FrameTooLarge(ProtocolError):
    """A frame larger than socket.request.max.bytes: the connection is closed."""


class FrameDecoder:
    """Accumulates received bytes and yields complete frames in order."""

    def __init__(self, max_frame_bytes: int) -> None:
        self._max = max_frame_bytes
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        """Add received bytes; return every frame now complete (payload only, no size)."""
        buf = self._buf
        buf += data
        frames: list[bytes] = []
        pos = 0
        end = len(buf)
        while end - pos >= 4:
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < 0:
                raise ProtocolError(f"negative frame size {size}")
            if size > self._max:
                raise FrameTooLarge(
                    f"frame of {size} bytes exceeds socket.request.max.bytes={self._max}"
                )
            if end - pos - 4 < size:
                break
            frames.append(bytes(buf[pos + 4 : pos + 4 + size]))
            pos += 4 + size
        if pos:
            del buf[:pos]
        return frames

    @property
    def buffered(self) -> int:
        return len(self._buf)


def frame(payload_parts: list[bytes]) -> bytes:
    """Prefix the joined parts with their total size."""
    body = b"".join(payload_parts)
    return _SIZE.pack(len(body)) + body


def size_prefix(size: int) -> bytes:
    return _SIZE.pack(size)
