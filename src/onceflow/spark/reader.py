"""The read side of the `onceflow` data source: batch and stream readers.

Planning runs on the driver and asks Kafka (through confluent-kafka's AdminClient) which
partitions exist and where they begin and end. The end of a partition is its last stable
offset (LSO, ListOffsets with READ_COMMITTED): everything below it belongs to decided
transactions, so a planned range always reads the same records, however often Spark replays
it. Every non-empty (topic, partition, start, end) range becomes one `KafkaRange` input
partition.

Reading a range runs on an executor: a read_committed Consumer assigned at `start` consumes
until its *position* reaches `end`. Positions move past control records and past aborted
data once its abort marker is read, while offsets of such records are never delivered, so a
reader that waited for "the record at end - 1" could wait forever. Records come back to Spark
as Arrow record batches, one per consumed batch of messages.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, no __all__
    AdminClient,
    OffsetSpec,
)
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from onceflow.retry import Backoff, retry
from onceflow.spark.access import (
    ACCESS_DENIED,
    ConnectionErrors,
    access_error,
    await_broker,
    check_client,
    list_topics,
)
from onceflow.spark.offsets import (
    EARLIEST,
    LATEST,
    PartitionOffsets,
    TopicPartitionKey,
    from_json_dict,
    to_json_dict,
)
from onceflow.spark.options import (
    CLIENT_DEFAULTS,
    OffsetsOption,
    OptionError,
    SourceOptions,
    Subscription,
    check_batch_source,
    check_stream_source,
    parse_source_options,
)

__all__ = [
    "DataLossError",
    "KafkaRange",
    "OnceflowBatchReader",
    "OnceflowStreamReader",
    "ReadTimeoutError",
    "arrow_schema",
    "check_schema",
    "kafka_schema",
    "read_range",
]

# Kafka's own internal topics, which a pattern subscription never matches (as Kafka's
# consumer with exclude.internal.topics=true).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})

# Deadline of one metadata or ListOffsets round trip on the driver.
ADMIN_TIMEOUT_S = 60.0
# One ListOffsets attempt's own limit, within ADMIN_TIMEOUT_S: a request librdkafka sent
# to a broker that was then killed can stay unanswered long after the broker is back, and
# a new client with a new connection answers in milliseconds.
LIST_OFFSETS_ATTEMPT_S = 15.0
# ListOffsets is retried this often on retriable errors (as Spark's fetchOffset.numRetries).
LIST_OFFSETS_ATTEMPTS = 3
LIST_OFFSETS_BACKOFF_S = 1.0
# Answers meaning the partition's leader is moving: retried until ADMIN_TIMEOUT_S.
LEADER_MOVING = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.REPLICA_NOT_AVAILABLE,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
    }
)
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


class PartitionGone(RuntimeError):
    """ListOffsets answered that the partition does not exist (its topic was deleted)."""


# Answers that mean the partition itself is gone, not that Kafka could not be asked.
PARTITION_GONE = frozenset(
    {
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._UNKNOWN_TOPIC,
    }
)


class ReadTimeoutError(TimeoutError):
    """A read task made no progress for `kafkaConsumer.pollTimeoutMs` (a safety net: a
    planned range ends at or below the last stable offset, so it normally never fires)."""


# ---- schema --------------------------------------------------------------------------------


def kafka_schema(include_headers: bool) -> StructType:
    """The schema of Spark's Kafka source."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow form of `kafka_schema` that Spark expects from `read()` (timestamps in
    microseconds, UTC; list elements named `element`)."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        header = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
        fields.append(pa.field("headers", pa.list_(pa.field("element", header))))
    return pa.schema(fields)


def check_schema(schema: StructType, include_headers: bool) -> None:
    """The source has a fixed schema, as Spark's Kafka source does."""
    expected = kafka_schema(include_headers)
    if schema != expected:
        raise OptionError(
            "the onceflow source has a fixed schema and cannot read with a user-specified one "
            f"(expected {expected.simpleString()}, got {schema.simpleString()}); "
            "use includeHeaders=true for the headers column"
        )


# ---- input partitions ----------------------------------------------------------------------


@dataclass(frozen=True)
class KafkaRange(InputPartition):
    """Offsets [start, end) of one topic partition: one Spark task."""

    topic: str
    partition: int
    start: int
    end: int


def plan_ranges(start: Mapping[TopicPartitionKey, int], end: PartitionOffsets) -> list[KafkaRange]:
    """One range per partition of `end` that has offsets to read. A partition missing from
    `start` is new, and is read from its beginning (offset 0)."""
    out = []
    for (topic, partition), e in sorted(end.items()):
        s = start.get((topic, partition), 0)
        if e > s:
            out.append(KafkaRange(topic, partition, s, e))
    return out


