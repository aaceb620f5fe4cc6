"""What a write task of the `onceflow` sink does: per task, one transaction (`write_task`);
per batch, a prepared two-phase transaction (`prepare_task`; see
`onceflow.spark.batch_commit`). Both write through Onceflow's participant client
(`onceflow.client.participant`), which takes each Arrow batch's buffers whole
(`_produce_columns`: no Python work per row but for headers); per task it is an ordinary
transactional producer (transaction version 0, any InitProducerId version), so that mode
needs nothing of a broker that Apache Kafka lacks.

Each write task (one partition of one micro-batch) owns the transactional id
`<sink id>-<task partition>`, which is the same for every attempt of that task in every
batch, before and after a restart. Per task, the task:

1. inits the producer (InitProducerId), which fences every older attempt of the task (a
   retried, speculative or pre-crash one) and completes its open transaction;
2. reads its ledger entry (see `onceflow.spark.ledger`): the first batch id it has not
   written. If this batch is already written, the task writes nothing and succeeds. This is
   what makes a batch that Spark replays (the driver died between the sink's commit and
   Spark's commit log) write nothing twice;
3. otherwise begins a transaction, adds the ledger entry for this batch to it
   (AddOffsetsToTxn and TxnOffsetCommit, Kafka's sendOffsetsToTransaction), produces its
   rows and commits.

Why this is exactly-once per (batch, task): a commit by attempt A succeeds only if no other
attempt of the task inited between A's own init and A's commit. Every attempt that inits
after A's commit reads A's ledger entry and writes nothing; every attempt that inits earlier
is fenced by A's init, and a fenced transaction is aborted, never visible. So at most one
attempt's output per (batch, task) becomes visible, and Spark's requirement that the task
succeed at least once makes it exactly one.

A task with no rows talks to no broker: it has nothing to duplicate, and no attempt of an
earlier batch can still commit (each batch's winning attempt fenced the older ones, and the
younger ones saw its ledger entry). This keeps the many empty partitions of a shuffle cheap.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator
from itertools import chain
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaException

from onceflow.client.errors import ClientError, KafkaApiError
from onceflow.client.group_offsets import CommittedOffset
from onceflow.client.participant import (
    BinaryColumn,
    TwoPhaseProducer,
)
from onceflow.client.participant_columns import header_sections
from onceflow.errors import ErrorCode
from onceflow.spark.access import KafkaAccessError
from onceflow.spark.batch_commit import (
    complete_all,
    participant_settings,
    read_decision,
    task_transactional_id,
)
from onceflow.spark.ledger import (
    LEDGER_PARTITION,
    ensure_ledger_topic,
    forget_ledger_topic,
    ledger_group,
)
from onceflow.spark.sink_config import (
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

# A newer attempt of the task took its transactional id over.
FENCED = frozenset({ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch})


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
    group = ledger_group(txn_id)
    try:
        ensure_ledger_topic(
            config.client_config, config.ledger_topic, txn_id, config.timeout_s, log
        )
        bootstrap, settings = participant_settings(config.client_config)
        with TwoPhaseProducer(bootstrap, txn_id, two_phase=False, **settings) as producer:
            producer.init()  # fences older attempts of the task and aborts what they left
            done = _ledger_entry(producer, config, group)
            if done is not None and done.offset > task.batch_id:
                if task.owner and done.metadata and done.metadata != task.owner:
                    raise SinkIdConflictError(
                        f"{task}: the ledger shows batch {done.offset - 1} of this task "
                        f"written by streaming query {done.metadata}, not by this query "
                        f"({task.owner}). A new checkpoint with a reused sinkId, or two "
                        f"queries sharing one, would lose rows here; give this query its own "
                        f"'sinkId'"
                    )
                for _ in rows:  # Spark expects the input consumed
                    pass
                log.info(
                    "%s: already in the ledger (next batch %d); writing nothing", task, done.offset
                )
                return _message(task, "skipped")
            records, topics = _commit_rows(producer, config, task, chain([first], rows))
        log.info("%s: committed %d records and its ledger entry", task, records)
        return _message(task, "written", records, sorted(topics))
    except (ClientError, KafkaAccessError, KafkaException) as exc:
        forget_ledger_topic(config.client_config, config.ledger_topic)
        raise SinkWriteError(_describe(exc, task)) from exc


def _commit_rows(
    producer: TwoPhaseProducer, config: SinkConfig, task: SinkTask, rows: Iterable[pa.RecordBatch]
) -> tuple[int, set[str]]:
    """The task's rows and its ledger entry in one transaction; aborted if anything fails.
    The entry goes first, while nothing is being sent (its requests would wait for the
    sending thread): it is pending until the commit either way."""
    producer.begin()
    try:
        entry = {(config.ledger_topic, LEDGER_PARTITION): (task.batch_id + 1, task.owner)}
        producer.send_offsets(ledger_group(task.transactional_id), entry)
        records, topics = _produce_columns(producer, config, rows)
        producer.commit()
    except BaseException:
        # Now rather than at the next attempt's init or the transaction timeout, so the
        # partitions' LSO moves on; a fenced producer cannot, and need not.
        with contextlib.suppress(Exception):
            producer.abort()
        raise
    return records, topics


def _ledger_entry(
    producer: TwoPhaseProducer, config: SinkConfig, group: str
) -> CommittedOffset | None:
    """The task's ledger entry: the next batch id it has not written, with its writer
    (the owner) as metadata. Read after `init`, so no older attempt can change it."""
    try:
        return producer.group_offsets(group).committed(config.ledger_topic, LEDGER_PARTITION)
    except KafkaApiError as exc:
        if exc.code in (ErrorCode.group_authorization_failed, ErrorCode.topic_authorization_failed):
            raise KafkaApiError(
                exc.code,
                f"cannot read the ledger group '{group}': {exc}; the sink needs READ on it and "
                f"on topic '{config.ledger_topic}' (docs/spark-security.md)",
            ) from None
        raise


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


def _describe(exc: BaseException, task: SinkTask) -> str:
    where = f"{task} (transactional id '{task.transactional_id}')"
    if isinstance(exc, KafkaApiError) and exc.code in FENCED:
        return (
            f"{where}: fenced: a newer attempt of this task took over its transactional id; "
            f"this attempt's transaction is aborted: {exc}"
        )
    return f"{where}: {exc}"
