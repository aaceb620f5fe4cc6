"""Per-record checks of a produced batch, answered as KIP-467 asks: the bad records named.

Kafka refuses a whole batch when some of its records are bad (a record without a key on a
compacted topic, a timestamp outside message.timestamp.before/after.max.ms), and since 2.4
names them: each bad record's index in the batch with a message (the response's
`record_errors`), and a summary in `error_message`. Nothing of the batch is written; a
producer fails the named records with their own message and the others with a generic one.

The hot path stays per batch: a batch is decoded record by record only when it must be
(a compacted topic, whose keys are in the records) or when its header already shows a
timestamp out of range. A v2 header holds the first and the largest timestamps only, so a
stale record behind a fresher first one passes, where Kafka, reading every record, refuses it.
"""

from __future__ import annotations

from typing import NamedTuple

from onceflow.errors import ErrorCode, KafkaError
from onceflow.records.batch import BatchHeader
from onceflow.records.record import decode_records

_SHOWN = 3  # Kafka's summary quotes at most three record errors


class RecordError(NamedTuple):
    batch_index: int
    message: str


class InvalidRecords(KafkaError):
    """A batch refused for the records in `errors` (INVALID_TIMESTAMP when one of them has
    a bad timestamp, INVALID_RECORD otherwise, as Kafka's LogValidator decides)."""

    def __init__(self, code: ErrorCode, message: str, errors: tuple[RecordError, ...]) -> None:
        super().__init__(code, message)
        self.errors = errors


class TimestampBounds(NamedTuple):
    """The CreateTime window a record's timestamp must fall in: [earliest, latest]."""

    earliest: int
    latest: int

    @classmethod
    def around(cls, now_ms: int, before_max_ms: int, after_max_ms: int) -> TimestampBounds:
        return cls(now_ms - before_max_ms, now_ms + after_max_ms)

    def header_in_range(self, header: BatchHeader) -> bool:
        """The batch-level check: its first and max timestamps in the window."""
        return header.base_timestamp >= self.earliest and header.max_timestamp <= self.latest


def check_records(
    data: bytes | bytearray | memoryview,
    headers: list[BatchHeader],
    *,
    partition: str,
    compacted: bool,
    timestamps: TimestampBounds | None,
) -> None:
    """Raise InvalidRecords naming every bad record of the first batch that has one.

    `timestamps` is None where the broker stamps its own time (LogAppendTime).
    """
    position = 0
    for header in headers:
        if compacted or (timestamps is not None and not timestamps.header_in_range(header)):
            batch = memoryview(data)[position : position + header.size]
            errors = _record_errors(batch, partition, compacted, timestamps)
            if errors:
                raise _refusal(errors)
        position += header.size


def _record_errors(
    batch: memoryview, partition: str, compacted: bool, timestamps: TimestampBounds | None
) -> list[tuple[ErrorCode, RecordError]]:
    """Each bad record's first fault: its key, then its timestamp (Kafka's order)."""
    errors: list[tuple[ErrorCode, RecordError]] = []
    for index, record in enumerate(decode_records(batch, verify_crc=False)):
        if compacted and record.key is None:
            message = (
                f"Compacted topic cannot accept message without key in topic partition {partition}."
            )
            errors.append((ErrorCode.invalid_record, RecordError(index, message)))
        elif timestamps is not None and not (
            timestamps.earliest <= record.timestamp <= timestamps.latest
        ):
            message = (
                f"Timestamp {record.timestamp} of message with offset {record.offset} is out "
                f"of range. The timestamp should be within [{timestamps.earliest}, "
                f"{timestamps.latest}]"
            )
            errors.append((ErrorCode.invalid_timestamp, RecordError(index, message)))
    return errors


def _refusal(errors: list[tuple[ErrorCode, RecordError]]) -> InvalidRecords:
    found = tuple(error for _, error in errors)
    if any(code is ErrorCode.invalid_timestamp for code, _ in errors):
        return InvalidRecords(
            ErrorCode.invalid_timestamp,
            "One or more records have been rejected due to invalid timestamp",
            found,
        )
    shown = ", ".join(
        f"RecordError(batchIndex={e.batch_index}, message='{e.message}')" for e in found[:_SHOWN]
    )
    return InvalidRecords(
        ErrorCode.invalid_record,
        f"One or more records have been rejected due to {len(found)} record errors in total, "
        f"and only showing the first three errors at most: [{shown}]",
        found,
    )
