"""The transaction coordinator: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn.

Every state change of a transactional id is a record in `__transaction_state`, written before
it takes effect (two-step transitions, see metadata.py). Ending a transaction is:
PrepareCommit/PrepareAbort logged (the client is answered), then a COMMIT/ABORT marker
written to every partition of the transaction, then CompleteCommit/CompleteAbort logged.
After a crash, loading the log finds transactions stuck in a Prepare state and finishes
them; markers written twice are harmless.

Zombies are fenced by epochs: a new producer with the same transactional id, or the timeout
of a stalled transaction, bumps the epoch, and the abort markers carry the bumped epoch to
every partition, where the older epoch is rejected from then on. With transaction version 2
(EndTxn v5, `end_txn_bumping`) every end bumps it the same way.

Two-phase commit (KIP-939) hands a transaction's decision to an external coordinator: an id
initialised with enable2Pc has transactions no timeout aborts, and a new instance that asks
to keep the open one (keepPreparedTxn) fences the old instances by the same epoch bump but
writes no markers, so the transaction stays open for it to end.

Which transactional ids are coordinated here goes by `__transaction_state` partition, each
served at its own coordinator epoch, which every marker of its transactions carries (a
partition refuses markers of an older coordinator epoch, so a deposed coordinator cannot
write). A single broker calls `await load()` at startup: every partition, at the epoch in
`coordinator_epoch` (the broker's durable counter). A broker of a cluster makes the
coordinator with `serve_all=False` (or calls `serve_loaded_only()`), calls
`await load_partition(p, leader_epoch)` when it becomes the leader of partition p (its ids
answer COORDINATOR_LOAD_IN_PROGRESS until the load is done, which then finishes every
PrepareCommit and PrepareAbort it found) and `unload(p)` when it stops leading it (its ids
are forgotten, their marker retries stop, and requests get NOT_COORDINATOR), as Kafka's
TransactionStateManager does.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from onceflow.clock import Clock
from onceflow.config.transactions import TransactionKeys
from onceflow.coordinator.partitions import PartitionOwnership
from onceflow.coordinator.transaction.adds import AddBatch, AddBatches, settled
from onceflow.coordinator.transaction.log import (
    CorruptTxnRecord,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from onceflow.coordinator.transaction.marker import TxnMarker
from onceflow.coordinator.transaction.metadata import (
    MAX_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_TIMEOUT_MS,
    TopicPartition,
    TransactionMetadata,
    TxnTransit,
)
from onceflow.coordinator.transaction.prepared_group import ANSWER as MEMBER_ANSWER
from onceflow.coordinator.transaction.prepared_group import Standing, refusal, standing
from onceflow.coordinator.transaction.producer_ids import ProducerIdManager
from onceflow.coordinator.transaction.state import COMPLETED_STATES, TxnState
from onceflow.coordinator.write_failures import WriteFailureLog, storage_error_code
from onceflow.errors import ErrorCode, KafkaError
from onceflow.failpoints import failpoint
from onceflow.protocol.coordinator_key import coordinator_partition
from onceflow.records.builder import build_batch
from onceflow.retry import Backoff, retry_async

log = logging.getLogger(__name__)

# How long to wait before retrying markers or a log append that failed: doubled after each
# failure up to the maximum, so a full disk is not hammered (nor the log flooded) for hours.
RETRY_BACKOFF_S = 0.2
MAX_RETRY_BACKOFF_S = 5.0
# How long AddPartitionsToTxn waits for the previous transaction's markers before answering
# CONCURRENT_TRANSACTIONS (Kafka answers at once). The markers take a few ms; the client's
# fixed backoff after that error is 20 ms in librdkafka, a fifth of a 100 ms transaction.
END_WAIT_S = 0.5


class TxnLog(Protocol):
    """Where the coordinator persists: the partitions of `__transaction_state`."""

    def append(self, partition: int, batch: bytes) -> Awaitable[object]:
        """Append `batch` now, raising if it cannot be written, and return what completes
        once it is durable (replicated, on a cluster). A coroutine (an `async def`) counts
        as appended only once it is done."""
        ...

    def read(
        self, partition: int
    ) -> (
        Iterable[tuple[bytes | None, bytes | None]]
        | AsyncIterable[tuple[bytes | None, bytes | None]]
    ):
        """Every (key, value) of the partition, oldest first; an async iterable lets a
        load wait for the log (its ids answer COORDINATOR_LOAD_IN_PROGRESS meanwhile)."""
        ...


class MarkerWriter(Protocol):
    """Writes a transaction's markers to its partitions; returns once they are durable."""

    async def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: frozenset[TopicPartition],
    ) -> None: ...

    async def write_marker_group(
        self, markers: Sequence[TxnMarker], coordinator_epoch: int
    ) -> None:
        """Markers of transactions decided together, appended in one step per broker."""
        ...


@dataclass(frozen=True, slots=True)
class TxnCoordinatorConfig:
    """The coordinator's settings, defaulting to the broker keys' (onceflow.config)."""

    num_partitions: int = TransactionKeys.transaction_state_log_num_partitions
    max_timeout_ms: int = TransactionKeys.transaction_max_timeout_ms
    id_expiration_ms: int = TransactionKeys.transactional_id_expiration_ms
    two_phase_commit: bool = TransactionKeys.transaction_two_phase_commit_enable


@dataclass(frozen=True, slots=True)
class InitResult:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    # KIP-939: the open transaction an InitProducerId with keepPreparedTxn kept.
    ongoing_producer_id: int = NO_PRODUCER_ID
    ongoing_producer_epoch: int = NO_PRODUCER_EPOCH


def txn_partition_for(transactional_id: str, num_partitions: int) -> int:
    """Kafka's mapping: abs(String.hashCode) (with MIN_VALUE as 0) modulo the count."""
    return coordinator_partition(transactional_id, num_partitions)


