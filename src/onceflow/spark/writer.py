"""The `onceflow` sink: exactly-once writes from Spark to Kafka, one transaction per task
(`atomicity=task`, below) or one decision per micro-batch over the tasks' prepared two-phase
transactions (`atomicity=batch`: `prepare_task`, `commit_batch`; see
`onceflow.spark.batch_commit`).

Each write task (one partition of one micro-batch) owns the transactional id
`<sink id>-<task partition>`, which is the same for every attempt of that task in every
batch, before and after a restart. The task:

1. calls `init_transactions()`, which fences every older attempt of the task (a retried,
   speculative or pre-crash one) and completes its open transaction, commit or abort;
2. reads its ledger entry (see `onceflow.spark.ledger`): the first batch id it has not
   written. If this batch is already written, the task writes nothing and succeeds. This is
   what makes a batch that Spark replays (the driver died between the sink's commit and
   Spark's commit log) write nothing twice;
3. otherwise begins a transaction, produces its rows, adds the ledger entry for this batch to
   the same transaction (`send_offsets_to_transaction`) and commits.

Why this is exactly-once per (batch, task): a commit by attempt A succeeds only if no other
attempt of the task called `init_transactions()` between A's own init and A's commit. Every
attempt that inits after A's commit reads A's ledger entry and writes nothing; every attempt
that inits earlier is fenced by A's init, and a fenced transaction is aborted, never visible.
So at most one attempt's output per (batch, task) becomes visible, and Spark's requirement
that the task succeed at least once makes it exactly one.

A task with no rows talks to no broker: it has nothing to duplicate, and no attempt of an
earlier batch can still commit (each batch's winning attempt fenced the older ones, and the
younger ones saw its ledger entry). This keeps the many empty partitions of a shuffle cheap.

The guarantee holds under the conditions the README lists: a replayed batch must give each
task the same rows (deterministic replay, no nondeterministic expressions before the sink,
a stable partitioning), and `kafka.transaction.timeout.ms` must exceed the longest task.
Visibility is atomic per task, not per batch: readers may see some tasks of a batch before
the others commit.

Options (case-insensitive, as Spark passes them):
- `kafka.bootstrap.servers` (required) and any other `kafka.*` librdkafka setting;
- `topic`: the topic of every row; it overrides a `topic` column, as in Spark's Kafka sink;
- `sinkId`: names the sink, hence its transactional ids and ledger. Streaming: defaults to
  the query id, which survives restarts from the checkpoint. Each query needs its own: the
  ledger remembers which query wrote each entry, and a task that finds a later batch
  written by another query (a new checkpoint with a reused sinkId) fails with
  SinkIdConflictError rather than skip its rows. Batch: defaults to a fresh id per write.
  An explicit `sinkId` makes a batch write resumable: re-running it writes only the task
  partitions that had not committed; inside `foreachBatch` it takes the micro-batch id from
  Spark, so a replayed micro-batch writes nothing twice (this is how to write Spark's
  update output mode exactly once: Python streaming sinks support append and complete);
- `ledgerTopic`: the ledger topic, default `__onceflow_sink_ledger` (created if missing).
- `atomicity`: `batch` or `task`; default the strongest the broker supports, decided on the
  driver at the start (`choose_atomicity`).

Rows reach the sink as Arrow record batches. Per batch, the participant client takes the
Arrow buffers of each batch as they are (`_produce_columns`: no Python work per row but for
headers); per task, columns are read with one `to_pylist()` each and produced row by row
into confluent-kafka.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain, repeat
from typing import TYPE_CHECKING, Any, Literal, cast

from confluent_kafka import KafkaError, KafkaException, Producer
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

from onceflow.client.errors import ClientError
from onceflow.client.participant import (
    BinaryColumn,
    PreparedTransaction,
    StalePreparedTransaction,
    TwoPhaseProducer,
)
from onceflow.client.participant_columns import header_sections
from onceflow.spark.access import KafkaAccessError
from onceflow.spark.batch_commit import (
    Atomicity,
    Decision,
    DecisionLog,
    choose_atomicity,
    colocation,
    complete_all,
    complete_decided,
    not_open,
    participant_settings,
    prepared_of,
    read_decision,
    task_transactional_id,
)
from onceflow.spark.ledger import DEFAULT_LEDGER_TOPIC, Ledger
from onceflow.spark.options import (
    CLIENT_DEFAULTS,
    SOURCE_OPTIONS,
    ClientConfig,
    OptionError,
    kafka_client_config,
)

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "OPERATION_TIMEOUT_S",
    "OnceflowBatchWriter",
    "OnceflowStreamWriter",
    "SinkCommitMessage",
    "SinkConfig",
    "SinkDataError",
    "SinkIdConflictError",
    "SinkTask",
    "SinkWriteError",
    "make_stream_writer",
    "make_writer",
    "sink_config",
    "write_task",
]

log = logging.getLogger(__name__)

# Deadline of each blocking Kafka call a task makes (init, ledger read, commit). init waits
# for the previous attempt's transaction to be completed, which the coordinator does at once.
OPERATION_TIMEOUT_S = 60.0

# Local properties Spark sets on the jobs of a micro-batch (verified on PySpark 4.1 to 4.3).
BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"

# Writer options, lowercased as Spark's CaseInsensitiveDict hands them over.
TOPIC = "topic"
SINK_ID = "sinkid"
LEDGER_TOPIC = "ledgertopic"
ATOMICITY = "atomicity"
WRITER_OPTIONS = {
    TOPIC: "topic",
    SINK_ID: "sinkId",
    LEDGER_TOPIC: "ledgerTopic",
    ATOMICITY: "atomicity",
}
# Spark adds these to a streaming sink's options itself; the sink has no use for them.
SPARK_OPTIONS = frozenset({"checkpointlocation", "queryname"})
KAFKA_PREFIX = "kafka."

# librdkafka settings the sink decides itself: None = never settable; otherwise the values
# that agree with what the sink needs.
_SINK_OWNED: dict[str, frozenset[str] | None] = {
    "transactional.id": None,
    "group.id": None,
    "group.instance.id": None,
    "enable.idempotence": frozenset({"true"}),
    "acks": frozenset({"all", "-1"}),
    "request.required.acks": frozenset({"all", "-1"}),
    "isolation.level": frozenset({"read_committed"}),
}
_SINK_OWNED_WHY = {
    "transactional.id": "the sink uses '<sinkId>-<task partition>'; choose the sink id "
    "with the 'sinkId' option",
    "group.id": "the sink keeps its ledger in groups of its own",
    "group.instance.id": "the sink keeps its ledger in groups of its own",
}

# Producer defaults a user may override with kafka.*: every transaction is flushed at its
# commit anyway, so a longer linger costs no latency and makes fuller batches;
# murmur2_random hashes keys as the Java client does, so keyed rows land where a Java
# producer (and Spark's own Kafka sink) would put them. metadata.recovery.strategy=none
# keeps librdkafka 2.x from "re-bootstrapping" away from a single broker that restarted,
# which can hang send_offsets_to_transaction (librdkafka issue 5511).
PRODUCER_DEFAULTS = {
    **CLIENT_DEFAULTS,
    "linger.ms": "20",
    "batch.num.messages": "10000",
    "partitioner": "murmur2_random",
    "metadata.recovery.strategy": "none",
}

COLUMNS = ("key", "value", "topic", "partition", "headers")


class SinkDataError(ValueError):
    """A row the sink cannot write (e.g. no topic). The task's transaction is aborted."""