# ---- metadata on the driver ----------------------------------------------------------------


class KafkaMetadata:
    """Partition discovery and ListOffsets through one lazily created AdminClient."""

    def __init__(self, kafka: Mapping[str, str]) -> None:
        # Looking a named topic up must never create it.
        self._conf: dict[str, Any] = {
            **CLIENT_DEFAULTS,
            **kafka,
            "allow.auto.create.topics": False,
        }
        self._admin: AdminClient | None = None
        self._errors = ConnectionErrors()
        self._connected = False

    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            self._errors = ConnectionErrors()
            conf: dict[str, Any] = {**self._conf, "error_cb": self._errors}
            self._admin = AdminClient(conf)
            self._connected = False
        return self._admin

    def close(self) -> None:
        self._admin = None

    def partitions(self, sub: Subscription) -> list[TopicPartitionKey]:
        """The partitions of the subscription that exist now, sorted. A named topic the
        principal may not describe is a KafkaAccessError, not a topic that does not exist."""
        md = list_topics(self.admin, self._errors, ADMIN_TIMEOUT_S)
        existing: dict[str, list[int]] = {
            name: sorted(t.partitions) for name, t in md.topics.items() if t.error is None
        }
        if sub.kind == "subscribe":
            self.check_access(t for t in sub.topics if t not in existing)
            names = [t for t in sub.topics if t in existing]
        elif sub.kind == "subscribePattern":
            rx = re.compile(sub.pattern or "")
            names = [t for t in existing if t not in INTERNAL_TOPICS and rx.fullmatch(t)]
        else:
            self.check_access({t for t, _ in sub.partitions if t not in existing})
            return [tp for tp in sub.partitions if tp[1] in existing.get(tp[0], ())]
        return sorted((t, p) for t in names for p in existing[t])

    def check_access(self, topics: Iterable[str]) -> None:
        """Topics missing from the full listing: Kafka leaves out those the principal may
        not describe, so ask for each by name, which says TOPIC_AUTHORIZATION_FAILED."""
        for topic in sorted(set(topics)):
            md = list_topics(self.admin, self._errors, ADMIN_TIMEOUT_S, topic)
            found = md.topics.get(topic)
            err = found.error if found is not None else None
            if isinstance(err, KafkaError) and err.code() in ACCESS_DENIED:
                raise access_error(err, f"cannot describe topic '{topic}'")

    def _gone(self, keys: Iterable[TopicPartitionKey]) -> bool:
        """Whether Metadata no longer has one of the partitions. librdkafka's "no leaders
        found" means that, or a partition with no leader just now: only Metadata tells."""
        for topic, partition in keys:
            md = list_topics(self.admin, self._errors, ADMIN_TIMEOUT_S, topic)
            found = md.topics.get(topic)
            err = found.error if found is not None else None
            if isinstance(err, KafkaError) and err.code() in ACCESS_DENIED:
                raise access_error(err, f"cannot describe topic '{topic}'")
            if found is None or err is not None or partition not in found.partitions:
                return True
        return False

    def earliest(self, tps: Iterable[TopicPartitionKey]) -> PartitionOffsets:
        """Log start offsets."""
        return self._list_offsets(tps, OffsetSpec.earliest())  # type: ignore[no-untyped-call]

    def latest(self, tps: Iterable[TopicPartitionKey]) -> PartitionOffsets:
        """Last stable offsets: the end of what read_committed may read."""
        return self._list_offsets(tps, OffsetSpec.latest())  # type: ignore[no-untyped-call]

    def _list_offsets(self, tps: Iterable[TopicPartitionKey], spec: OffsetSpec) -> PartitionOffsets:
        keys = sorted(set(tps))
        if not keys:
            return {}
        attempts = 0
        deadline = time.monotonic() + ADMIN_TIMEOUT_S

        def once() -> PartitionOffsets | None:
            """The offsets, or None after a failure worth another attempt."""
            nonlocal attempts
            attempts += 1
            if not self._connected:  # a new admin client
                await_broker(self.admin, self._errors, ADMIN_TIMEOUT_S, keys[0][0])
                self._connected = True
            limit = max(min(LIST_OFFSETS_ATTEMPT_S, deadline - time.monotonic()), 1.0)
            futures = self.admin.list_offsets(
                {TopicPartition(t, p): spec for t, p in keys},
                isolation_level=IsolationLevel.READ_COMMITTED,
                request_timeout=limit,
            )
            out: PartitionOffsets = {}
            try:
                for tp, fut in futures.items():
                    out[(tp.topic, tp.partition)] = int(fut.result(timeout=limit).offset)
                return out
            except TimeoutError as exc:  # unanswered: a new client, until the deadline
                if time.monotonic() >= deadline:
                    raise RuntimeError(f"ListOffsets of {_names(keys)}: no answer") from exc
                self.close()
                return None
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                code = err.code() if isinstance(err, KafkaError) else None
                self._raise_if_denied(err, f"ListOffsets of {_names(keys)}")
                if code in PARTITION_GONE or (code == KafkaError._NOENT and self._gone(keys)):
                    raise PartitionGone(f"ListOffsets of {_names(keys)}: {exc}") from exc
                # A leader moving (a broker died or shut down, on a cluster) is waited out
                # until the deadline; librdkafka's admin client does not call it retriable.
                # Its "no leaders found" (_NOENT) for a partition that still exists is one:
                # the partition has no leader until the controller elects another.
                leaderless = code in LEADER_MOVING or code == KafkaError._NOENT
                moving = leaderless and time.monotonic() < deadline
                retriable = isinstance(err, KafkaError) and err.retriable()
                if not moving and (not retriable or attempts >= LIST_OFFSETS_ATTEMPTS):
                    raise RuntimeError(f"ListOffsets failed for {keys}: {exc}") from exc
                self.close()  # a new client asks the cluster afresh who leads
                return None

        # No limit here: once() raises when it gives up, by the two rules above.
        offsets = retry(once, Backoff(LIST_OFFSETS_BACKOFF_S), retry_if=lambda got: got is None)
        assert offsets is not None
        return offsets

    def _raise_if_denied(self, err: object, what: str) -> None:
        """A denied operation or a refused login is a KafkaAccessError: never retried, and
        never mistaken for a partition that was deleted."""
        if isinstance(err, KafkaError) and err.code() in ACCESS_DENIED:
            raise access_error(err, what)
        check_client(self.admin, self._errors, what)


