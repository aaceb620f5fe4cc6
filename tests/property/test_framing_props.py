"""FrameDecoder: any frames, received in any chunking, come out whole, in order, once."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from onceflow.errors import ProtocolError
from onceflow.protocol.framing import FrameDecoder, FrameTooLarge

SCRATCH = 64  # small, so that frames of every kind cross it: inside, partial, larger
IN_PLACE = 300  # frames above it are gathered piece by piece instead of received in place


def wire(payloads: list[bytes]) -> bytes:
    return b"".join(struct.pack(">i", len(p)) + p for p in payloads)


def receive(decoder: FrameDecoder, data: bytes, cuts: list[int]) -> list[bytes]:
    """Deliver `data` the way a socket does: into `buffer()`, at most `cut` bytes a time."""
    out: list[bytes] = []
    pos = 0
    turn = 0
    while pos < len(data):
        target = decoder.buffer()
        assert len(target) > 0, "the decoder must always offer room"
        want = cuts[turn % len(cuts)] if cuts else len(data)
        count = min(len(target), want, len(data) - pos)
        target[:count] = data[pos : pos + count]
        pos += count
        turn += 1
        out += [bytes(f) for f in decoder.received(count)]
    return out


payloads = st.lists(
    st.one_of(
        st.binary(max_size=SCRATCH - 4),
        st.binary(min_size=SCRATCH, max_size=IN_PLACE),
        st.binary(min_size=IN_PLACE + 1, max_size=900),
    ),
    max_size=12,
)


@given(payloads, st.lists(st.integers(1, 700), max_size=8))
def test_every_frame_comes_out_whole_and_in_order(frames: list[bytes], cuts: list[int]) -> None:
    decoder = FrameDecoder(10_000, scratch_bytes=SCRATCH, in_place_max_bytes=IN_PLACE)
    assert receive(decoder, wire(frames), cuts) == frames
    assert decoder.buffered == 0


@given(payloads, st.lists(st.integers(1, 700), max_size=8))
def test_feed_agrees_with_buffered_receiving(frames: list[bytes], cuts: list[int]) -> None:
    data = wire(frames)
    decoder = FrameDecoder(10_000, scratch_bytes=SCRATCH, in_place_max_bytes=IN_PLACE)
    out: list[bytes] = []
    pos = 0
    for cut in [*cuts, len(data)]:
        out += [bytes(f) for f in decoder.feed(data[pos : pos + cut])]
        pos += cut
    assert out == frames


def test_a_large_frame_is_received_in_place_and_returned_read_only() -> None:
    decoder = FrameDecoder(1 << 20, scratch_bytes=SCRATCH, in_place_max_bytes=1 << 20)
    body = bytes(range(256)) * 40
    data = wire([body, b"small"])
    first = decoder.buffer()
    first[:10] = data[:10]
    assert decoder.received(10) == []
    target = decoder.buffer()
    assert len(target) == len(body) - 6, "the rest of the large frame, in its own buffer"
    target[:] = data[10 : 4 + len(body)]
    frames = decoder.received(len(body) - 6)
    assert len(frames) == 1 and isinstance(frames[0], memoryview) and frames[0].readonly
    assert bytes(frames[0]) == body
    assert decoder.feed(data[4 + len(body) :]) == [b"small"]


def test_a_size_prefix_alone_sets_aside_no_more_than_a_scratch_buffer() -> None:
    """A client announcing a frame of the maximum size and sending nothing more must not
    make the broker set that much memory aside."""
    decoder = FrameDecoder(100 << 20, scratch_bytes=SCRATCH, in_place_max_bytes=IN_PLACE)
    assert decoder.feed(struct.pack(">i", 100 << 20) + b"x" * 10) == []
    assert len(decoder.buffer()) <= SCRATCH
    assert decoder.buffered == 10


def test_a_recycled_buffer_receives_the_next_large_frame() -> None:
    decoder = FrameDecoder(1 << 20, scratch_bytes=SCRATCH, in_place_max_bytes=1 << 20)
    first = decoder.feed(wire([b"a" * 200]))[0]
    assert isinstance(first, memoryview)
    buffer = first.obj
    decoder.recycle(first)
    second = decoder.feed(wire([b"b" * 180]))[0]
    assert isinstance(second, memoryview) and second.obj is buffer
    assert bytes(second) == b"b" * 180


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (struct.pack(">i", -1), ProtocolError),
        (struct.pack(">i", 1001), FrameTooLarge),
    ],
)
def test_a_bad_size_is_refused_before_any_buffer_is_made(data: bytes, error: type) -> None:
    decoder = FrameDecoder(1000, scratch_bytes=SCRATCH)
    with pytest.raises(error):
        decoder.feed(data)
