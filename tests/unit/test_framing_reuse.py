"""A large frame's buffer is reused for the next one, which is safe only because decoding
copies every bytes field out of it. If kio ever returned views into the frame, a recycled
buffer would silently change a request still being handled: this test says so first."""

from __future__ import annotations

from tests.helpers.wire import encode_entity, produce_request, request_frame

from onceflow.protocol import codec
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.framing import FrameDecoder
from onceflow.records.builder import build_batch


def test_decoded_records_do_not_point_into_a_recycled_frame_buffer() -> None:
    records = build_batch([(b"k", b"v" * 200_000, [])], timestamp_ms=1)
    body = encode_entity(produce_request("t", {0: records}))
    wire = request_frame(ApiKey.PRODUCE, 8, 1, body, flexible=False)
    decoder = FrameDecoder(1 << 24)
    (frame,) = decoder.feed(wire)
    assert isinstance(frame, memoryview), "received in a buffer of its own"
    _header, request = codec.decode_request(frame)
    decoded = request.topic_data[0].partition_data[0].records
    assert isinstance(decoded, bytes)
    buffer = frame.obj
    decoder.recycle(frame)
    # The next large frame lands in the same buffer; the first request must not change.
    (second,) = decoder.feed(wire.replace(b"v" * 1000, b"w" * 1000, 1))
    assert isinstance(second, memoryview) and second.obj is buffer, "the buffer was reused"
    assert decoded == records
