"""KIP-467 record checks: which records of a batch are named, with which code, and that a
batch whose header is in range on a non-compacted topic is never read record by record."""

from __future__ import annotations

import pytest

from onceflow.errors import ErrorCode
from onceflow.records.batch import validate_produced_batches
from onceflow.records.builder import build_batch
from onceflow.records.validation import InvalidRecords, TimestampBounds, check_records

NOW = 1_000_000
BOUNDS = TimestampBounds.around(NOW, before_max_ms=1000, after_max_ms=500)
OLD, NEW = NOW - 2000, NOW + 1000

# (keys present, timestamps, compacted, expected code, expected indexes)
CASES = [
    ([True, True], [NOW, NOW], True, None, []),
    ([True, False, True, False], [NOW] * 4, True, ErrorCode.invalid_record, [1, 3]),
    ([True, True, True], [OLD, NOW, NEW], False, ErrorCode.invalid_timestamp, [0, 2]),
    # A keyless record's fault is its key; another's timestamp makes the code INVALID_TIMESTAMP.
    ([False, True], [OLD, OLD], True, ErrorCode.invalid_timestamp, [0, 1]),
    ([True, True], [NOW, NOW], False, None, []),
]


@pytest.mark.parametrize(("keys", "timestamps", "compacted", "code", "indexes"), CASES)
def test_named_records(
    keys: list[bool],
    timestamps: list[int],
    compacted: bool,
    code: ErrorCode | None,
    indexes: list[int],
) -> None:
    records = [(b"k" if k else None, b"v", []) for k in keys]
    data = build_batch(records, timestamp_ms=timestamps[0], timestamps=timestamps)
    headers = validate_produced_batches(data, 1 << 20)
    try:
        check_records(data, headers, partition="t-0", compacted=compacted, timestamps=BOUNDS)
    except InvalidRecords as refused:
        assert (refused.code, [e.batch_index for e in refused.errors]) == (code, indexes)
    else:
        assert code is None


def test_log_append_time_skips_timestamps() -> None:
    data = build_batch([(b"k", b"v", [])], timestamp_ms=OLD)
    headers = validate_produced_batches(data, 1 << 20)
    check_records(data, headers, partition="t-0", compacted=True, timestamps=None)