class TransactionCoordinator:
    def __init__(
        self,
        txn_log: TxnLog,
        markers: MarkerWriter,
        producer_ids: ProducerIdManager,
        clock: Clock,
        config: TxnCoordinatorConfig,
        coordinator_epoch: int,
        *,
        serve_all: bool = True,
    ) -> None:
        """`coordinator_epoch` is the epoch of the single-broker path: `load()` serves every
        partition at it (the attribute may be set again before `load()`). With
        `serve_all=False` (a broker of a cluster) no id is served until `load_partition`."""
        self._log = txn_log
        self._markers = markers
        self._producer_ids = producer_ids
        self._clock = clock
        self.config = config
        self.coordinator_epoch = coordinator_epoch
        # Only ids of served partitions are here: installed when a partition's load
        # finishes, removed when it is unloaded.
        self.txns: dict[str, TransactionMetadata] = {}
        # With serve_all every partition is served from the start, at `coordinator_epoch`.
        self._partitions = PartitionOwnership(
            config.num_partitions, serve_all=serve_all, initially_loading=False
        )
        self._tasks: set[asyncio.Task[Any]] = set()
        # Transactions between PrepareCommit/Abort and Complete: done once their markers
        # and Complete record are written.
        self._ending: dict[str, asyncio.Future[None]] = {}
        self._finishing: dict[str, asyncio.Task[None]] = {}
        # Adds of one producer arriving together are logged as one (adds.py).
        self._adds = AddBatches()
        # Log appends not finished yet, per partition: a load reads only after them.
        self._appending: dict[int, set[asyncio.Future[None]]] = {}
        self._closed = False
        self._log_failures = WriteFailureLog(log, "writes to __transaction_state")
        self._marker_failures = WriteFailureLog(log, "transaction markers")
        # Counted for the metrics: ends decided here, aborts by reason, markers written.
        self.commits = 0
        self.aborts = {"client": 0, "timeout": 0, "fencing": 0}
        self.markers_written = {"commit": 0, "abort": 0}

    def partition_for(self, transactional_id: str) -> int:
        return txn_partition_for(transactional_id, self.config.num_partitions)

    def owns(self, transactional_id: str) -> bool:
        """Whether this coordinator serves the id: its log partition is loaded here."""
        return self._partitions.owns(self.partition_for(transactional_id))

    def loading(self, transactional_id: str) -> bool:
        """Whether the id's log partition is being loaded (COORDINATOR_LOAD_IN_PROGRESS)."""
        return self._partitions.loading(self.partition_for(transactional_id))

    def coordinator_error(self, transactional_id: str) -> ErrorCode:
        """NONE when the id is served here, else COORDINATOR_LOAD_IN_PROGRESS (its partition
        is loading) or NOT_COORDINATOR."""
        return self._partitions.error(self.partition_for(transactional_id)) or ErrorCode.none

    @property
    def loaded_partitions(self) -> frozenset[int]:
        """The __transaction_state partitions served here."""
        return self._partitions.owned

    @property
    def loading_partitions(self) -> frozenset[int]:
        return self._partitions.loading_partitions

    def coordinator_epoch_for(self, partition: int) -> int | None:
        """The coordinator epoch a served partition's markers carry; None if not served."""
        if not self._partitions.owns(partition):
            return None
        epoch = self._partitions.epoch(partition)
        return self.coordinator_epoch if epoch is None else epoch

    def serve_loaded_only(self) -> None:
        """Serve only what `load_partition` loads: leave the initial state of a coordinator
        made with `serve_all` (every id served), for a broker that turns out to be one of
        a cluster. Partitions loaded already stay served."""
        self._partitions.serve_loaded_only()

    def unload(self, partition: int, coordinator_epoch: int | None = None) -> None:
        """Stop coordinating the ids of a log partition (its broker no longer leads it, or
        its log went offline) and forget them: their marker retries stop (a write already
        under way runs to its end), an EndTxn or other request waiting for its log append
        answers NOT_COORDINATOR, and so do later requests; a load of it in progress stops.
        Whoever loads the partition next finishes what was decided, from the log.

        Ignored when `coordinator_epoch` is older than the newest seen for the partition.
        """
        if not self._partitions.drop(partition, coordinator_epoch):
            return
        forgotten = self._forget(partition)
        log.info(
            "transaction coordinator: no longer coordinating __transaction_state-%d "
            "(%d transactional ids forgotten)",
            partition,
            forgotten,
        )

    def _forget(self, partition: int) -> int:
        """Drop the partition's ids and stop finishing their transactions."""
        gone = [t for t in self.txns if self.partition_for(t) == partition]
        for txn_id in gone:
            del self.txns[txn_id]
            task = self._finishing.pop(txn_id, None)
            if task is not None:
                task.cancel()  # its done callback releases the requests waiting for it
        return len(gone)

    def _is_current(self, meta: TransactionMetadata) -> bool:
        """Whether `meta` is the served state of its id: false once its partition was
        unloaded (or loaded again) while a request or a finishing task held it."""
        txn_id = meta.transactional_id
        return self.txns.get(txn_id) is meta and self.owns(txn_id)

    def _status(self, transactional_id: str) -> ErrorCode | None:
        return self._partitions.error(self.partition_for(transactional_id))

    # ---- loading ---------------------------------------------------------------------

    async def load(self) -> None:
        """A single broker: serve every partition at `coordinator_epoch`, each rebuilt from
        the log, and finish every transaction found decided (PrepareCommit/PrepareAbort)."""
        for partition in range(self.config.num_partitions):
            await self._load(partition, None, force=True)

    async def load_partition(self, partition: int, coordinator_epoch: int) -> None:
        """Start serving one log partition (its broker became the leader) at this
        coordinator epoch (the partition's leader epoch): rebuild its ids from the log,
        replacing anything of it still in memory, then finish every PrepareCommit and
        PrepareAbort found, with markers carrying `coordinator_epoch`.

        Its ids answer COORDINATOR_LOAD_IN_PROGRESS until the load is done. Nothing is done
        for a partition already served or loading at this epoch, nor for an epoch older
        than the newest seen for it (a stale call); a newer epoch starts over. The first
        call leaves the single-broker initial state (`serve_loaded_only`). If the read
        fails the partition is left unserved (NOT_COORDINATOR) and the error raised.
        """
        if self._closed:
            return
        self.serve_loaded_only()
        await self._load(partition, coordinator_epoch, force=False)

    async def _load(self, partition: int, epoch: int | None, *, force: bool) -> None:
        token = self._partitions.begin(partition, epoch, force=force)
        if token is None:
            return
        self._forget(partition)
        loaded: dict[str, TransactionMetadata] = {}
        try:
            pending = self._appending.get(partition)
            if pending:
                await asyncio.wait(list(pending))
            source = self._log.read(partition)
            if isinstance(source, AsyncIterable):
                async for key, value in source:
                    _replay(loaded, key, value)
            else:
                for key, value in source:
                    _replay(loaded, key, value)
        except BaseException:
            self._partitions.abandon(partition, token)
            raise
        # Served before the markers go out, so that their Complete records can be logged.
        if not self._partitions.finish(partition, token):
            return  # unloaded, or loaded again, meanwhile
        self.txns.update(loaded)
        # Two-phase transactions found decided may have been decided together (a
        # CompleteTransactions): their markers are written together again.
        together: dict[bool, list[TransactionMetadata]] = {True: [], False: []}
        for meta in loaded.values():
            if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                log.info(
                    "finishing %s of %s after loading __transaction_state-%d",
                    meta.state.display,
                    meta.transactional_id,
                    partition,
                )
                commit = meta.state == TxnState.PREPARE_COMMIT
                if meta.two_phase:
                    together[commit].append(meta)
                else:
                    self._start_finish(meta, commit)
        for commit, metas in together.items():
            if metas:
                self._start_finish_all(metas, commit)
        if not force:
            log.info(
                "transaction coordinator: loaded %d transactional ids of "
                "__transaction_state-%d at coordinator epoch %s",
                len(loaded),
                partition,
                epoch,
            )

    # ---- the APIs --------------------------------------------------------------------

    async def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        expected_producer_id: int = NO_PRODUCER_ID,
        expected_epoch: int = NO_PRODUCER_EPOCH,
        *,
        two_phase: bool = False,
        keep_prepared: bool = False,
    ) -> InitResult:
        """`two_phase` (KIP-939's enable2Pc): the id's transactions from now on have no
        timeout, the requested one ignored, as the KIP says. `keep_prepared`: an open
        transaction is kept for this new instance to complete instead of aborted; the
        answer names it (its producer id and epoch) beside the instance's bumped epoch."""
        if not transactional_id:
            return InitResult(ErrorCode.invalid_request)
        if two_phase and not self.config.two_phase_commit:
            # The KIP's answer, not UNSUPPORTED_VERSION: the switch is the operator's grant.
            return InitResult(ErrorCode.transactional_id_authorization_failed)
        if two_phase:
            timeout_ms = NO_TIMEOUT_MS
        elif timeout_ms <= 0 or timeout_ms > self.config.max_timeout_ms:
            return InitResult(ErrorCode.invalid_transaction_timeout)
        status = self._status(transactional_id)
        if status is not None:
            return InitResult(status)
        now = self._clock.now_ms()
        meta = self.txns.get(transactional_id)
        if meta is None:
            producer_id = self._next_producer_id()
            if producer_id is None:
                return InitResult(ErrorCode.coordinator_not_available)
            meta = TransactionMetadata(
                TxnTransit(
                    transactional_id,
                    producer_id,
                    NO_PRODUCER_ID,
                    NO_PRODUCER_EPOCH,
                    NO_PRODUCER_EPOCH,
                    timeout_ms,
                    TxnState.EMPTY,
                    frozenset(),
                    -1,
                    now,
                )
            )
            self.txns[transactional_id] = meta
        if meta.pending is not None:
            return InitResult(ErrorCode.concurrent_transactions)
        expected = expected_producer_id != NO_PRODUCER_ID
        if expected and not _valid_producer_id(meta, expected_producer_id, expected_epoch):
            return InitResult(ErrorCode.producer_fenced)
        if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return InitResult(ErrorCode.concurrent_transactions)
        if meta.state == TxnState.ONGOING:
            if expected and expected_epoch != meta.producer_epoch:
                # Kafka fences the ongoing transaction for any KIP-360 bump naming this
                # producer id, so a fenced zombie's bump at its stale epoch aborted the
                # live instance's transaction (kafka-python then re-inits without an id
                # and fences it for good). Only the current epoch, or a new instance, may.
                return InitResult(ErrorCode.producer_fenced)
            if keep_prepared:
                return await self._keep(meta, timeout_ms, two_phase, now)
            # A new instance fences the old one: abort its transaction at a bumped epoch,
            # and have the new one retry once the abort is complete.
            error = await self._fence_and_abort(meta, "fencing")
            return InitResult(
                error if error is not ErrorCode.none else ErrorCode.concurrent_transactions
            )
        if meta.epoch_exhausted and (not expected or expected_epoch == meta.producer_epoch):
            new_id = self._next_producer_id()
            if new_id is None:
                return InitResult(ErrorCode.coordinator_not_available)
            changes: dict[str, object] = {
                "producer_id": new_id,
                "last_producer_id": meta.producer_id,
                "producer_epoch": 0,
                "last_producer_epoch": meta.producer_epoch if expected else NO_PRODUCER_EPOCH,
            }
        else:
            bumped = _bump_epoch(meta, expected, expected_epoch)
            if bumped is None:
                return InitResult(ErrorCode.producer_fenced)
            changes = {"producer_epoch": bumped[0], "last_producer_epoch": bumped[1]}
        error = await self._transition(
            meta,
            TxnState.EMPTY,
            timeout_ms=timeout_ms,
            partitions=frozenset(),
            start_ms=-1,
            update_ms=now,
            two_phase=two_phase,
            kept_epoch=NO_PRODUCER_EPOCH,
            **changes,
        )
        if error is not ErrorCode.none:
            return InitResult(error)
        return InitResult(ErrorCode.none, meta.producer_id, meta.producer_epoch)

    async def _keep(
        self, meta: TransactionMetadata, timeout_ms: int, two_phase: bool, now: int
    ) -> InitResult:
        """KIP-939's keepPreparedTxn on an Ongoing transaction: the new instance gets the
        epoch after the current one, which fences every earlier instance (their writes and
        ends), while the transaction stays open with its partitions and learns nothing new;
        its markers will carry the new instance's epoch. The epoch its records carry is
        logged once (`kept_epoch`), so a later keep reports the same one."""
        if meta.epoch_exhausted:
            # The KIP moves the instance to a new producer id here; Onceflow does not.
            return InitResult(ErrorCode.invalid_txn_state)
        ongoing_epoch = meta.kept_epoch if meta.kept else meta.producer_epoch
        error = await self._transition(
            meta,
            TxnState.ONGOING,
            producer_epoch=meta.producer_epoch + 1,
            last_producer_epoch=NO_PRODUCER_EPOCH,
            timeout_ms=timeout_ms,
            update_ms=now,
            two_phase=two_phase,
            kept_epoch=ongoing_epoch,
        )
        if error is not ErrorCode.none:
            return InitResult(error)
        return InitResult(
            ErrorCode.none, meta.producer_id, meta.producer_epoch, meta.producer_id, ongoing_epoch
        )

    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        client_version: int = 0,
    ) -> asyncio.Future[ErrorCode]:
        """Add partitions to the producer's transaction, starting one if none is ongoing.
        `client_version` 2: the write itself adds its partition (a Produce v12 or
        TxnOffsetCommit v5 through its broker), and the transaction it starts ends with an
        epoch bump.

        Registered at once, before the caller's next request, and answered by the future:
        adds of the same producer that arrive while one waits for the previous
        transaction's end are logged with it, as one record (adds.py)."""
        producer = (producer_id, producer_epoch, client_version)
        wanted = set(partitions)
        batch = self._adds.join(transactional_id, producer, wanted)
        if batch is None:
            batch = self._adds.start(transactional_id, producer, wanted)
            task = asyncio.ensure_future(self._add_batch(transactional_id, batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            task.add_done_callback(functools.partial(self._add_ended, transactional_id, batch))
        return asyncio.shield(batch.answer)  # a caller that goes away leaves the others

    def _add_ended(self, transactional_id: str, batch: AddBatch, _: object) -> None:
        """A batch's task is done: one cancelled before it ran (a close) still answers."""
        self._adds.end(transactional_id, batch, None, asyncio.CancelledError())

    async def _add_batch(self, transactional_id: str, batch: AddBatch) -> None:
        producer_id, producer_epoch, client_version = batch.producer
        try:
            await settled(batch.before)
            if batch.started is None:
                await self._wait_for_end(transactional_id)
            if batch.started is None:  # else started by the previous transaction's end
                batch.gathering = False
                batch.started = self._add_start(
                    transactional_id, producer_id, producer_epoch, batch.partitions, client_version
                )
            started = batch.started
            answer = started if isinstance(started, ErrorCode) else await started
        except BaseException as exc:
            self._adds.end(transactional_id, batch, None, exc)
            raise
        self._adds.end(transactional_id, batch, answer)

    def _start_released_adds(self, transactional_id: str) -> None:
        """The previous transaction's Complete record is in the leader's log: the add batch
        waiting for it is logged now, right behind it, in the same step (no loop pass in
        between), so the followers' next fetch takes both records and the add is one
        replication round away, not two (issue 26)."""
        batch = self._adds.next_to_start(transactional_id)
        if batch is None:
            return
        batch.gathering = False
        producer_id, producer_epoch, client_version = batch.producer
        batch.started = self._add_start(
            transactional_id, producer_id, producer_epoch, batch.partitions, client_version
        )

    def _add_start(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        wanted: set[TopicPartition],
        client_version: int,
    ) -> ErrorCode | asyncio.Future[ErrorCode]:
        """An add's answer, or the future of it once its record (appended now) is durable."""
        meta, error = self._check_producer(transactional_id, producer_id, producer_epoch)
        if meta is None:
            return error
        if meta.pending is not None or meta.state in (
            TxnState.PREPARE_COMMIT,
            TxnState.PREPARE_ABORT,
        ):
            return ErrorCode.concurrent_transactions
        if meta.kept:  # KIP-939: a kept transaction may only be completed
            return ErrorCode.invalid_txn_state
        if meta.state == TxnState.ONGOING and wanted <= meta.partitions:
            return ErrorCode.none
        now = self._clock.now_ms()
        starting = meta.state in COMPLETED_STATES
        changes: dict[str, object] = {
            "partitions": frozenset(wanted if starting else meta.partitions | wanted),
            "start_ms": now if starting else meta.start_ms,
            "update_ms": now,
            "client_version": client_version if starting else meta.client_version,
        }
        return self._transition_all([(meta, TxnState.ONGOING, changes)], None)

    async def end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> ErrorCode:
        await self._adds.quiet(transactional_id)  # after the adds that came before it
        meta, error = self._check_producer(transactional_id, producer_id, producer_epoch)
        if meta is None:
            return error
        if meta.pending is not None:
            return ErrorCode.concurrent_transactions
        state = meta.state
        if state == TxnState.ONGOING:
            target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
            return await self._transition_then(
                meta,
                target,
                lambda: self._start_finish(meta, commit, "client"),
                {"update_ms": self._clock.now_ms()},
            )
        retry_of_same = {
            TxnState.COMPLETE_COMMIT: (commit, ErrorCode.none),
            TxnState.COMPLETE_ABORT: (not commit, ErrorCode.none),
            TxnState.PREPARE_COMMIT: (commit, ErrorCode.concurrent_transactions),
            TxnState.PREPARE_ABORT: (not commit, ErrorCode.concurrent_transactions),
        }.get(state)
        if retry_of_same is not None and retry_of_same[0]:
            return retry_of_same[1]
        return ErrorCode.invalid_txn_state

    async def end_txn_bumping(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> InitResult:
        """EndTxn v5 (transaction version 2, KIP-890 part 2): end the transaction with the
        producer epoch bumped, so no write of it at the old epoch can join the next one.
        The markers carry the bumped epoch; the answer is the producer id and epoch for the
        next transaction. An exhausted epoch rolls to a new producer id, taken in the
        Prepare record and in effect from the Complete record, as Kafka does. A retry at
        the epoch before the bump is answered as the first call was; a transaction that
        added nothing may be aborted (an empty abort, still bumping)."""
        if not transactional_id:
            return InitResult(ErrorCode.invalid_request)
        await self._adds.quiet(transactional_id)  # after the adds that came before it
        await self._wait_for_end(transactional_id)  # a retry, or the next end, right after
        status = self._status(transactional_id)
        if status is not None:
            return InitResult(status)
        meta = self.txns.get(transactional_id)
        if meta is None:
            return InitResult(ErrorCode.invalid_producer_id_mapping)
        if meta.pending is not None:
            return InitResult(ErrorCode.concurrent_transactions)
        rolled_over = (
            producer_id == meta.last_producer_id
            and producer_id != meta.producer_id
            and producer_epoch == MAX_EPOCH - 1
            and meta.producer_epoch == 0
        )
        if producer_id != meta.producer_id and not rolled_over:
            if _rolls_to(meta, producer_id, producer_epoch):
                return InitResult(ErrorCode.concurrent_transactions)
            return InitResult(ErrorCode.invalid_producer_id_mapping)
        # A retry of an end this API bumped: a fence or a timeout also bumps by one, but
        # leaves no last epoch, so the fenced instance is never taken for a retry.
        retry = rolled_over or (
            producer_id == meta.producer_id
            and producer_epoch + 1 == meta.producer_epoch
            and meta.last_producer_epoch == producer_epoch
            and meta.client_version == 2
        )
        if not _valid_v2_end_epoch(meta.state, producer_epoch == meta.producer_epoch, retry):
            return InitResult(ErrorCode.producer_fenced)
        now_state = _V2_END.get((meta.state, commit, retry))
        if now_state is None:
            return InitResult(ErrorCode.invalid_txn_state)
        if now_state == "done":
            return InitResult(ErrorCode.none, meta.producer_id, meta.producer_epoch)
        if now_state == "ending":
            return InitResult(ErrorCode.concurrent_transactions)
        if meta.producer_epoch >= MAX_EPOCH:  # fenced at the last epoch: InitProducerId rolls
            return InitResult(ErrorCode.producer_fenced)
        next_producer_id = NO_PRODUCER_ID
        if meta.producer_epoch >= MAX_EPOCH - 1:
            taken = self._next_producer_id()
            if taken is None:
                return InitResult(ErrorCode.coordinator_not_available)
            next_producer_id = taken
        now = self._clock.now_ms()
        changes: dict[str, object] = {
            "producer_epoch": meta.producer_epoch + 1,
            "last_producer_epoch": meta.producer_epoch,
            "client_version": 2,
            "next_producer_id": next_producer_id,
            "update_ms": now,
        }
        if now_state == "empty abort":
            changes.update(partitions=frozenset(), start_ms=now)
        error = await self._transition_then(
            meta,
            TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT,
            lambda: self._start_finish(meta, commit, "client"),
            changes,
        )
        if error is not ErrorCode.none:
            return InitResult(error)
        if next_producer_id != NO_PRODUCER_ID:
            return InitResult(ErrorCode.none, next_producer_id, 0)
        return InitResult(ErrorCode.none, producer_id, producer_epoch + 1)

    async def complete_prepared(
        self, members: Sequence[tuple[str, int, int]], commit: bool
    ) -> tuple[ErrorCode, dict[str, ErrorCode]]:
        """CompleteTransactions (Onceflow's own API): end the prepared two-phase
        transactions `members` (transactional id, producer id, the epoch their records
        carry) as one decision: one append of all their Prepare records, then their markers
        in one step per broker (prepared_group.py has the rules). Each end bumps the
        epoch, fencing whoever prepared it, and logs the prepared epoch as the last one, by
        which a retry is known. The ids must share a partition of the log."""
        ids = [txn_id for txn_id, _, _ in members]
        if not ids or not all(ids) or len(set(ids)) != len(ids):
            return ErrorCode.invalid_request, {}
        partition = self.partition_for(ids[0])
        if any(self.partition_for(txn_id) != partition for txn_id in ids):
            return ErrorCode.invalid_request, {}
        status = self._status(ids[0])
        if status is not None:
            return status, {}
        for txn_id in ids:
            await self._wait_for_end(txn_id)  # a retry right after the first call
        standings = {
            txn_id: standing(self.txns.get(txn_id), pid, epoch, commit)
            for txn_id, pid, epoch in members
        }
        refused = refusal(standings, commit)
        if refused is not None:
            return ErrorCode.none, refused
        now = self._clock.now_ms()
        moves = []
        for txn_id, _, epoch in members:
            if standings[txn_id] is Standing.OPEN:
                meta = self.txns[txn_id]
                bumped = meta.producer_epoch + (1 if meta.producer_epoch < MAX_EPOCH else 0)
                changes: dict[str, object] = {
                    "producer_epoch": bumped,
                    "last_producer_epoch": epoch,
                    "kept_epoch": NO_PRODUCER_EPOCH,
                    "update_ms": now,
                }
                target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
                moves.append((meta, target, changes))
        if moves:
            metas = [meta for meta, _, _ in moves]
            error = await self._transition_all(
                moves, lambda: self._start_finish_all(metas, commit, "client")
            )
            if error is not ErrorCode.none:
                return error, {}
        return ErrorCode.none, {txn_id: MEMBER_ANSWER[s] for txn_id, s in standings.items()}

    def verify(
        self,
        transactional_id: str | None,
        producer_id: int,
        producer_epoch: int,
        tp: TopicPartition,
    ) -> None:
        """KIP-890 server-side defense: a transactional write is accepted only for a
        partition of that producer's ongoing transaction at that epoch. A produce that
        arrives after its transaction ended can therefore never open a new one.

        Raises with Kafka's verify-only codes (the broker maps them for the client's
        version, protocol/txn_support.py): NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS
        when the id is not served here; INVALID_PRODUCER_ID_MAPPING for another producer;
        PRODUCER_FENCED for another epoch; CONCURRENT_TRANSACTIONS while the transaction
        ends (Onceflow also counts an end whose log append is still in flight, which
        Kafka leaves to its verification guard); TRANSACTION_ABORTABLE for a partition
        outside the ongoing transaction, and for any write to a transaction kept by
        keepPreparedTxn (KIP-939: its new instance may only complete it)."""
        status = self._status(transactional_id) if transactional_id else None
        if status is not None:
            raise KafkaError(
                status,
                f"transactional id {transactional_id!r} is not coordinated here "
                f"({status.name.lower()})",
            )
        meta = self.txns.get(transactional_id) if transactional_id else None
        if meta is None or meta.producer_id != producer_id:
            raise KafkaError(
                ErrorCode.invalid_producer_id_mapping,
                f"producer {producer_id} has no transaction for transactional id "
                f"{transactional_id!r}",
            )
        if producer_epoch != meta.producer_epoch:
            raise KafkaError(
                ErrorCode.producer_fenced,
                f"epoch {producer_epoch} is not the current {meta.producer_epoch}",
            )
        if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT) or meta.pending in (
            TxnState.PREPARE_COMMIT,
            TxnState.PREPARE_ABORT,
        ):
            raise KafkaError(
                ErrorCode.concurrent_transactions,
                f"the transaction of {transactional_id!r} is ending",
            )
        if meta.state != TxnState.ONGOING or tp not in meta.partitions or meta.kept:
            raise KafkaError(
                ErrorCode.transaction_abortable,
                f"{tp[0]}-{tp[1]} is not part of an ongoing transaction of "
                f"{transactional_id!r} at epoch {producer_epoch}",
            )

    # ---- timeouts and expiry ---------------------------------------------------------

    async def poll(self) -> None:
        """Abort transactions open longer than their timeout, except two-phase commit ones
        (KIP-939: only their external coordinator decides); expire idle ids (never one
        with a transaction open)."""
        if self._closed:
            return
        now = self._clock.now_ms()
        for meta in list(self.txns.values()):
            # Checked for each in turn: an unload may come while an earlier one is written.
            if meta.pending is not None or not self._is_current(meta):
                continue
            if (
                meta.state == TxnState.ONGOING
                and not meta.two_phase
                and now - meta.start_ms > meta.timeout_ms
            ):
                log.info(
                    "aborting transaction of %s: open for more than %d ms",
                    meta.transactional_id,
                    meta.timeout_ms,
                )
                await self._fence_and_abort(meta, "timeout")
            elif (
                meta.state in COMPLETED_STATES
                and now - meta.update_ms >= self.config.id_expiration_ms
            ):
                await self._expire(meta)

    async def _expire(self, meta: TransactionMetadata) -> None:
        transit = meta.prepare(TxnState.DEAD, update_ms=self._clock.now_ms())
        try:
            await self._append(transit, tombstone=True)
        except Exception as exc:
            meta.abandon()
            self._log_failures.failed(f"expiring {meta.transactional_id}", exc)
            return
        if not self._is_current(meta):  # unloaded meanwhile: the next load reads the tombstone
            meta.abandon()
            return
        meta.complete(transit)
        self.txns.pop(meta.transactional_id, None)
        log.info("expired transactional id %s", meta.transactional_id)

    # ---- internals -------------------------------------------------------------------

    def _check_producer(
        self, transactional_id: str, producer_id: int, producer_epoch: int
    ) -> tuple[TransactionMetadata | None, ErrorCode]:
        if not transactional_id:
            return None, ErrorCode.invalid_request
        status = self._status(transactional_id)
        if status is not None:
            return None, status
        meta = self.txns.get(transactional_id)
        if meta is None:
            return None, ErrorCode.invalid_producer_id_mapping
        if meta.producer_id != producer_id:
            if _rolls_to(meta, producer_id, producer_epoch):
                return None, ErrorCode.concurrent_transactions
            return None, ErrorCode.invalid_producer_id_mapping
        if producer_epoch != meta.producer_epoch:
            return None, ErrorCode.producer_fenced
        return meta, ErrorCode.none

    def _next_producer_id(self) -> int | None:
        """A new producer id, or None when no block could be had: the durable counter could
        not be written (alone) or ZooKeeper gave no block (on a cluster, a KafkaError)."""
        try:
            return self._producer_ids.next_id()
        except (OSError, KafkaError) as exc:
            self._log_failures.failed("producer id block", exc)
            return None

    async def _fence_and_abort(self, meta: TransactionMetadata, reason: str) -> ErrorCode:
        """Bump the epoch (PrepareEpochFence, never logged) and abort at the new epoch;
        `reason` (timeout or fencing) is counted for the metrics."""
        if meta.producer_epoch >= MAX_EPOCH:
            return ErrorCode.producer_fenced
        meta.prepare(TxnState.PREPARE_EPOCH_FENCE)  # checks Ongoing -> PrepareEpochFence
        meta.abandon()
        return await self._transition_then(
            meta,
            TxnState.PREPARE_ABORT,
            lambda: self._start_finish(meta, False, reason),
            {
                "producer_epoch": meta.producer_epoch + 1,
                "last_producer_epoch": NO_PRODUCER_EPOCH,
                "update_ms": self._clock.now_ms(),
            },
        )

    async def _wait_for_end(self, transactional_id: str) -> None:
        """Give the previous transaction's end up to END_WAIT_S to complete, so the next
        one can start without a CONCURRENT_TRANSACTIONS round trip and backoff."""
        ending = self._ending.get(transactional_id)
        if ending is not None and not ending.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(ending), END_WAIT_S)

    def _start_finish(
        self, meta: TransactionMetadata, commit: bool, reason: str | None = None
    ) -> None:
        self._start_finish_all([meta], commit, reason)

    def _start_finish_all(
        self, metas: list[TransactionMetadata], commit: bool, reason: str | None = None
    ) -> None:
        """Finish transactions of one decision (one, or the members of a
        CompleteTransactions) in one task: their markers are written together.

        Registered at once (not when the task first runs), so a request that arrives
        before the task starts still finds them ending. A decision taken now (`reason`:
        client, timeout or fencing; None for one found in the log at a load) is counted
        for the metrics.

        The markers carry the coordinator epoch of the ids' partition as it is now; an
        unload (or a reload at a newer epoch) cancels the task."""
        failpoint("txn.after_prepare")
        if reason is not None:
            if commit:
                self.commits += len(metas)
            else:
                self.aborts[reason] += len(metas)
        epoch = self.coordinator_epoch_for(self.partition_for(metas[0].transactional_id))
        if epoch is None:
            epoch = self.coordinator_epoch
        ending: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        task = asyncio.ensure_future(self._finish(metas, commit, epoch, ending))
        self._tasks.add(task)
        for meta in metas:
            self._ending[meta.transactional_id] = ending
            self._finishing[meta.transactional_id] = task

        def finished(done: asyncio.Task[None]) -> None:
            # A callback, not a finally: it also runs for a task cancelled before it started.
            self._tasks.discard(done)
            for meta in metas:
                txn_id = meta.transactional_id
                if self._finishing.get(txn_id) is done:
                    del self._finishing[txn_id]
                if self._ending.get(txn_id) is ending:
                    del self._ending[txn_id]
            if not ending.done():
                ending.set_result(None)
            if not done.cancelled() and done.exception() is not None:
                names = ", ".join(m.transactional_id for m in metas)
                log.error(
                    "finishing the transaction of %s failed", names, exc_info=done.exception()
                )

        task.add_done_callback(finished)

    async def _finish(
        self,
        metas: list[TransactionMetadata],
        commit: bool,
        epoch: int,
        ending: asyncio.Future[None],
    ) -> None:
        """Write every marker, then log the Complete states; retry until both succeed, or
        until the ids are no longer served here (whoever loads their partition next
        finishes the transactions from the log).

        The next transaction of these ids waits for `ending`, which is released once the
        markers are durable and the Complete records are in the leader's log, before those
        are replicated: whatever the next transaction logs lands after them, and is
        answered only once it is replicated, so with them. That takes one replication
        round of `__transaction_state` off the next transaction's path.

        A marker write under way when the task is cancelled (an unload) is shielded and
        runs to its end: the broker then has nothing half done to clean up."""

        def served() -> bool:
            return not self._closed and all(self._is_current(meta) for meta in metas)

        def marker_write() -> Awaitable[None]:
            if len(metas) == 1:
                meta = metas[0]
                return self._markers.write_markers(
                    meta.producer_id, meta.producer_epoch, epoch, commit, frozenset(meta.partitions)
                )
            markers = [
                TxnMarker(m.producer_id, m.producer_epoch, commit, frozenset(m.partitions))
                for m in metas
            ]
            return self._markers.write_marker_group(markers, epoch)

        async def write_markers() -> bool:
            write = asyncio.ensure_future(marker_write())
            self._tasks.add(write)  # cancelled at close, like every task of the coordinator
            write.add_done_callback(self._tasks.discard)
            write.add_done_callback(_consume_result)
            try:
                await asyncio.shield(write)
            except Exception as exc:
                self._marker_failures.failed(metas[0].transactional_id, exc)
                return False
            return True

        target = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT

        async def complete() -> ErrorCode:
            now = self._clock.now_ms()
            moves = [
                (
                    meta,
                    target,
                    {
                        "partitions": frozenset(),
                        "update_ms": now,
                        "kept_epoch": NO_PRODUCER_EPOCH,
                        **_rollover(meta),
                    },
                )
                for meta in metas
            ]
            return await self._transition_all(moves, release, early=True)

        def release() -> None:
            if not ending.done():
                ending.set_result(None)
            for meta in metas:
                self._start_released_adds(meta.transactional_id)

        # Read here, not at import: the tests shorten them.
        backoff = Backoff(RETRY_BACKOFF_S, factor=2, max_s=MAX_RETRY_BACKOFF_S)
        if served() and await retry_async(
            write_markers, backoff, retry_if=lambda written: not written, keep_going=served
        ):
            self._marker_failures.succeeded()
            self.markers_written["commit" if commit else "abort"] += sum(
                len(meta.partitions) for meta in metas
            )
        failpoint("txn.before_complete")
        if served():
            await retry_async(
                complete,
                backoff,
                retry_if=lambda error: error is not ErrorCode.none,
                keep_going=served,
            )

    async def _transition(
        self, meta: TransactionMetadata, state: TxnState, **changes: object
    ) -> ErrorCode:
        return await self._transition_then(meta, state, None, changes)

    async def _transition_then(
        self,
        meta: TransactionMetadata,
        state: TxnState,
        then: Callable[[], None] | None,
        changes: dict[str, object],
    ) -> ErrorCode:
        return await self._transition_all([(meta, state, changes)], then)

    def _transition_all(
        self,
        moves: list[tuple[TransactionMetadata, TxnState, dict[str, object]]],
        then: Callable[[], None] | None,
        *,
        early: bool = False,
    ) -> asyncio.Future[ErrorCode]:
        """prepare -> log append -> complete (then `then`) for ids of one log partition,
        all in one append (one record batch: all logged or none), shielded from
        cancellation: the caller going away must never leave a pending state set with
        its record logged. The append is made now, when called, not when a task first
        runs (so a `then` can append behind it in the same step).

        `early` (the Complete states only, which nobody is answered on): complete as soon
        as the record is in the leader's log, before it is durable. The next record of
        these ids can then be appended behind it, and is durable only if this one is; a
        failure of the replication itself is left to the partition's next leader, which
        finds the transaction's Prepare record and finishes it again."""
        metas = [meta for meta, _, _ in moves]
        transits = [meta.prepare(state, **changes) for meta, state, changes in moves]
        completed = False

        def abandon() -> None:
            for meta in metas:
                meta.abandon()

        def apply() -> bool:
            nonlocal completed
            if not all(self._is_current(meta) for meta in metas):
                return False
            if early:
                failpoint("txn.complete_appended")
            for meta, transit in zip(metas, transits, strict=True):
                meta.complete(transit)
            if then is not None:
                then()
            completed = True
            return True

        def failed(exc: Exception) -> ErrorCode:
            if completed:
                names = ", ".join(m.transactional_id for m in metas)
                log.warning("%s: a Complete record was not replicated: %s", names, exc)
                return ErrorCode.none
            abandon()
            code = storage_error_code(exc)
            names = ", ".join(m.transactional_id for m in metas)
            if code is None:
                log.warning("transaction log append for %s failed: %s", names, exc)
                return ErrorCode.coordinator_not_available
            self._log_failures.failed(names, exc)
            return code

        async def write(durable: Awaitable[None]) -> ErrorCode:
            try:
                await durable
            except Exception as exc:
                return failed(exc)
            self._log_failures.succeeded()
            if not completed and not apply():
                # Unloaded during the append (Kafka: the coordinator epoch changed): the
                # records are in the log for the next load, the caller finds a coordinator.
                abandon()
                return ErrorCode.not_coordinator
            return ErrorCode.none

        answer: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        if not all(self._is_current(meta) for meta in metas):  # unloaded meanwhile
            abandon()
            answer.set_result(ErrorCode.not_coordinator)
            return answer
        try:
            durable = self._start_append(transits, appended=apply if early else None)
        except Exception as exc:
            answer.set_result(failed(exc))
            return answer
        task = asyncio.ensure_future(write(durable))
        self._tasks.add(task)  # kept alive (and awaited at close) even if we are cancelled
        task.add_done_callback(self._tasks.discard)
        return asyncio.shield(task)

    async def _append(self, transit: TxnTransit, tombstone: bool = False) -> None:
        await self._append_all([transit], tombstone)

    async def _append_all(self, transits: list[TxnTransit], tombstone: bool = False) -> None:
        await self._start_append(transits, tombstone)

    def _start_append(
        self,
        transits: list[TxnTransit],
        tombstone: bool = False,
        appended: Callable[[], object] | None = None,
    ) -> Awaitable[None]:
        """Append the transits' records as one batch now (raising if that fails), and run
        `appended` once they are in the leader's log; awaiting the result waits until they
        are durable. A log whose append is a coroutine appends only when awaited."""
        records = [
            (encode_key(t.transactional_id), None if tombstone else encode_value(t), ())
            for t in transits
        ]
        batch = build_batch(records, timestamp_ms=self._clock.now_ms())
        partition = self.partition_for(transits[0].transactional_id)
        # In flight until it ends: a load of the partition reads only after it.
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        in_flight = self._appending.setdefault(partition, set())
        in_flight.add(done)

        def end() -> None:
            in_flight.discard(done)
            if not in_flight and self._appending.get(partition) is in_flight:
                del self._appending[partition]
            done.set_result(None)

        try:
            durable: Awaitable[object] = self._log.append(partition, batch)
            lazy = asyncio.iscoroutine(durable)
            if appended is not None and not lazy:
                appended()
        except BaseException:
            end()
            raise

        async def finish() -> None:
            try:
                await durable
                if appended is not None and lazy:
                    appended()
            finally:
                end()

        return finish()

    async def close(self) -> None:
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def _replay(loaded: dict[str, TransactionMetadata], key: bytes | None, value: bytes | None) -> None:
    """Apply one record of a log partition being loaded: the newest record per id wins, a
    tombstone (an expired id) removes it."""
    if key is None:
        return
    try:
        txn_id = decode_key(key)
        if value is None:
            loaded.pop(txn_id, None)
        else:
            loaded[txn_id] = TransactionMetadata(decode_value(txn_id, value))
    except CorruptTxnRecord as exc:
        log.error("skipping a corrupt transaction-log record: %s", exc)


def _consume_result(task: asyncio.Future[None]) -> None:
    """Retrieve a shielded marker write's outcome, which nobody may await any more."""
    if not task.cancelled():
        task.exception()


def _valid_producer_id(meta: TransactionMetadata, producer_id: int, epoch: int) -> bool:
    """Whether a KIP-360 client's current id and epoch may bump this transactional id."""
    return (
        meta.producer_epoch == NO_PRODUCER_EPOCH
        or producer_id == meta.producer_id
        or (producer_id == meta.last_producer_id and epoch >= MAX_EPOCH - 1)
    )


def _bump_epoch(
    meta: TransactionMetadata, expected: bool, expected_epoch: int
) -> tuple[int, int] | None:
    """(new epoch, last epoch) for InitProducerId, or None when the caller is fenced."""
    if not expected:
        return meta.producer_epoch + 1, NO_PRODUCER_EPOCH
    if meta.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == meta.producer_epoch:
        return meta.producer_epoch + 1, meta.producer_epoch
    if expected_epoch == meta.last_producer_epoch:
        return meta.producer_epoch, meta.last_producer_epoch  # a retry of a bump that worked
    return None


def _rollover(meta: TransactionMetadata) -> dict[str, object]:
    """A transaction version 2 end whose epoch was exhausted: the Complete record moves
    the id to the producer id taken in the Prepare record, at epoch 0 (Kafka's
    prepareComplete); the last epoch stays the one the client last used."""
    if meta.next_producer_id == NO_PRODUCER_ID:
        return {}
    return {
        "producer_id": meta.next_producer_id,
        "producer_epoch": 0,
        "last_producer_id": meta.producer_id,
        "last_producer_epoch": meta.producer_epoch - 1,
        "next_producer_id": NO_PRODUCER_ID,
    }


def _rolls_to(meta: TransactionMetadata, producer_id: int, producer_epoch: int) -> bool:
    """Whether (producer_id, producer_epoch) is what an end being written rolls the id to:
    handed out before the Complete record moves the id, so the client's next request waits
    for it (CONCURRENT_TRANSACTIONS) instead of failing as another producer's (KAFKA-18660)."""
    return (
        meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
        and meta.next_producer_id != NO_PRODUCER_ID
        and producer_id == meta.next_producer_id
        and producer_epoch == 0
    )


def _valid_v2_end_epoch(state: TxnState, same_epoch: bool, retry: bool) -> bool:
    """Kafka's epoch check of an EndTxn v5: the current epoch ends a transaction; the epoch
    before the bump is only a retry of an end that was already decided. While an end is
    written, the current epoch is the one it handed out: the next end from that client
    waits for it (KAFKA-18464: it was fenced)."""
    if state in _ENDING_OR_ENDED:
        return retry or same_epoch
    return same_epoch and state in (TxnState.ONGOING, TxnState.EMPTY)


_ENDING_OR_ENDED = (
    TxnState.PREPARE_COMMIT,
    TxnState.PREPARE_ABORT,
    TxnState.COMPLETE_COMMIT,
    TxnState.COMPLETE_ABORT,
)


# What an EndTxn v5 does, by (state, commit, retry of an end already decided): "prepare"
# ends the ongoing transaction, "empty abort" aborts one that added nothing, "done" answers
# a retry of a completed end, "ending" a retry, or the client's next end, while its
# markers are written (CONCURRENT_TRANSACTIONS); anything missing is INVALID_TXN_STATE.
_V2_END: dict[tuple[TxnState, bool, bool], str] = {
    (TxnState.ONGOING, True, False): "prepare",
    (TxnState.ONGOING, False, False): "prepare",
    (TxnState.EMPTY, False, False): "empty abort",
    (TxnState.COMPLETE_COMMIT, True, True): "done",
    (TxnState.COMPLETE_COMMIT, False, False): "empty abort",
    (TxnState.COMPLETE_ABORT, False, True): "done",
    (TxnState.COMPLETE_ABORT, False, False): "empty abort",
    (TxnState.PREPARE_COMMIT, True, True): "ending",
    (TxnState.PREPARE_ABORT, False, True): "ending",
    (TxnState.PREPARE_COMMIT, True, False): "ending",
    (TxnState.PREPARE_COMMIT, False, False): "ending",
    (TxnState.PREPARE_ABORT, True, False): "ending",
    (TxnState.PREPARE_ABORT, False, False): "ending",
}
