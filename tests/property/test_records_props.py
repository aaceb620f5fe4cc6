"""Properties of onceflow.records: round trips, and no exception but KafkaError on bad bytes."""

from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st

from onceflow.errors import ErrorCode, KafkaError
from onceflow.records import (
    Compression,
    ControlType,
    InvalidBatch,
    Record,
    build_batch,
    build_control_batch,
    decode_records,
    decompress,
    parse_control_record,
    parse_header,
    scan_batches,
    validate_produced_batches,
)
from onceflow.records.record import VARLONG_MAX_BYTES, encode_varint, read_varint

INT32 = st.integers(-(1 << 31), (1 << 31) - 1)
INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
TIMESTAMP = st.integers(-1, 1 << 45)
BLOB = st.none() | st.binary(max_size=64)
HEADERS = st.lists(st.tuples(st.text(max_size=8), BLOB), max_size=4)
RECORDS = st.lists(st.tuples(BLOB, BLOB, HEADERS), min_size=1, max_size=12)
CODECS = st.sampled_from(list(Compression))
# baseOffset and partitionLeaderEpoch: the header bytes the CRC does not cover.
UNCOVERED = set(range(8)) | set(range(12, 16))


@st.composite
def batches(draw: st.DrawFn) -> bytes:
    records = draw(RECORDS)
    return build_batch(
        records,
        timestamp_ms=draw(TIMESTAMP),
        base_offset=draw(st.integers(0, 1 << 40)),
        compression=draw(CODECS),
    )


@given(INT64)
def test_varlong_round_trip(value: int) -> None:
    encoded = encode_varint(value)
    assert read_varint(encoded, 0, VARLONG_MAX_BYTES) == (value, len(encoded))


@given(INT32, st.binary(max_size=4))
def test_varint_round_trip_in_context(value: int, suffix: bytes) -> None:
    encoded = encode_varint(value)
    assert len(encoded) <= 5
    assert read_varint(b"\x00" + encoded + suffix, 1) == (value, 1 + len(encoded))


@given(
    records=RECORDS,
    timestamps=st.data(),
    base_offset=st.integers(0, 1 << 62),
    producer=st.just((-1, -1, -1))
    | st.tuples(st.integers(0, 1 << 40), st.integers(0, 32_767), st.integers(0, (1 << 31) - 1)),
    transactional=st.booleans(),
    compression=CODECS,
)
def test_build_decode_round_trip(
    records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    timestamps: st.DataObject,
    base_offset: int,
    producer: tuple[int, int, int],
    transactional: bool,
    compression: Compression,
) -> None:
    times = timestamps.draw(st.lists(TIMESTAMP, min_size=len(records), max_size=len(records)))
    producer_id, producer_epoch, base_sequence = producer
    transactional = transactional and producer_id >= 0  # what a client may send
    raw = build_batch(
        records,
        timestamp_ms=0,
        timestamps=times,
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        transactional=transactional,
        compression=compression,
    )
    header = parse_header(raw)
    assert header.size == len(raw)
    assert (header.record_count, header.max_timestamp) == (len(records), max(times))
    assert (header.producer_id, header.producer_epoch) == (producer_id, producer_epoch)
    assert header.base_sequence == base_sequence
    assert header.is_transactional == transactional and header.compression == compression
    assert validate_produced_batches(raw, len(raw)) == [header]
    assert decode_records(raw) == [
        Record(base_offset + i, ts, key, value, tuple(headers))
        for i, ((key, value, headers), ts) in enumerate(zip(records, times, strict=True))
    ]


@given(
    st.sampled_from(list(ControlType)),
    st.integers(0, 1 << 62),
    st.integers(0, 32_767),
    INT32,
    TIMESTAMP,
)
def test_control_round_trip(
    control_type: ControlType, producer_id: int, epoch: int, coordinator_epoch: int, ts: int
) -> None:
    raw = build_control_batch(
        control_type,
        producer_id=producer_id,
        producer_epoch=epoch,
        coordinator_epoch=coordinator_epoch,
        timestamp_ms=ts,
    )
    assert parse_control_record(raw) == (control_type, coordinator_epoch)


@given(batches(), st.lists(st.tuples(st.integers(0), st.integers(1, 255)), min_size=1))
def test_corruption_is_detected(raw: bytes, flips: list[tuple[int, int]]) -> None:
    expected = decode_records(raw)
    mangled = bytearray(raw)
    for pos, mask in flips:
        mangled[pos % len(raw)] ^= mask
    positions = {i for i, (a, b) in enumerate(zip(raw, mangled, strict=True)) if a != b}
    assume(positions)
    try:
        got = decode_records(mangled)
    except KafkaError as exc:
        assert exc.code is ErrorCode.corrupt_message
        assert len(scan_batches(mangled)[0]) == 0 or positions <= UNCOVERED
        return
    # Only the fields outside the CRC can change without detection.
    assert positions <= UNCOVERED
    shift = parse_header(mangled).base_offset - parse_header(raw).base_offset
    assert [r.offset - shift for r in got] == [r.offset for r in expected]


@given(batches(), st.lists(st.tuples(st.integers(0), st.integers(0, 255)), min_size=1))
def test_unchecked_corruption_raises_only_kafka_errors(
    raw: bytes, writes: list[tuple[int, int]]
) -> None:
    # Without the CRC, decoding must still never fail with anything but CORRUPT_MESSAGE.
    mangled = bytearray(raw)
    for pos, byte in writes:
        mangled[pos % len(raw)] = byte
    try:
        decode_records(mangled, verify_crc=False)
    except KafkaError as exc:
        assert exc.code is ErrorCode.corrupt_message


@given(st.integers(0), st.integers(0, 255), st.booleans())
def test_unchecked_control_corruption(pos: int, byte: int, commit: bool) -> None:
    raw = bytearray(
        build_control_batch(
            ControlType.COMMIT if commit else ControlType.ABORT,
            producer_id=7,
            producer_epoch=1,
            coordinator_epoch=3,
            timestamp_ms=5,
        )
    )
    raw[pos % len(raw)] = byte
    try:
        control_type, _ = parse_control_record(raw, verify_crc=False)
    except KafkaError as exc:
        assert exc.code is ErrorCode.corrupt_message
    else:
        assert control_type in (ControlType.ABORT, ControlType.COMMIT)


@given(st.binary(max_size=300))
def test_arbitrary_bytes_raise_only_kafka_errors(data: bytes) -> None:
    for codec in Compression:
        try:
            decompress(codec, data)
        except KafkaError as exc:
            assert exc.code is ErrorCode.corrupt_message
    try:
        decode_records(data, verify_crc=False)
    except KafkaError as exc:
        assert exc.code is ErrorCode.corrupt_message


@given(st.lists(batches(), min_size=1, max_size=5), st.data())
def test_truncation_keeps_whole_batches_only(parts: list[bytes], data: st.DataObject) -> None:
    log = b"".join(parts)
    cut = data.draw(st.integers(0, len(log)))
    ends = [sum(len(p) for p in parts[: i + 1]) for i in range(len(parts))]
    whole = [end for end in ends if end <= cut]

    batches_found, end = scan_batches(log[:cut])
    assert len(batches_found) == len(whole)
    assert end == (whole[-1] if whole else 0)

    try:
        headers = validate_produced_batches(log[:cut], 1 << 20)
    except InvalidBatch as exc:
        expected = ErrorCode.invalid_record if cut == 0 else ErrorCode.corrupt_message
        assert exc.code is expected and cut not in ends
    else:
        assert cut in ends and len(headers) == len(whole)