def _names(tps: Iterable[TopicPartitionKey]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in tps)


def resolve_offsets(
    option: OffsetsOption,
    name: str,
    tps: Sequence[TopicPartitionKey],
    sub: Subscription,
    meta: KafkaMetadata,
) -> PartitionOffsets:
    """Turn `earliest`, `latest` or JSON offsets into offsets of every partition in `tps`.
    JSON offsets must name exactly the subscribed partitions, as in Spark."""
    if option == "earliest":
        return meta.earliest(tps)
    if option == "latest":
        return meta.latest(tps)
    given, have = set(option), set(tps)
    if given != have:
        missing = ", ".join(f"{t}-{p}" for t, p in sorted(have - given))
        unknown = ", ".join(f"{t}-{p}" for t, p in sorted(given - have))
        problems = []
        if missing:
            problems.append(f"it has no offset for {missing}")
        if unknown:
            problems.append(f"{unknown} is not a partition of {sub.describe()} that exists")
        raise OptionError(
            f"option '{name}' must give an offset for every partition of the subscription: "
            + "; ".join(problems)
        )
    out = dict(option)
    need_earliest = [tp for tp, o in option.items() if o == EARLIEST]
    need_latest = [tp for tp, o in option.items() if o == LATEST]
    out.update(meta.earliest(need_earliest))
    out.update(meta.latest(need_latest))
    return out


def _require_assigned(sub: Subscription, tps: Sequence[TopicPartitionKey]) -> None:
    if sub.kind == "assign":
        missing = sorted(set(sub.partitions) - set(tps))
        if missing:
            names = ", ".join(f"{t}-{p}" for t, p in missing)
            raise OptionError(f"option 'assign' names partitions that do not exist: {names}")


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
            _require_assigned(opts.subscription, tps)
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
        _require_assigned(opts.subscription, tps)
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


# ---- reading one range on an executor ------------------------------------------------------


def read_range(opts: SourceOptions, r: KafkaRange) -> Iterator[pa.RecordBatch]:
    """Every committed record of [r.start, r.end), as Arrow record batches."""
    reader = _RangeReader(opts, r)
    try:
        yield from reader.batches()
    finally:
        reader.close()


class _RangeReader:
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


def batch_reader(options: Mapping[str, str], schema: StructType) -> OnceflowBatchReader:
    opts = parse_source_options(options)
    check_schema(schema, opts.include_headers)
    return OnceflowBatchReader(opts)