class SinkWriteError(RuntimeError):
    """A Kafka call of a write task failed; the task's transaction is not committed, and
    the next attempt of the task (or the coordinator's timeout) aborts it."""


class SinkIdConflictError(RuntimeError):
    """The ledger shows a later batch written by another streaming query under the same
    sink id (a new checkpoint with a reused `sinkId`, or two queries sharing one). Skipping
    would silently drop this query's rows, so the task fails instead."""


@dataclass(frozen=True)
class SinkColumns:
    """Which DataFrame column plays each part (names as in the schema); None = absent."""

    value: str
    key: str | None = None
    topic: str | None = None
    partition: str | None = None
    headers: str | None = None


@dataclass(frozen=True)
class SinkConfig:
    """Everything a write task needs. Built on the driver, pickled to the tasks. The
    client settings are a ClientConfig, so no repr of this shows a secret."""

    client_config: Mapping[str, str]
    columns: SinkColumns
    topic: str | None = None
    sink_id: str | None = None
    # True when the user chose the sink id (a batch write is then resumable).
    explicit_sink_id: bool = False
    ledger_topic: str = DEFAULT_LEDGER_TOPIC
    timeout_s: float = OPERATION_TIMEOUT_S
    # As asked ("batch", "task" or None); the writer replaces it by the one it uses.
    atomicity: Atomicity | None = None
    # Per batch: the `__transaction_state` partition count the tasks' ids are colocated
    # with, for a completion in one request; None: completed one by one.
    colocated: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.client_config, ClientConfig):
            object.__setattr__(self, "client_config", ClientConfig(self.client_config))


@dataclass(frozen=True)
class SinkTask:
    """One write task: which sink, which task partition, which batch, which attempt.
    `owner` is the streaming query id ("" for a plain batch write), kept in the ledger to
    tell a replay by the same query from a clash with another query using the sink id."""

    sink_id: str
    partition: int
    batch_id: int
    attempt: int = 0
    owner: str = ""

    @property
    def transactional_id(self) -> str:
        return f"{self.sink_id}-{self.partition}"

    def __str__(self) -> str:
        return (
            f"sink '{self.sink_id}' task partition {self.partition} batch {self.batch_id} "
            f"attempt {self.attempt}"
        )


