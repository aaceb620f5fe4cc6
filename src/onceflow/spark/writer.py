"""The `onceflow` sink: exactly-once writes from Spark to Kafka, one transaction per task
(`atomicity=task`) or one decision per micro-batch over the tasks' prepared two-phase
transactions (`atomicity=batch`: `prepare_task`, `commit_batch`; see
`onceflow.spark.batch_commit`).

The tasks write (`onceflow.spark.sink_tasks`); this module holds the writers Spark calls on
the driver and their commits. The options and the values passed between driver and tasks
are in `onceflow.spark.sink_config`.

The guarantee holds under the conditions the README lists: a replayed batch must give each
task the same rows (deterministic replay, no nondeterministic expressions before the sink,
a stable partitioning), and `kafka.transaction.timeout.ms` must exceed the longest task.
Per task, visibility is atomic per task: readers may see some tasks of a batch before the
others commit. Per batch, a read_committed reader sees a micro-batch whole or not at all.

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
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from onceflow.client.participant import (
    PreparedTransaction,
    StalePreparedTransaction,
)
from onceflow.spark.batch_commit import (
    Atomicity,
    Decision,
    DecisionLog,
    choose_atomicity,
    colocation,
    complete_all,
    complete_decided,
    not_open,
    prepared_of,
    read_decision,
)
from onceflow.spark.options import OptionError
from onceflow.spark.sink_config import (
    BATCH_ID_PROPERTY,
    QUERY_ID_PROPERTY,
    SinkCommitMessage,
    SinkConfig,
    SinkTask,
    SinkWriteError,
    sink_config,
)
from onceflow.spark.sink_tasks import write_task

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "OnceflowBatchWriter",
    "OnceflowStreamWriter",
    "abort_batch",
    "commit_batch",
    "make_stream_writer",
    "make_writer",
]

log = logging.getLogger(__name__)


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


# What `_with_atomicity` decided, per client settings, asked atomicity and chosen sink id,
# for CHOICE_TTL_S. Spark builds a streaming query's writer again for every micro-batch, on
# a reused Python worker: asking the broker once per query rather than per micro-batch
# saves the round trips, and keeps a micro-batch from failing its query while the probe's
# coordinator moves to another broker (it answers NOT_COORDINATOR until then).
CHOICE_TTL_S = 300.0
_choices: dict[tuple[object, ...], tuple[float, Atomicity, int | None]] = {}
_choices_lock = threading.Lock()


def _with_atomicity(config: SinkConfig) -> SinkConfig:
    """Decide the atomicity on the driver, at the start: a 'batch' the broker cannot serve
    fails here; the default asks the broker (see `onceflow.spark.batch_commit`)."""
    key = (
        tuple(sorted(config.client_config.items())),
        config.atomicity,
        config.sink_id if config.explicit_sink_id else None,
    )
    now = time.monotonic()
    with _choices_lock:
        known = _choices.get(key)
    if known is not None and now - known[0] < CHOICE_TTL_S:
        _, chosen, colocated = known
    else:
        probe_id = config.sink_id or f"query-{uuid.uuid4()}"
        chosen = choose_atomicity(config.atomicity, config.client_config, probe_id)
        colocated = colocation(config.client_config, probe_id) if chosen == "batch" else None
        with _choices_lock:
            _choices[key] = (now, chosen, colocated)
    return dataclasses.replace(config, atomicity=chosen, colocated=colocated)
