"""One unit of work across a database and the log, by KIP-939's recipe:

    begin the database transaction and the Kafka transaction
    the application writes rows and records
    1. prepare Kafka         every record acknowledged, nothing visible (TwoPhaseProducer)
    2. record the prepared state in the state table, in the database transaction
    3. commit the database   <- the decision: from here the unit is committed
    4. commit Kafka          the records become visible to read_committed readers
    5. mark the unit completed in the state table

A crash before 3 leaves an open Kafka transaction the database does not name: recovery
aborts it. A crash after 3 leaves one it names: recovery commits it. Recovery runs when a
writer starts, before a unit that follows a failure, and periodically; it inits the id with
keepPreparedTxn (which fences every older instance in the broker), claims the id in the
state table (which fences them in the database), and ends the open transaction as the
database says. See state.py for why that answer is exact.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal, TypeVar

from onceflow import failpoints
from onceflow.client.errors import ClientError, KafkaApiError, UnsupportedVersion
from onceflow.client.participant import TwoPhaseProducer
from onceflow.client.participant_link import Link, end_txn, init_producer_id
from onceflow.dualwrite.checkback import abandoned
from onceflow.dualwrite.database import Database
from onceflow.dualwrite.errors import (
    DatabaseUnavailable,
    DualWriteError,
    Fenced,
    InDoubt,
    StateMismatch,
    TwoPhaseCommitUnavailable,
)
from onceflow.dualwrite.state import (
    COMPLETED,
    DEFAULT_STATE_TABLE,
    LOST,
    StateTable,
    last_transaction,
)
from onceflow.dualwrite.transaction import Transaction
from onceflow.errors import ErrorCode

__all__ = ["DualWriter", "Outcome", "Transaction", "recover_abandoned"]

log = logging.getLogger(__name__)

T = TypeVar("T")
Outcome = Literal["none", "committed", "aborted"]
_FENCED = {ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch}
_NO_TWO_PHASE = {ErrorCode.transactional_id_authorization_failed, ErrorCode.unsupported_version}
DEFAULT_RECOVERY_INTERVAL_S = 10.0


_armed = False


def _arm_failpoints_once() -> None:
    """Crash-point tests arm fail points in the application's environment; each fires
    once per process, however many writers it opens."""
    global _armed
    if not _armed:
        failpoints.arm_from_environment()
        _armed = True


class DualWriter:
    """Units of work that write rows to a database and records to topics, both or neither.

    ``DualWriter(dsn, bootstrap_servers, transactional_id)`` opens the database
    (``sqlite:///file.db`` or ``postgresql://...``), creates the state table, and recovers
    what an earlier writer of the id left; then ``with writer.transaction() as tx:``
    ``tx.execute(sql, params)`` and ``tx.produce(topic, value, key)``. Leaving the block
    normally commits both; an exception rolls both back. One writer per transactional id
    is live at a time: starting another fences this one (Fenced).
    """

    def __init__(
        self,
        dsn: str,
        bootstrap_servers: str,
        transactional_id: str,
        *,
        state_table: str = DEFAULT_STATE_TABLE,
        recovery_interval_s: float | None = DEFAULT_RECOVERY_INTERVAL_S,
        check_back_after_s: float | None = None,
        **producer_settings: Any,
    ) -> None:
        _arm_failpoints_once()
        self.transactional_id = transactional_id
        self.bootstrap_servers = bootstrap_servers
        # The producer first: a bad setting is refused before the database is opened.
        self.producer = TwoPhaseProducer(bootstrap_servers, transactional_id, **producer_settings)
        self.db = Database(dsn)
        self.state = StateTable(self.db, state_table)
        self._lock = threading.RLock()
        self._owner: tuple[int, int] | None = None
        self._fenced: DualWriteError | None = None
        self._needs_recovery = True
        self.last_recovery: Outcome = "none"  # what the last recovery did
        self._closed = threading.Event()
        self._state_table = state_table
        self._check_back_after_s = check_back_after_s
        self._producer_settings = producer_settings
        try:
            self._db(self.state.create)
            self.recover()
        except BaseException:
            self.close()
            raise
        self._periodic: threading.Thread | None = None
        if recovery_interval_s:
            self._periodic = threading.Thread(
                target=self._recover_periodically,
                args=(recovery_interval_s,),
                name=f"dualwrite-recovery-{transactional_id}",
                daemon=True,
            )
            self._periodic.start()

    # ---- recovery ------------------------------------------------------------------

    def recover(self) -> Outcome:
        """End the id's open Kafka transaction as the database says, and make this writer
        the id's owner; what was done to the open transaction."""
        with self._lock:
            if self._fenced is not None:
                raise self._fenced
            if self.db.connection is None:
                self._db(self.db.connect)
            settings = self.producer.settings
            link = Link(self.bootstrap_servers, settings)
            tid = self.transactional_id
            try:
                last = last_transaction(link, tid)
                kept = self._kafka(lambda: init_producer_id(link, tid, settings, keep=True))
                ongoing = (kept.ongoing_producer_id, kept.ongoing_epoch)
                claim = (kept.producer_id, kept.epoch)
                decision = self._db(lambda: self.state.claim(tid, claim, resolved=False))
                lost = decision.status == LOST
                if not lost and ongoing == (-1, -1) and decision.aborted_behind_our_back(last):
                    self._db(lambda: self.state.mark_lost(tid, claim))
                    lost = True
                if lost:
                    raise StateMismatch(
                        f"{tid}: {self.state.table} says the database committed the unit of "
                        f"producer {decision.producer_id} epoch {decision.producer_epoch}, but "
                        "the broker aborted that transaction: something else ended it (an "
                        "operator's abort, or an InitProducerId without keepPreparedTxn). Its "
                        "rows have no records; reconcile them, then set the id's status from "
                        f"'{LOST}' to '{COMPLETED}' in {self.state.table} to go on"
                    )
                outcome: Outcome = "none"
                if ongoing != (-1, -1):
                    commit = decision.commits(ongoing)
                    timeout_s = settings.delivery_timeout_ms / 1000
                    self._kafka(lambda: end_txn(link, tid, claim, commit, timeout_s))
                    outcome = "committed" if commit else "aborted"
                    log.info("%s: recovered transaction %s: %s", tid, ongoing, outcome)
            finally:
                link.close()
            self._kafka(self.producer.init)
            self._owner = (self.producer.producer_id, self.producer.producer_epoch)
            owner = self._owner
            self._db(lambda: self.state.claim(tid, owner, resolved=True))
            self._needs_recovery = False
            self.last_recovery = outcome
            return outcome

    def _recover_periodically(self, interval_s: float) -> None:
        """Like RocketMQ's check-back: a unit left in doubt (the database or the broker
        was away) is resolved without waiting for the next unit of work."""
        while not self._closed.wait(interval_s):
            if self._check_back_after_s is not None:
                self._check_back(self._check_back_after_s)
            if not self._needs_recovery or self._fenced is not None:
                continue
            if not self._lock.acquire(blocking=False):
                continue  # a unit is running; it recovers first itself
            try:
                self.recover()
            except ClientError as exc:
                log.warning("%s: periodic recovery failed: %s", self.transactional_id, exc)
            finally:
                self._lock.release()

    def _check_back(self, older_than_s: float) -> None:
        """Recover other writers' transactions left open longer than `older_than_s`."""
        try:
            recover_abandoned(
                self.db.dsn,
                self.bootstrap_servers,
                older_than_s=older_than_s,
                state_table=self._state_table,
                skip=frozenset({self.transactional_id}),
                **self._producer_settings,
            )
        except ClientError as exc:
            log.warning("%s: check-back failed: %s", self.transactional_id, exc)

    # ---- units of work ---------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """One unit of work: rows and records committed together when the block ends,
        both rolled back if it raises."""
        with self._lock:
            if self._fenced is not None:
                raise self._fenced
            if self._needs_recovery:
                self.recover()
            self._db(self.db.begin)
            try:
                self._kafka(self.producer.begin)
            except BaseException:
                self.db.rollback()
                raise
            unit = Transaction(self.db.connection, self.producer, self._db, self._kafka)
            try:
                yield unit
            except BaseException:
                self._abort_unit()
                raise
            if unit.records:
                self._commit_unit()
            else:
                self._commit_rows_alone()

    def _abort_unit(self) -> None:
        self.db.rollback()
        try:
            self.producer.abort()
        except ClientError as exc:
            log.warning("%s: abort failed (%s); recovery aborts it", self.transactional_id, exc)
            self._needs_recovery = True

    def _commit_rows_alone(self) -> None:
        """A unit without records is the database's transaction alone: nothing to
        prepare (an empty Kafka transaction is ended without a request)."""
        try:
            self._db(self.db.commit)
        finally:
            self._abort_unit()

    def _commit_unit(self) -> None:
        tid, owner = self.transactional_id, self._owner
        assert owner is not None
        try:
            prepared = self._kafka(self.producer.prepare)
            failpoints.failpoint("dualwrite.after_prepare")
            ids = (prepared.producer_id, prepared.producer_epoch)
            self._db(lambda: self.state.record_prepared(tid, owner, ids))
        except BaseException:
            self.db.rollback()
            self._needs_recovery = True  # the Kafka transaction is open: recovery aborts it
            raise
        try:
            self.db.commit()
        except Exception as exc:
            self._resolve_failed_commit(exc)
            return
        failpoints.failpoint("dualwrite.after_db_commit")
        try:
            self._kafka(self.producer.commit)
        except Fenced as exc:
            # The newer owner's recovery reads the database's decision and commits them.
            log.warning("%s: unit committed; the new owner completes it: %s", tid, exc)
            return
        except ClientError as exc:
            # The database decided: the records are committed by recovery, now or later.
            log.warning("%s: unit committed; Kafka commit deferred to recovery: %s", tid, exc)
            self._needs_recovery = True
            self._try_recover()
            return
        failpoints.failpoint("dualwrite.after_kafka_commit")
        try:
            self._db(lambda: self.state.mark_completed(tid, owner))
        except ClientError as exc:
            log.warning("%s: unit committed; marking it completed failed: %s", tid, exc)
            self._needs_recovery = True
        failpoints.failpoint("dualwrite.after_complete")

    def _resolve_failed_commit(self, exc: Exception) -> None:
        """The database's commit raised: it may or may not have committed. Ask it through
        recovery; commit or abort the records to match, or say it is in doubt."""
        self._needs_recovery = True
        self.db.close()
        outcome = self._try_recover()
        if outcome == "committed":
            log.warning("%s: the commit raised (%s) but the database committed", self, exc)
            return
        if outcome == "aborted":
            raise DualWriteError(
                f"{self.transactional_id}: the database did not commit ({exc}); "
                "the records were aborted"
            ) from exc
        raise InDoubt(
            f"{self.transactional_id}: the database's commit failed ({exc}) and it cannot be "
            "asked yet whether it committed; recovery will commit or abort the records to match"
        ) from exc

    def _try_recover(self) -> Outcome | None:
        try:
            return self.recover()
        except ClientError as exc:
            log.warning("%s: recovery failed for now: %s", self.transactional_id, exc)
            return None

    # ---- error translation --------------------------------------------------------------

    def _kafka(self, action: Callable[[], T]) -> T:
        try:
            return action()
        except UnsupportedVersion as exc:
            raise TwoPhaseCommitUnavailable(
                f"the broker does not offer two-phase commit (KIP-939, InitProducerId v6): {exc}"
            ) from exc
        except KafkaApiError as exc:
            if exc.code in _NO_TWO_PHASE:
                raise TwoPhaseCommitUnavailable(
                    f"the broker refused two-phase commit for {self.transactional_id} ({exc}): "
                    "it needs transaction.two.phase.commit.enable=true and, under ACLs, "
                    "TWO_PHASE_COMMIT on the transactional id"
                ) from exc
            if exc.code in _FENCED:
                self._fenced = Fenced(f"{self.transactional_id}: a newer writer took over ({exc})")
                raise self._fenced from exc
            raise

    def _db(self, action: Callable[[], T]) -> T:
        try:
            return action()
        except Fenced as exc:
            self._fenced = exc
            raise
        except DualWriteError:
            raise
        except Exception as exc:
            if not self.db.is_unavailable(exc):
                raise
            self.db.close()
            self._needs_recovery = True
            raise DatabaseUnavailable(f"the database {self.db.safe_dsn} failed: {exc}") from exc

    # ---- lifecycle -------------------------------------------------------------------

    def close(self) -> None:
        """Stop; an open Kafka transaction stays for the next writer's recovery."""
        self._closed.set()
        periodic = getattr(self, "_periodic", None)
        if periodic is not None:
            periodic.join()
        self.producer.close()
        self.db.close()

    def __enter__(self) -> DualWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __str__(self) -> str:
        return self.transactional_id


def recover_abandoned(
    dsn: str,
    bootstrap_servers: str,
    *,
    older_than_s: float = 60.0,
    state_table: str = DEFAULT_STATE_TABLE,
    skip: frozenset[str] = frozenset(),
    **producer_settings: Any,
) -> dict[str, Outcome]:
    """The check-back (checkback.py): recover every id of the state table whose two-phase
    transaction has been open longer than `older_than_s` (except those in `skip`), each as
    a new writer of the id; what recovery did to each."""
    outcomes: dict[str, Outcome] = {}
    for transactional_id, age_ms in abandoned(
        dsn, bootstrap_servers, older_than_s, state_table, skip
    ):
        writer = DualWriter(
            dsn,
            bootstrap_servers,
            transactional_id,
            state_table=state_table,
            recovery_interval_s=None,
            **producer_settings,
        )
        outcomes[transactional_id] = writer.last_recovery
        writer.close()
        log.info("check-back: %s open %d ms: %s", transactional_id, age_ms, writer.last_recovery)
    return outcomes