Outcome = Literal["written", "skipped", "empty"]


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """What a write task did. `written`: it committed `records` records and its ledger
    entry; `skipped`: the ledger showed the batch already written by an earlier attempt, so
    it wrote nothing; `empty`: it had no rows and talked to no broker."""

    sink_id: str
    partition: int
    batch_id: int
    attempt: int
    outcome: Outcome
    records: int = 0
    topics: list[str] = field(default_factory=list)
    # Per-batch atomicity: the task's prepared transaction (PreparedTransaction JSON).
    prepared: str | None = None
    owner: str = ""


# ---- options and schema ------------------------------------------------------------------


def sink_config(options: Mapping[str, str], schema: StructType) -> SinkConfig:
    """Check the writer's options and the DataFrame's columns; raise OptionError naming the
    first bad option or column."""
    opts = {k.lower(): v for k, v in options.items()}
    for key in opts:
        if key.startswith(KAFKA_PREFIX) and len(key) > len(KAFKA_PREFIX):
            continue
        if key in WRITER_OPTIONS or key in SPARK_OPTIONS:
            continue
        if key in SOURCE_OPTIONS:
            raise OptionError(
                f"option '{SOURCE_OPTIONS[key]}' is a read option; the onceflow writer takes "
                f"{_writer_option_list()}"
            )
        if key == "path":
            raise OptionError(
                "the onceflow sink takes no path (save(path) / start(path)); set the 'topic' "
                "option or write a 'topic' column"
            )
        raise OptionError(
            f"unknown option '{key}'; the onceflow writer takes {_writer_option_list()}"
        )

    client = kafka_client_config(opts)
    if not client.get("bootstrap.servers"):
        raise OptionError("option 'kafka.bootstrap.servers' is required")
    for key, allowed in _SINK_OWNED.items():
        if key not in client:
            continue
        value = client[key].strip().lower()
        if allowed is None:
            raise OptionError(f"option 'kafka.{key}' cannot be set: {_SINK_OWNED_WHY[key]}")
        if value not in allowed:
            raise OptionError(
                f"option 'kafka.{key}={client[key]}' contradicts the sink's transactions; "
                f"it must be {' or '.join(sorted(allowed))} (or left unset)"
            )

    topic = _nonblank(opts, TOPIC)
    sink_id = _nonblank(opts, SINK_ID)
    ledger_topic = _nonblank(opts, LEDGER_TOPIC) or DEFAULT_LEDGER_TOPIC
    atomicity = _nonblank(opts, ATOMICITY)
    if atomicity is not None and atomicity.lower() not in ("batch", "task"):
        raise OptionError(f"option 'atomicity' is '{atomicity}'; it must be 'batch' or 'task'")
    columns = sink_columns(schema)
    if topic is None and columns.topic is None:
        raise OptionError("no topic to write to: set the 'topic' option or write a 'topic' column")
    return SinkConfig(
        client_config=client,
        columns=columns,
        topic=topic,
        sink_id=sink_id,
        explicit_sink_id=sink_id is not None,
        ledger_topic=ledger_topic,
        atomicity=None if atomicity is None else cast(Atomicity, atomicity.lower()),
    )


def _writer_option_list() -> str:
    return ", ".join(f"'{name}'" for name in WRITER_OPTIONS.values()) + " and 'kafka.*'"


def _nonblank(opts: Mapping[str, str], key: str) -> str | None:
    if key not in opts:
        return None
    value = opts[key].strip()
    if not value:
        raise OptionError(f"option '{WRITER_OPTIONS[key]}' is empty")
    return value


def sink_columns(schema: StructType) -> SinkColumns:
    """Map the schema's columns (matched case-insensitively, as Spark does) to their parts
    and check their types against Spark's Kafka sink: value binary or string (required), key
    binary or string, topic string, partition integer, headers
    array<struct<key: string, value: binary>>."""
    found: dict[str, str] = {}
    for f in schema.fields:
        role = f.name.lower()
        if role not in COLUMNS:
            raise OptionError(
                f"column '{f.name}' is not one the sink writes; the onceflow sink takes "
                f"{', '.join(COLUMNS)} (select only those)"
            )
        if role in found:
            raise OptionError(f"columns '{found[role]}' and '{f.name}' both name the {role}")
        found[role] = f.name
        _check_type(f.name, role, f.dataType)
    if "value" not in found:
        raise OptionError("the onceflow sink needs a 'value' column (binary or string)")
    return SinkColumns(
        value=found["value"],
        key=found.get("key"),
        topic=found.get("topic"),
        partition=found.get("partition"),
        headers=found.get("headers"),
    )


def _check_type(name: str, role: str, dt: DataType) -> None:
    bytes_like = (BinaryType, StringType)
    ok = {
        "value": isinstance(dt, bytes_like),
        "key": isinstance(dt, bytes_like),
        "topic": isinstance(dt, StringType),
        "partition": isinstance(dt, IntegerType | LongType | ShortType | ByteType),
        "headers": _is_headers_type(dt),
    }[role]
    if not ok:
        want = {
            "value": "binary or string",
            "key": "binary or string",
            "topic": "string",
            "partition": "int",
            "headers": "array<struct<key: string, value: binary>>",
        }[role]
        raise OptionError(
            f"column '{name}' has type {dt.simpleString()}; the {role} must be {want}"
        )


