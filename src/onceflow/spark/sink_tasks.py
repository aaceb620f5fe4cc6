"""What a write task of the `onceflow` sink does: per task, one transaction (`write_task`);
per batch, a prepared two-phase transaction (`prepare_task`; see
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

Rows reach the sink as Arrow record batches. Per batch, the participant client takes the
Arrow buffers of each batch as they are (`_produce_columns`: no Python work per row but for
headers); per task, columns are read with one `to_pylist()` each and produced row by row
into confluent-kafka.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator
from itertools import chain, repeat
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, KafkaException, Producer

from onceflow.client.errors import ClientError
from onceflow.client.participant import (
    BinaryColumn,
    TwoPhaseProducer,
)
from onceflow.client.participant_columns import header_sections
from onceflow.spark.access import KafkaAccessError, await_broker
from onceflow.spark.batch_commit import (
    complete_all,
    participant_settings,
    read_decision,
    task_transactional_id,
)
from onceflow.spark.ledger import Ledger
from onceflow.spark.sink_config import (
    PRODUCER_DEFAULTS,
    Outcome,
    SinkCommitMessage,
    SinkConfig,
    SinkDataError,
    SinkIdConflictError,
    SinkTask,
    SinkWriteError,
)

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["prepare_task", "write_task"]

log = logging.getLogger(__name__)


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
        await_broker(producer, None, config.timeout_s, config.ledger_topic)
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
