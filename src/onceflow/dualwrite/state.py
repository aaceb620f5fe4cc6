"""The state table: per transactional id, who owns it and the last prepared transaction the
database committed, kept in the same database as the application's rows.

One row per id:

| column                          | meaning                                                   |
|---------------------------------|-----------------------------------------------------------|
| owner_producer_id, owner_epoch  | the writer allowed to commit units (the newest to claim)  |
| producer_id, producer_epoch     | the Kafka transaction of the last unit the database holds |
| status                          | `prepared`: that transaction may still be open in Kafka;  |
|                                 | `completed`: it was committed in Kafka; `lost`: something |
|                                 | else aborted it (recovery refuses until an operator acts) |
| units                           | units of work committed through this id                  |

A unit's transaction writes `prepared` with the application's rows, so the database's own
commit is the decision. A writer keeps one producer epoch for many units, so the pair
(producer id, epoch) alone would not tell the open transaction from the last committed one:
a unit marks itself `completed` after its Kafka commit, and the next unit begins only
after that. An open Kafka transaction whose (producer id, epoch) equals a `prepared` row is
therefore exactly the unit the database committed; anything else open was never committed.

Every write of a unit is conditional on the owner, so a writer that lost the id (a newer
instance claimed it) cannot commit rows behind the new owner's recovery: the database's
row lock orders the claim and the zombie's commit, and whichever comes second sees the other.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from onceflow.client.errors import ClientError, KafkaApiError
from onceflow.client.participant_link import Link
from onceflow.client.txn_admin import describe_transaction
from onceflow.dualwrite.database import Database, check_identifier
from onceflow.dualwrite.errors import Fenced, StateMismatch
from onceflow.errors import ErrorCode

__all__ = [
    "COMPLETED",
    "DEFAULT_STATE_TABLE",
    "LOST",
    "Decision",
    "LastTransaction",
    "StateTable",
    "last_transaction",
]

DEFAULT_STATE_TABLE = "onceflow_dualwrite"
PREPARED, COMPLETED = "prepared", "completed"
LOST = "lost"  # the database committed the unit, something else aborted its records


@dataclass(frozen=True, slots=True)
class Decision:
    """What the database says of an id: its last unit's Kafka transaction and status."""

    producer_id: int
    producer_epoch: int
    status: str

    def commits(self, ongoing: tuple[int, int]) -> bool:
        """Whether the open Kafka transaction `ongoing` is a unit the database committed."""
        return self.status == PREPARED and (self.producer_id, self.producer_epoch) == ongoing

    def aborted_behind_our_back(self, last: LastTransaction | None) -> bool:
        """Whether the broker aborted the unit the database committed. Writers never do:
        a `prepared` row is resolved by the first recovery after it, before any later
        transaction of the id; an abort at its epoch or later came from outside."""
        return (
            self.status == PREPARED
            and last is not None
            and last.state in ("PrepareAbort", "CompleteAbort")
            and last.producer_id == self.producer_id
            and last.producer_epoch >= self.producer_epoch
        )


@dataclass(frozen=True, slots=True)
class LastTransaction:
    """The coordinator's state of an id's last transaction (DescribeTransactions)."""

    state: str
    producer_id: int
    producer_epoch: int

    def __str__(self) -> str:
        return f"{self.state} at producer {self.producer_id} epoch {self.producer_epoch}"


