"""The unsigned varints of Kafka's flexible versions: compact array counts and string or
bytes lengths are n + 1 as an unsigned varint (0 is null), tag buffers start with one."""

from __future__ import annotations


def uvarint(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def compact_length(n: int) -> bytes:
    """A compact array's count or a compact string's (bytes') length: n + 1."""
    return uvarint(n + 1)