def _is_headers_type(dt: DataType) -> bool:
    if not isinstance(dt, ArrayType) or not isinstance(dt.elementType, StructType):
        return False
    fields = {f.name.lower(): f.dataType for f in dt.elementType.fields}
    return (
        set(fields) == {"key", "value"}
        and isinstance(fields["key"], StringType)
        and isinstance(fields["value"], BinaryType | StringType)
    )


# ---- the task --------------------------------------------------------------------------


def write_task(
    config: SinkConfig, task: SinkTask, batches: Iterable[pa.RecordBatch]
) -> SinkCommitMessage:
    """Write one task's rows exactly once for (sink, partition, batch): see the module doc.

    Raises SinkWriteError when a Kafka call fails (including when a newer attempt of the
    task fenced this one), SinkDataError for a row the sink cannot write.
    """
    rows = iter(batches)
    first = _first_nonempty(rows)
    if first is None:
        return _message(task, "empty")
    if config.atomicity == "batch":
        return prepare_task(config, task, chain([first], rows))

    txn_id = task.transactional_id
    errors: list[KafkaError] = []
    producer = Producer(_producer_config(config, txn_id, errors))
    ledger: Ledger | None = None
    in_txn = False
    try:
        ledger = Ledger(config.client_config, config.ledger_topic, txn_id, config.timeout_s, log)
        ledger.ensure_topic()
        _await_broker(producer, config)
        producer.init_transactions(config.timeout_s)
        done = ledger.read()
        if done is not None and done.next_batch > task.batch_id:
            if task.owner and done.owner and done.owner != task.owner:
                raise SinkIdConflictError(
                    f"{task}: the ledger shows batch {done.next_batch - 1} of this task "
                    f"written by streaming query {done.owner}, not by this query "
                    f"({task.owner}). A new checkpoint with a reused sinkId, or two queries "
                    f"sharing one, would lose rows here; give this query its own 'sinkId'"
                )
            for _ in rows:  # Spark expects the input consumed
                pass
            log.info(
                "%s: already in the ledger (next batch %d); writing nothing", task, done.next_batch
            )
            return _message(task, "skipped")

        producer.begin_transaction()
        in_txn = True
        records, topics = _produce_all(producer, config, chain([first], rows))
        remaining = producer.flush(config.timeout_s)
        if errors:
            raise KafkaException(errors[0])
        if remaining:
            raise KafkaException(
                KafkaError(
                    KafkaError._TIMED_OUT,
                    f"{remaining} records undelivered after {config.timeout_s} s",
                )
            )
        producer.send_offsets_to_transaction(
            ledger.entry(task.batch_id, task.owner), ledger.group_metadata(), config.timeout_s
        )
        producer.commit_transaction(config.timeout_s)
        in_txn = False
        log.info("%s: committed %d records and its ledger entry", task, records)
        return _message(task, "written", records, sorted(topics))
    except (KafkaException, KafkaAccessError, SystemError) as exc:
        kafka_exc = _kafka_exception(exc)
        if ledger is not None:
            ledger.forget_topic()
        if in_txn:
            _abort_quietly(producer, task, config.timeout_s)
        if isinstance(exc, KafkaAccessError):
            raise SinkWriteError(
                f"{task} (transactional id '{task.transactional_id}'): {exc}"
            ) from exc
        if kafka_exc is None:
            raise
        raise SinkWriteError(_describe(kafka_exc, task)) from kafka_exc
    except BaseException:
        if in_txn:
            _abort_quietly(producer, task, config.timeout_s)
        raise
    finally:
        if ledger is not None:
            with contextlib.suppress(Exception):
                ledger.close()
        _close(producer)