def last_transaction(
    link: Link, transactional_id: str, timeout_s: float = 15.0
) -> LastTransaction | None:
    """What the coordinator says of the id's last transaction, before a recovery's init
    replaces it; asked again while the coordinator moves or loads (a broker just
    restarted), None for an id it does not know or when no broker answers in time."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            state = describe_transaction(link.coordinator(transactional_id), transactional_id)
            return LastTransaction(
                str(state.transaction_state), int(state.producer_id), int(state.producer_epoch)
            )
        except KafkaApiError as exc:
            if exc.code == ErrorCode.transactional_id_not_found:
                return None
            retriable = ErrorCode(exc.code).retriable
            link.coordinator_moved(transactional_id)
            if not retriable or time.monotonic() > deadline:
                return None
        except ClientError:
            link.reset()
            if time.monotonic() > deadline:
                return None
        time.sleep(link.backoff_s)


class StateTable:
    def __init__(self, db: Database, table: str = DEFAULT_STATE_TABLE) -> None:
        self.db = db
        self.table = check_identifier(table, "state table")

    def create(self) -> None:
        if self.db.has_table(self.table):
            return
        self.db.run_alone(
            f"CREATE TABLE IF NOT EXISTS {self.table} ("
            " transactional_id TEXT PRIMARY KEY,"
            " owner_producer_id BIGINT NOT NULL, owner_epoch INTEGER NOT NULL,"
            " producer_id BIGINT NOT NULL, producer_epoch INTEGER NOT NULL,"
            " status TEXT NOT NULL, units BIGINT NOT NULL)"
        )

    def claim(self, transactional_id: str, owner: tuple[int, int], *, resolved: bool) -> Decision:
        """Make `owner` (a producer id and epoch the broker just gave) the id's owner, in a
        transaction of its own, and return what the database says; Fenced if a newer
        owner holds it. `resolved`: the last unit's Kafka transaction is ended."""
        t = self.table
        self.db.begin()
        try:
            changed = self.db.execute(
                f"INSERT INTO {t} (transactional_id, owner_producer_id, owner_epoch,"
                " producer_id, producer_epoch, status, units)"
                f" VALUES (?, ?, ?, -1, -1, '{COMPLETED}', 0)"
                " ON CONFLICT (transactional_id) DO UPDATE SET"
                f" owner_producer_id = excluded.owner_producer_id,"
                f" owner_epoch = excluded.owner_epoch,"
                f" status = CASE WHEN ? = 1 THEN '{COMPLETED}' ELSE {t}.status END"
                f" WHERE NOT ({t}.owner_producer_id = excluded.owner_producer_id"
                f" AND {t}.owner_epoch >= excluded.owner_epoch)",
                (transactional_id, owner[0], owner[1], int(resolved)),
            ).rowcount
            row = self.db.execute(
                f"SELECT owner_producer_id, owner_epoch, producer_id, producer_epoch, status"
                f" FROM {t} WHERE transactional_id = ?",
                (transactional_id,),
            ).fetchone()
            self.db.commit()
        except BaseException:
            self.db.rollback()
            raise
        if changed != 1:
            raise Fenced(
                f"{transactional_id} is owned by producer {row[0]} epoch {row[1]} in {t}, "
                f"newer than this writer's epoch {owner[1]}"
            )
        if row[4] not in (PREPARED, COMPLETED, LOST):
            raise StateMismatch(f"{t} has status {row[4]!r} for {transactional_id}")
        return Decision(int(row[2]), int(row[3]), str(row[4]))

    def record_prepared(
        self, transactional_id: str, owner: tuple[int, int], prepared: tuple[int, int]
    ) -> None:
        """Inside the unit's transaction: the database commits `prepared` with the rows."""
        changed = self.db.execute(
            f"UPDATE {self.table} SET producer_id = ?, producer_epoch = ?,"
            f" status = '{PREPARED}', units = units + 1"
            " WHERE transactional_id = ? AND owner_producer_id = ? AND owner_epoch = ?",
            (prepared[0], prepared[1], transactional_id, owner[0], owner[1]),
        ).rowcount
        if changed != 1:
            raise Fenced(
                f"{transactional_id} was claimed by a newer writer in {self.table}: "
                "this unit of work is rolled back"
            )

    def mark_completed(self, transactional_id: str, owner: tuple[int, int]) -> None:
        """After the Kafka commit, in a transaction of its own: the next unit may begin."""
        self.db.run_alone(
            f"UPDATE {self.table} SET status = '{COMPLETED}'"
            " WHERE transactional_id = ? AND owner_producer_id = ? AND owner_epoch = ?"
            f" AND status = '{PREPARED}'",
            (transactional_id, owner[0], owner[1]),
        )

    def mark_lost(self, transactional_id: str, owner: tuple[int, int]) -> None:
        """The unit the database committed was aborted in the broker by something else:
        kept, so every later recovery refuses too (the broker forgets it at the next init)."""
        self.db.run_alone(
            f"UPDATE {self.table} SET status = '{LOST}'"
            " WHERE transactional_id = ? AND owner_producer_id = ? AND owner_epoch = ?"
            f" AND status = '{PREPARED}'",
            (transactional_id, owner[0], owner[1]),
        )

    def ids(self) -> list[str]:
        """Every transactional id the table knows (for the check-back)."""
        self.db.begin()
        try:
            rows = self.db.execute(f"SELECT transactional_id FROM {self.table}").fetchall()
            self.db.commit()
        except BaseException:
            self.db.rollback()
            raise
        return [str(r[0]) for r in rows]
