"""The read side of the `onceflow` data source: batch and stream readers.

Planning runs on the driver and asks Kafka which partitions exist and where they begin and
end (`source_metadata`). The end of a partition is its last stable offset (LSO): everything
below it belongs to decided transactions, so a planned range always reads the same
records, however often Spark replays it. Every non-empty (topic, partition, start, end)
range becomes one `KafkaRange` input partition, read on an executor (`range_reader`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from onceflow.spark.offsets import PartitionOffsets, TopicPartitionKey, from_json_dict, to_json_dict
from onceflow.spark.options import (
    OptionError,
    SourceOptions,
    check_batch_source,
    check_stream_source,
    parse_source_options,
)
from onceflow.spark.range_reader import DataLossError, KafkaRange, read_range
from onceflow.spark.source_metadata import KafkaMetadata, require_assigned, resolve_offsets
from onceflow.spark.source_schema import check_schema

__all__ = ["OnceflowBatchReader", "OnceflowStreamReader", "batch_reader", "plan_ranges"]


def plan_ranges(start: Mapping[TopicPartitionKey, int], end: PartitionOffsets) -> list[KafkaRange]:
    """One range per partition of `end` that has offsets to read. A partition missing from
    `start` is new, and is read from its beginning (offset 0)."""
    out = []
    for (topic, partition), e in sorted(end.items()):
        s = start.get((topic, partition), 0)
        if e > s:
            out.append(KafkaRange(topic, partition, s, e))
    return out


# ---- batch reads ---------------------------------------------------------------------------


class OnceflowBatchReader(DataSourceReader):
    """`spark.read.format("onceflow")`: offsets [startingOffsets, endingOffsets), by default
    [earliest, latest), planned once on the driver."""

    def __init__(self, opts: SourceOptions) -> None:
        check_batch_source(opts)
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        opts = self.opts
        meta = KafkaMetadata(opts.kafka)
        try:
            tps = meta.partitions(opts.subscription)
            require_assigned(opts.subscription, tps)
            sub = opts.subscription
            start = resolve_offsets(opts.starting or "earliest", "startingOffsets", tps, sub, meta)
            lso = meta.latest(tps)
            ending = opts.ending or "latest"
            end = (
                lso
                if ending == "latest"
                else resolve_offsets(ending, "endingOffsets", tps, sub, meta)
            )
        finally:
            meta.close()
        ranges: list[InputPartition] = []
        for tp in tps:
            s, e = start[tp], end[tp]
            if e > lso[tp]:
                if opts.fail_on_data_loss:
                    raise DataLossError(
                        f"endingOffsets asks for {tp[0]}-{tp[1]} up to offset {e}, beyond its "
                        f"last stable offset {lso[tp]}: offsets {lso[tp]}..{e - 1} do not exist "
                        "(or belong to an open transaction). Set failOnDataLoss=false to read "
                        "up to the last stable offset instead."
                    )
                e = lso[tp]
            if s > e:
                if opts.fail_on_data_loss:
                    raise DataLossError(
                        f"startingOffsets {s} of {tp[0]}-{tp[1]} is after its end offset {e}. "
                        "Set failOnDataLoss=false to read nothing from it instead."
                    )
                continue
            if e > s:
                ranges.append(KafkaRange(tp[0], tp[1], s, e))
        return ranges

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, KafkaRange):  # Spark's stand-in when nothing was planned
            return iter(())
        return read_range(self.opts, partition)


# ---- stream reads --------------------------------------------------------------------------


class OnceflowStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """`spark.readStream.format("onceflow")`.

    Offsets are `{"topic": {"partition": offset}}` in a fixed order. Each micro-batch ends at
    the last stable offsets (capped by `maxOffsetsPerTrigger`), so a replayed batch reads
    exactly the same records. Partitions that appear later are read from offset 0.

    Spark builds this object in several driver processes; option errors are kept and raised
    by the first method Spark calls, so the query fails with that error alone.
    """

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self._opts: SourceOptions | None = None
        self._error: OptionError | None = None
        try:
            opts = parse_source_options(options)
            check_stream_source(opts)
            check_schema(schema, opts.include_headers)
            self._opts = opts
        except OptionError as exc:
            self._error = exc
        self._meta: KafkaMetadata | None = None
        self._target: PartitionOffsets | None = None  # Trigger.AvailableNow's end
        self._latest: dict[str, dict[str, int]] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_meta"] = None  # an AdminClient does not travel to executors
        return state

    @property
    def opts(self) -> SourceOptions:
        if self._error is not None:
            raise self._error
        assert self._opts is not None
        return self._opts

    @property
    def meta(self) -> KafkaMetadata:
        if self._meta is None:
            self._meta = KafkaMetadata(self.opts.kafka)
        return self._meta

    def initialOffset(self) -> dict[str, Any]:
        opts = self.opts
        tps = self.meta.partitions(opts.subscription)
        require_assigned(opts.subscription, tps)
        start = resolve_offsets(
            opts.starting or "latest", "startingOffsets", tps, opts.subscription, self.meta
        )
        return dict(to_json_dict(start))

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_offsets_per_trigger
        return ReadMaxRows(n) if n is not None else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        tps = self.meta.partitions(self.opts.subscription)
        self._target = self.meta.latest(tps)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        opts = self.opts
        begin = from_json_dict(start)
        lso = self._current_lso(begin)
        self._latest = to_json_dict(lso)
        end: PartitionOffsets = {}
        for tp, last in lso.items():
            s = begin.get(tp, 0)
            if last < s and opts.fail_on_data_loss:
                raise DataLossError(
                    f"the last stable offset of {tp[0]}-{tp[1]} went back from at least "
                    f"{s} to {last} (topic deleted and recreated, or log truncated): "
                    "records may have been lost. Set failOnDataLoss=false to go on from "
                    f"offset {last}."
                )
            end[tp] = last
        if self._target is not None:
            end = _cap_at_target(begin, end, self._target)
        if isinstance(limit, ReadMaxRows):
            end = _rate_limit(begin, end, limit.max_rows)
        return dict(to_json_dict(end))

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return dict(self._latest) if self._latest is not None else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        return plan_ranges(from_json_dict(start), from_json_dict(end))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KafkaRange), partition
        return read_range(self.opts, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: offsets live in Spark's checkpoint, never in a consumer group."""

    def stop(self) -> None:
        if self._meta is not None:
            self._meta.close()
            self._meta = None

    def _current_lso(self, begin: PartitionOffsets) -> PartitionOffsets:
        """LSO of every partition of the subscription. Partitions the query has read that
        no longer exist follow failOnDataLoss."""
        opts = self.opts
        tps = self.meta.partitions(opts.subscription)
        gone = sorted(set(begin) - set(tps))
        if gone:  # metadata can lag right after a change: look once more before judging
            time.sleep(0.5)
            tps = self.meta.partitions(opts.subscription)
            gone = sorted(set(begin) - set(tps))
        # A topic the principal may no longer describe vanishes from a pattern's listing
        # too: that is a KafkaAccessError, never lost data.
        self.meta.check_access(t for t, _ in gone)
        if gone and opts.fail_on_data_loss:
            names = ", ".join(f"{t}-{p} (read up to {begin[(t, p)]})" for t, p in gone)
            raise DataLossError(
                f"partitions the query was reading no longer exist: {names}; records after "
                "those offsets may have been lost. Set failOnDataLoss=false to go on without "
                "them."
            )
        return self.meta.latest(tps)