def prepare_task(
    config: SinkConfig, task: SinkTask, rows: Iterable[pa.RecordBatch]
) -> SinkCommitMessage:
    """Per-batch atomicity (see `onceflow.spark.batch_commit`): write the task's rows in a
    two-phase transaction and prepare it, unless the sink's decision log shows the batch
    decided already, in which case write nothing (and, when the driver completes the
    transactions one by one, complete this task's part)."""
    txn_id = task_transactional_id(task.sink_id, task.partition, config.colocated)
    try:
        decision = read_decision(
            config.client_config, config.ledger_topic, task.sink_id, config.timeout_s
        )
        if decision is not None and decision.batch_id >= task.batch_id and not decision.aborted:
            if task.owner and decision.owner and decision.owner != task.owner:
                raise SinkIdConflictError(
                    f"{task}: the decision log shows batch {decision.batch_id} committed by "
                    f"streaming query {decision.owner}, not by this query ({task.owner}); "
                    f"give this query its own 'sinkId'"
                )
            mine = decision.prepared.get(task.partition)
            # Completed together by the driver when colocated; else this task's part here.
            one_by_one = decision.colocated is None
            if decision.batch_id == task.batch_id and mine is not None and one_by_one:
                complete_all(config.client_config, [mine], commit=True)
            for _ in rows:  # Spark expects the input consumed
                pass
            log.info("%s: batch decided already; writing nothing", task)
            return _message(task, "skipped")
        bootstrap, settings = participant_settings(config.client_config)
        with TwoPhaseProducer(bootstrap, txn_id, **settings) as producer:
            producer.init()  # fences older attempts of the task and aborts what they left
            producer.begin()
            try:
                records, topics = _produce_columns(producer, config, rows)
                prepared = producer.prepare()
            except BaseException:
                with contextlib.suppress(Exception):
                    producer.abort()
                raise
        log.info("%s: prepared %d records", task, records)
        message = _message(task, "written", records, sorted(topics))
        message.prepared = prepared.to_json()
        message.owner = task.owner
        return message
    except ClientError as exc:
        raise SinkWriteError(f"{task} (transactional id '{txn_id}'): {exc}") from exc


def _message(
    task: SinkTask, outcome: Outcome, records: int = 0, topics: list[str] | None = None
) -> SinkCommitMessage:
    return SinkCommitMessage(
        sink_id=task.sink_id,
        partition=task.partition,
        batch_id=task.batch_id,
        attempt=task.attempt,
        outcome=outcome,
        records=records,
        topics=topics or [],
    )


def _first_nonempty(rows: Iterator[pa.RecordBatch]) -> pa.RecordBatch | None:
    for rb in rows:
        if rb.num_rows:
            return rb
    return None


def _producer_config(config: SinkConfig, txn_id: str, errors: list[KafkaError]) -> dict[str, Any]:
    def on_delivery(err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    return {
        **PRODUCER_DEFAULTS,
        **config.client_config,
        "transactional.id": txn_id,
        # Only failures call back (into `errors`); success is learnt from flush().
        "delivery.report.only.error": True,
        "on_delivery": on_delivery,
        "logger": log,
    }


def _produce_all(
    producer: Producer, config: SinkConfig, batches: Iterable[pa.RecordBatch]
) -> tuple[int, set[str]]:
    """Produce every row. Columns are converted with one to_pylist() each, not row by row;
    the common row (no partition, no headers) is one positional produce() call."""
    cols = config.columns
    produce = producer.produce
    records = 0
    topics: set[str] = set()
    for rb in batches:
        n = rb.num_rows
        if not n:
            continue
        values: list[Any] = rb.column(cols.value).to_pylist()
        keys: Iterable[Any] = rb.column(cols.key).to_pylist() if cols.key else repeat(None, n)
        if config.topic is not None:
            row_topics: Iterable[Any] = repeat(config.topic, n)
            topics.add(config.topic)
        else:
            assert cols.topic is not None  # sink_config checked there is one
            row_topics = rb.column(cols.topic).to_pylist()
        parts: Iterable[Any] = (
            rb.column(cols.partition).to_pylist() if cols.partition else repeat(None, n)
        )
        headers: Iterable[Any] = (
            rb.column(cols.headers).to_pylist() if cols.headers else repeat(None, n)
        )
        for value, key, topic, part, hdrs in zip(
            values, keys, row_topics, parts, headers, strict=True
        ):
            if topic is None:
                raise SinkDataError(f"row {records} has a null topic and no 'topic' option is set")
            while True:
                try:
                    if part is None and not hdrs:
                        produce(topic, value, key)
                    else:
                        produce(
                            topic,
                            value,
                            key,
                            -1 if part is None else part,
                            headers=[(h["key"], h["value"]) for h in hdrs] if hdrs else None,
                        )
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    producer.poll(0.05)
            records += 1
            if config.topic is None:
                topics.add(topic)
        producer.poll(0)
    return records, topics


def _produce_columns(
    producer: TwoPhaseProducer, config: SinkConfig, batches: Iterable[pa.RecordBatch]
) -> tuple[int, set[str]]:
    """Produce every row through the participant client from the Arrow buffers: keys and
    values as they are, partitions as one numpy array, one call per Arrow batch and topic
    (a topic column is split with Arrow's own filter)."""
    import pyarrow.compute as pc

    cols = config.columns
    records = 0
    topics: set[str] = set()
    for rb in batches:
        if not rb.num_rows:
            continue
        if config.topic is not None:
            groups: Iterable[tuple[str, pa.RecordBatch]] = [(config.topic, rb)]
        else:
            assert cols.topic is not None  # sink_config checked there is one
            column = rb.column(cols.topic)
            if column.null_count:
                first = column.is_null().index(True).as_py()
                raise SinkDataError(
                    f"row {records + first} has a null topic and no 'topic' option is set"
                )
            groups = [
                (name, rb.filter(pc.equal(column, name))) for name in column.unique().to_pylist()
            ]
        for topic, part in groups:
            producer.produce_columns(
                topic,
                _binary_column(part.column(cols.value)),
                keys=_keys_column(part.column(cols.key)) if cols.key else None,
                partition=_partitions(part.column(cols.partition)) if cols.partition else None,
                headers=_headers_column(part.column(cols.headers)) if cols.headers else None,
            )
            topics.add(topic)
        records += rb.num_rows
    return records, topics


def _binary_column(array: pa.Array) -> BinaryColumn:
    """An Arrow binary or string array's buffers as a BinaryColumn, without a copy."""
    import numpy as np
    import pyarrow as pa

    n = len(array)
    large = pa.types.is_large_binary(array.type) or pa.types.is_large_string(array.type)
    _validity, offsets_buffer, data_buffer = array.buffers()
    width = np.dtype(np.int64 if large else np.int32)
    offsets = np.frombuffer(offsets_buffer, width, n + 1, array.offset * width.itemsize)
    data = np.frombuffer(data_buffer, np.uint8) if data_buffer else np.zeros(0, np.uint8)
    valid = array.is_valid().to_numpy(zero_copy_only=False) if array.null_count else None
    return BinaryColumn.from_buffers(data, offsets, valid)


def _keys_column(array: pa.Array) -> BinaryColumn | None:
    """The key column; None when every key is null (no key bytes to encode)."""
    return None if array.null_count == len(array) else _binary_column(array)


def _partitions(array: pa.Array) -> Any:
    """The partition column as int64, -1 for a null (the default partitioning)."""
    import numpy as np

    return array.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)


