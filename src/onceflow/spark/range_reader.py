"""Reading one planned range of the `onceflow` source on an executor: a read_committed
Consumer assigned at `start` consumes until its *position* reaches `end`. Positions move
past control records and past aborted data once its abort marker is read, while offsets of
such records are never delivered, so a reader that waited for "the record at end - 1"
could wait forever. Records go back to Spark as Arrow record batches."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from pyspark.sql.datasource import InputPartition

from onceflow.spark.access import ACCESS_DENIED, access_error
from onceflow.spark.options import CLIENT_DEFAULTS, SourceOptions
from onceflow.spark.source_metadata import KafkaMetadata, PartitionGone
from onceflow.spark.source_schema import arrow_schema

__all__ = ["DataLossError", "KafkaRange", "RangeReader", "ReadTimeoutError", "read_range"]

# Most messages turned into one Arrow batch (Spark's default arrow.maxRecordsPerBatch).
MAX_BATCH_ROWS = 10_000
# How long one consume() call waits for a full batch. Near the end of a range fewer
# records than asked for may exist (markers and aborted records take offsets), so this is
# also the longest a task lingers after its last record.
CONSUME_WAIT_S = 0.1
# After this long without progress a read task asks Kafka whether its range still exists.
STALL_CHECK_S = 1.0
# The group id a read task's Consumer needs (librdkafka requires one). Partitions are
# assigned, never subscribed, so it never joins this group and never commits to it.
READER_GROUP_ID = "onceflow-spark-source"


class DataLossError(RuntimeError):
    """Offsets a query must read no longer exist (deleted by retention, or a topic deleted
    or recreated), and `failOnDataLoss` is true."""


class ReadTimeoutError(TimeoutError):
    """A read task made no progress for `kafkaConsumer.pollTimeoutMs` (a safety net: a
    planned range ends at or below the last stable offset, so it normally never fires)."""


@dataclass(frozen=True)
class KafkaRange(InputPartition):
    """Offsets [start, end) of one topic partition: one Spark task."""

    topic: str
    partition: int
    start: int
    end: int


def read_range(opts: SourceOptions, r: KafkaRange) -> Iterator[pa.RecordBatch]:
    """Every committed record of [r.start, r.end), as Arrow record batches."""
    reader = RangeReader(opts, r)
    try:
        yield from reader.batches()
    finally:
        reader.close()


class RangeReader:
    """Reads one range: a read_committed Consumer from `start` until its position is at `end`."""

    def __init__(self, opts: SourceOptions, r: KafkaRange) -> None:
        self.opts = opts
        self.r = r
        self.tp = TopicPartition(r.topic, r.partition)
        self.name = f"{r.topic}-{r.partition}"
        self.schema = arrow_schema(opts.include_headers)
        self.meta = KafkaMetadata(opts.kafka)
        self.consumer: Consumer | None = None

    def close(self) -> None:
        if self.consumer is not None:
            self.consumer.close()
            self.consumer = None
        self.meta.close()

    def batches(self) -> Iterator[pa.RecordBatch]:
        r, opts = self.r, self.opts
        pos, end = self._check_range(r.start, r.end)
        if pos >= end:
            return
        conf: dict[str, str | int | float | bool] = {
            **CLIENT_DEFAULTS,
            **opts.kafka,
            "group.id": READER_GROUP_ID,
            "enable.auto.commit": "false",
            "enable.auto.offset.store": "false",
            "isolation.level": "read_committed",
            # Below the log start: report it, so failOnDataLoss decides (never jump).
            "auto.offset.reset": "error",
            "enable.partition.eof": "false",
        }
        consumer = Consumer(conf)
        self.consumer = consumer
        consumer.assign([TopicPartition(r.topic, r.partition, pos)])
        timeout_s = opts.poll_timeout_ms / 1000
        last_progress = last_check = time.monotonic()
        progress_mark = pos
        last_error: KafkaError | None = None
        while pos < end:
            msgs = consumer.consume(min(MAX_BATCH_ROWS, end - pos), CONSUME_WAIT_S)
            rows: list[Message] = []
            seek_to: int | None = None
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.fatal():
                        raise KafkaException(err)
                    if err.code() in ACCESS_DENIED:  # waiting cannot help: fail the task now
                        raise access_error(err, f"reading {self.name}")
                    if err.code() in (
                        KafkaError._AUTO_OFFSET_RESET,
                        KafkaError.OFFSET_OUT_OF_RANGE,
                    ):
                        seek_to = self._after_out_of_range(pos, end)
                        break
                    last_error = err  # transient (connection, leader): librdkafka retries
                    continue
                off = m.offset()
                if off is None or off < pos:
                    continue
                if off >= end:  # beyond the range (the next batch reads it): done
                    seek_to = end
                    break
                rows.append(m)
                pos = off + 1
            if rows:
                yield self._to_arrow(rows)
            if seek_to is not None:
                if seek_to >= end:
                    return
                pos = seek_to
                consumer.assign([TopicPartition(r.topic, r.partition, pos)])
            else:
                # The position moves past control records, and past aborted data once its
                # abort marker has been read: offsets that are never delivered.
                position = consumer.position([self.tp])[0].offset
                if position is not None and position > pos:
                    pos = position
            now = time.monotonic()
            if pos > progress_mark:
                progress_mark, last_progress = pos, now
            if pos >= end:
                return
            if now - last_progress >= STALL_CHECK_S and now - last_check >= STALL_CHECK_S:
                # No progress: does the rest of the range still exist?
                last_check = now
                checked, end = self._check_range(pos, end)
                if checked != pos:
                    pos = checked
                    consumer.assign([TopicPartition(r.topic, r.partition, pos)])
            if now - last_progress > timeout_s:
                why = f"; last consumer error: {last_error}" if last_error is not None else ""
                raise ReadTimeoutError(
                    f"reading {self.name} offsets {r.start}..{r.end - 1}: no progress for "
                    f"{timeout_s:.0f} s at offset {pos} (kafkaConsumer.pollTimeoutMs){why}"
                )

    def _check_range(self, start: int, end: int) -> tuple[int, int]:
        """Compare [start, end) with what the partition holds now: offsets below the log
        start were deleted, offsets at or above the last stable offset do not exist. Both
        follow failOnDataLoss; the range that is left is returned."""
        tp = (self.r.topic, self.r.partition)
        try:
            earliest = self.meta.earliest([tp])[tp]
            lso = self.meta.latest([tp])[tp]
        except PartitionGone as exc:
            # Only an answer that the partition is gone counts as lost data; a cluster that
            # cannot be asked (down for a minute, say) fails the task, which Spark retries,
            # rather than have failOnDataLoss=false skip records that still exist.
            if self.opts.fail_on_data_loss:
                raise DataLossError(
                    f"cannot read {self.name} offsets {start}..{end - 1}: {exc}. The partition "
                    "may have been deleted. Set failOnDataLoss=false to skip it."
                ) from exc
            return start, start
        if start < earliest:
            start = self._lost(start, end, earliest)
        if end > lso:
            if self.opts.fail_on_data_loss:
                raise DataLossError(
                    f"offsets {max(start, lso)}..{end - 1} of {self.name} were planned but do "
                    f"not exist (its last stable offset is {lso}; the topic may have been "
                    "deleted and recreated). Set failOnDataLoss=false to read what exists."
                )
            end = max(lso, start)
        return start, end

    def _lost(self, start: int, end: int, earliest: int) -> int:
        last_lost = min(end, earliest) - 1
        if self.opts.fail_on_data_loss:
            raise DataLossError(
                f"offsets {start}..{last_lost} of {self.name} were deleted (the partition now "
                f"starts at {earliest}, e.g. by retention) before this query read them. Set "
                "failOnDataLoss=false to skip lost records and read from the earliest offset."
            )
        return min(earliest, end)

    def _after_out_of_range(self, pos: int, end: int) -> int:
        """The consumer's fetch position fell below the log start while it read: where to
        go on from (`end` when nothing is left)."""
        tp = (self.r.topic, self.r.partition)
        earliest = self.meta.earliest([tp])[tp]
        if pos < earliest:
            return self._lost(pos, end, earliest)
        return pos

    def _to_arrow(self, msgs: list[Message]) -> pa.RecordBatch:
        n = len(msgs)
        stamps = [m.timestamp() for m in msgs]
        columns = [
            pa.array([m.key() for m in msgs], pa.binary()),
            pa.array([m.value() for m in msgs], pa.binary()),
            pa.array([self.r.topic] * n, pa.string()),
            pa.array([self.r.partition] * n, pa.int32()),
            pa.array([m.offset() for m in msgs], pa.int64()),
            # Kafka's milliseconds as Spark's microseconds; librdkafka's timestamp types
            # (0 none, 1 create, 2 log append) as Kafka's ids (-1, 0, 1), as in Spark.
            pa.array([ts * 1000 for _, ts in stamps], pa.timestamp("us", tz="UTC")),
            pa.array([kind - 1 for kind, _ in stamps], pa.int32()),
        ]
        if self.opts.include_headers:
            columns.append(pa.array([_headers(m) for m in msgs], self.schema.field("headers").type))
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)


def _headers(m: Message) -> list[dict[str, Any]] | None:
    """Headers as Spark's Kafka source gives them: null when a record has none."""
    hs = m.headers()
    if not hs:
        return None
    pairs = hs.items() if isinstance(hs, dict) else hs
    return [{"key": k, "value": v.encode() if isinstance(v, str) else v} for k, v in pairs]