def _cap_at_target(
    begin: PartitionOffsets, end: PartitionOffsets, target: PartitionOffsets
) -> PartitionOffsets:
    """Trigger.AvailableNow: never beyond what existed when the query started."""
    out: PartitionOffsets = {}
    for tp, e in end.items():
        if tp in target:
            out[tp] = max(begin.get(tp, 0), min(e, target[tp]))
        elif tp in begin:
            out[tp] = begin[tp]
    return out


def _rate_limit(begin: PartitionOffsets, end: PartitionOffsets, max_rows: int) -> PartitionOffsets:
    """maxOffsetsPerTrigger: share `max_rows` offsets among the partitions in proportion to
    what each has to read, as Spark's Kafka source does. Offsets, not records: markers and
    aborted records count too. A capped end may fall inside aborted data; the reader stops
    at its position there all the same."""
    sizes = {tp: e - begin.get(tp, 0) for tp, e in end.items() if e > begin.get(tp, 0)}
    total = sum(sizes.values())
    if total <= max_rows:
        return end
    out = dict(end)
    for tp, size in sizes.items():
        share = max_rows * size / total
        n = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(begin.get(tp, 0) + n, end[tp])
    return out


def batch_reader(options: Mapping[str, str], schema: StructType) -> OnceflowBatchReader:
    opts = parse_source_options(options)
    check_schema(schema, opts.include_headers)
    return OnceflowBatchReader(opts)