def _headers_column(array: pa.Array) -> BinaryColumn:
    """Each row's headers section, encoded row by row: headers have no columnar path."""
    rows = array.to_pylist()
    return header_sections(
        [
            [
                (h["key"], h["value"].encode() if isinstance(h["value"], str) else h["value"])
                for h in hdrs
            ]
            if hdrs
            else None
            for hdrs in rows
        ]
    )


def _await_broker(producer: Producer, config: SinkConfig) -> None:
    """Return once the producer holds a connection to a broker Metadata named. librdkafka
    drops its bootstrap connection when the first Metadata answer names the brokers; an
    init_transactions that finds no broker connected then asks again only after 500 ms,
    which about one task start in five paid. A second Metadata request waits for the named
    broker's connection."""
    for _ in range(2):
        producer.list_topics(config.ledger_topic, config.timeout_s)


def _abort_quietly(producer: Producer, task: SinkTask, timeout_s: float) -> None:
    """Abort the task's transaction so its partitions' LSO moves on now rather than at the
    next attempt's init or the transaction timeout. A failure here (the producer was fenced
    or is broken) is logged; the caller re-raises the original error."""
    try:
        producer.abort_transaction(timeout_s)
    except Exception as exc:
        log.warning("%s: could not abort its transaction (%s); the next attempt will", task, exc)


def _close(producer: Producer) -> None:
    # A fenced producer can never deliver what it holds: purge so closing never waits.
    with contextlib.suppress(Exception):
        producer.purge()
    with contextlib.suppress(Exception):
        producer.flush(0)


def _kafka_exception(exc: BaseException) -> KafkaException | None:
    """The KafkaException behind `exc`. confluent-kafka raises a SystemError when a fatal
    error (such as being fenced) surfaces while a Python callback runs; the real error is
    its context."""
    if isinstance(exc, KafkaException):
        return exc
    if isinstance(exc, SystemError) and isinstance(exc.__context__, KafkaException):
        return exc.__context__
    return None


def _describe(exc: KafkaException, task: SinkTask) -> str:
    err = exc.args[0] if exc.args else None
    if isinstance(err, KafkaError):
        fenced = err.code() in (
            KafkaError._FENCED,
            KafkaError.PRODUCER_FENCED,
            KafkaError.INVALID_PRODUCER_EPOCH,
        )
        what = (
            "fenced: a newer attempt of this task took over its transactional id; this "
            "attempt's transaction is aborted"
            if fenced
            else f"Kafka error {err.name()}"
        )
        return f"{task} (transactional id '{task.transactional_id}'): {what}: {err.str()}"
    return f"{task} (transactional id '{task.transactional_id}'): {exc}"


# ---- Spark's writers ---------------------------------------------------------------------


def _task_context() -> TaskContext:
    ctx = TaskContext.get()
    if ctx is None:
        raise RuntimeError("the onceflow sink's write() must run inside a Spark task")
    return ctx


class OnceflowStreamWriter(DataSourceStreamArrowWriter):
    """`df.writeStream.format("onceflow")`: one transaction per task and micro-batch."""

    def __init__(self, config: SinkConfig) -> None:
        self.config = config

    def task(self, ctx: TaskContext) -> SinkTask:
        sink_id = self.config.sink_id or ctx.getLocalProperty(QUERY_ID_PROPERTY)
        if not sink_id:
            raise RuntimeError(
                f"no sink id: the 'sinkId' option is not set and Spark did not set "
                f"'{QUERY_ID_PROPERTY}' on this task"
            )
        batch = ctx.getLocalProperty(BATCH_ID_PROPERTY)
        if batch is None:
            raise RuntimeError(
                f"Spark did not set '{BATCH_ID_PROPERTY}' on this streaming write task, so "
                f"the sink cannot tell a replayed batch from a new one"
            )
        owner = ctx.getLocalProperty(QUERY_ID_PROPERTY) or ""
        return SinkTask(sink_id, ctx.partitionId(), int(batch), ctx.attemptNumber(), owner)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        return write_task(self.config, self.task(_task_context()), iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Per batch: record the decision and complete the tasks' transactions. Per task:
        every task already committed its own; check they wrote the batch Spark commits."""
        if self.config.atomicity == "batch":
            commit_batch(self.config, messages, batchId)
            return
        done = _check_messages(messages, batchId)
        log.debug("batch %d: %s", batchId, done)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Per batch: abort the prepared transactions. Per task: tasks that committed stay
        committed (Kafka cannot take a transaction back); Spark runs the batch again, and the
        ledger makes those tasks write nothing then."""
        if self.config.atomicity == "batch":
            abort_batch(self.config, messages)
            return
        written = [m for m in messages if isinstance(m, SinkCommitMessage) and m.records]
        if written:
            log.warning(
                "batch %d aborted by Spark after %d task(s) committed %d records; they stay "
                "visible, and a replay of the batch will not write them again",
                batchId,
                len(written),
                sum(m.records for m in written),
            )


class OnceflowBatchWriter(DataSourceArrowWriter):
    """`df.write.format("onceflow")`: one transaction per task."""

    def __init__(self, config: SinkConfig) -> None:
        self.config = config

    def task(self, ctx: TaskContext) -> SinkTask:
        assert self.config.sink_id is not None  # make_writer chose one
        batch, owner = 0, ""
        if self.config.explicit_sink_id:
            # Inside foreachBatch the micro-batch id makes a resumable write per batch.
            batch = int(ctx.getLocalProperty(BATCH_ID_PROPERTY) or 0)
            owner = ctx.getLocalProperty(QUERY_ID_PROPERTY) or ""
        return SinkTask(self.config.sink_id, ctx.partitionId(), batch, ctx.attemptNumber(), owner)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        return write_task(self.config, self.task(_task_context()), iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Per batch: record the decision and complete the tasks' transactions. Per task:
        nothing to do, every task committed its own transaction."""
        if self.config.atomicity == "batch":
            ids = {m.batch_id for m in messages if isinstance(m, SinkCommitMessage)}
            commit_batch(self.config, messages, ids.pop() if ids else 0)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.config.atomicity == "batch":
            abort_batch(self.config, messages)
            return
        self._warn_committed(messages)

    def _warn_committed(self, messages: list[WriterCommitMessage | None]) -> None:

        written = [m for m in messages if isinstance(m, SinkCommitMessage) and m.records]
        if written:
            log.warning(
                "write of sink '%s' aborted by Spark after %d task(s) committed %d records; "
                "they stay visible%s",
                self.config.sink_id,
                len(written),
                sum(m.records for m in written),
                (", and re-running the write with the same sinkId skips them")
                if self.config.explicit_sink_id
                else "",
            )


def commit_batch(
    config: SinkConfig,
    messages: Sequence[WriterCommitMessage | None],
    batch_id: int,
    on_step: Callable[[str], None] | None = None,
) -> None:
    """Per-batch atomicity's commit: record the decision, then complete every task's
    transaction; a replay of a decided batch completes what is left and records nothing.
    `on_step("prepared")` (before the decision), `on_step("decided")` and
    `on_step("completed")` (after the completion, or each one when one by one) let tests
    stop a driver there."""
    step = on_step or (lambda _: None)
    _check_messages(messages, batch_id)
    ours = [m for m in messages if isinstance(m, SinkCommitMessage)]
    sink_ids = {m.sink_id for m in ours}
    if not sink_ids:
        return
    (sink_id,) = sink_ids
    prepared = prepared_of(ours)
    owner = next((m.owner for m in ours if m.owner), "")
    decisions = DecisionLog(config.client_config, config.ledger_topic, sink_id, config.timeout_s)
    try:
        last = decisions.last()
        if last is not None and last.batch_id >= batch_id and not last.aborted:
            decision = last if last.batch_id == batch_id else Decision(batch_id, owner, {})
            log.info(
                "sink '%s' batch %d: decided already; completing %d",
                sink_id,
                batch_id,
                len(decision.prepared),
            )
        elif not prepared:
            return
        else:
            step("prepared")
            if config.colocated is None:
                _abort_if_any_gone(config, sink_id, batch_id, prepared)
            decision = Decision(batch_id, owner, prepared, config.colocated)
            decisions.record(decision)
            step("decided")
        try:
            complete_decided(
                config.client_config,
                decision.prepared.values(),
                True,
                decision.colocated,
                lambda _: step("completed"),
            )
        except StalePreparedTransaction as exc:
            # All or nothing: nothing was committed. Undo the decision, so that the replay
            # writes the batch again, and abort what is left.
            decisions.record(dataclasses.replace(decision, aborted=True))
            complete_decided(
                config.client_config, decision.prepared.values(), False, decision.colocated
            )
            raise SinkWriteError(
                f"sink '{sink_id}' batch {batch_id}: {exc}; (a newer attempt of a task, e.g. "
                f"a speculative one, aborted its transaction); the batch is aborted whole and "
                f"is written again when the query restarts"
            ) from exc
    finally:
        decisions.close()
    if decision.colocated is not None:
        step("completed")
    log.info(
        "sink '%s' batch %d: committed %d task transactions",
        sink_id,
        batch_id,
        len(decision.prepared),
    )


def _abort_if_any_gone(
    config: SinkConfig, sink_id: str, batch_id: int, prepared: Mapping[int, PreparedTransaction]
) -> None:
    """One by one, a commit could end some transactions and find another gone: ask first."""
    gone = not_open(config.client_config, prepared.values())
    if gone:
        complete_all(config.client_config, prepared.values(), commit=False)
        raise SinkWriteError(
            f"sink '{sink_id}' batch {batch_id}: the prepared transactions of "
            f"{', '.join(t.transactional_id for t in gone)} were aborted before the "
            f"decision (by a newer attempt of the task, e.g. a speculative one); the "
            f"batch is aborted whole and is written again when the query restarts"
        )


def abort_batch(config: SinkConfig, messages: Sequence[WriterCommitMessage | None]) -> None:
    """Abort every prepared transaction of the batch: nothing of it becomes visible, and
    Spark writes it again. Spark also calls this when the commit itself failed; if the
    decision was recorded by then, the batch is committed: nothing is aborted, and the
    replay after the restart completes what is left."""
    ours = [m for m in messages if isinstance(m, SinkCommitMessage)]
    prepared = prepared_of(ours)
    if not prepared:
        return
    decision = read_decision(
        config.client_config, config.ledger_topic, ours[0].sink_id, config.timeout_s
    )
    if decision is not None and decision.batch_id >= ours[0].batch_id and not decision.aborted:
        log.warning(
            "sink '%s' batch %d: Spark aborts a batch whose commit was decided; it stays "
            "committed, and the replay after the restart completes what is left",
            ours[0].sink_id,
            ours[0].batch_id,
        )
        return
    complete_decided(config.client_config, prepared.values(), False, config.colocated)


def _check_messages(messages: Sequence[WriterCommitMessage | None], batch_id: int) -> str:
    """Tasks that reported a different batch than the one Spark commits mean the batch id
    the tasks saw is wrong, and with it the ledger: fail loudly rather than go on."""
    counts = {"written": 0, "skipped": 0, "empty": 0}
    records = 0
    for m in messages:
        if not isinstance(m, SinkCommitMessage):
            continue
        if m.batch_id != batch_id:
            raise RuntimeError(
                f"sink '{m.sink_id}' task partition {m.partition} wrote batch {m.batch_id} "
                f"while Spark commits batch {batch_id}"
            )
        counts[m.outcome] += 1
        records += m.records
    return f"{records} records; tasks {counts}"


def make_writer(
    options: Mapping[str, str], schema: StructType, overwrite: bool
) -> OnceflowBatchWriter:
    """The writer for `df.write.format("onceflow")` (called by OnceflowDataSource.writer)."""
    if overwrite:
        raise OptionError(
            "save mode 'overwrite' is not supported: Kafka topics are append-only; use "
            "mode('append')"
        )
    config = sink_config(options, schema)
    if config.sink_id is None:
        # Fresh per write, chosen once on the driver, so every attempt of a task shares it.
        config = dataclasses.replace(config, sink_id=f"onceflow-write-{uuid.uuid4()}")
    return OnceflowBatchWriter(_with_atomicity(config))


def make_stream_writer(
    options: Mapping[str, str], schema: StructType, overwrite: bool
) -> OnceflowStreamWriter:
    """The writer for `df.writeStream.format("onceflow")` (called by
    OnceflowDataSource.streamWriter). `overwrite` is Spark's complete output mode: as with
    Spark's Kafka sink, the whole result table is appended in every micro-batch."""
    return OnceflowStreamWriter(_with_atomicity(sink_config(options, schema)))


def _with_atomicity(config: SinkConfig) -> SinkConfig:
    """Decide the atomicity once, on the driver, at the start: a 'batch' the broker cannot
    serve fails here; the default asks the broker (see `onceflow.spark.batch_commit`)."""
    probe_id = config.sink_id or f"query-{uuid.uuid4()}"
    chosen = choose_atomicity(config.atomicity, config.client_config, probe_id)
    colocated = colocation(config.client_config, probe_id) if chosen == "batch" else None
    return dataclasses.replace(config, atomicity=chosen, colocated=colocated)
