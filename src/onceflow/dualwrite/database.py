"""The databases a dual write runs on, by DSN: SQLite (the standard library's sqlite3, the
embedded default) and PostgreSQL (psycopg 3).

`Database` is one DB-API connection in explicit-transaction mode with what differs between
the two: how a transaction begins (SQLite's BEGIN IMMEDIATE takes the write lock up front,
so two writers never deadlock on a lock upgrade), the placeholder style, and which errors
mean "the database is down". Onceflow's own statements are written with `?` and translated.

SQLite runs in WAL mode with `synchronous=FULL`: a commit is on disk when it returns, so a
kill -9 (or a power cut) after the commit never loses a unit that recovery will complete.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
from collections.abc import Sequence
from typing import Any

from onceflow.client.errors import ConfigError
from onceflow.dualwrite.errors import DatabaseUnavailable

__all__ = ["Database", "check_identifier", "open_database"]

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
SQLITE_BUSY_TIMEOUT_S = 30.0
PG_CONNECT_TIMEOUT_S = 10


def check_identifier(name: str, what: str) -> str:
    """A table or column name that is safe to put into SQL as it is."""
    if not _IDENTIFIER.fullmatch(name):
        raise ConfigError(f"{what} {name!r} is not a plain SQL identifier ([A-Za-z_][A-Za-z0-9_]*)")
    return name


class Database:
    """One connection to the database of a DSN, with transactions begun explicitly."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.kind, self._target = _parse(dsn)
        self.connection: Any = None
        self.connect()

    # ---- connection ----------------------------------------------------------------

    def connect(self) -> None:
        """(Re)open the connection; DatabaseUnavailable if the database cannot be reached."""
        self.close()
        try:
            if self.kind == "sqlite":
                conn = sqlite3.connect(
                    self._target,
                    isolation_level=None,
                    timeout=SQLITE_BUSY_TIMEOUT_S,
                    check_same_thread=False,
                )
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=FULL")
                self.connection = conn
            else:
                import psycopg

                self.connection = psycopg.connect(
                    self._target, autocommit=False, connect_timeout=PG_CONNECT_TIMEOUT_S
                )
        except Exception as exc:
            if self.is_unavailable(exc):
                raise DatabaseUnavailable(
                    f"cannot open the database {self.safe_dsn}: {exc}"
                ) from exc
            raise

    def close(self) -> None:
        if self.connection is not None:
            # a connection already broken closes as well as it can
            with contextlib.suppress(Exception):
                self.connection.close()
            self.connection = None

    @property
    def safe_dsn(self) -> str:
        """The DSN without its password, for messages."""
        return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", self.dsn)

    def is_unavailable(self, exc: BaseException) -> bool:
        """Whether `exc` says the database (or the connection to it) is gone, rather than
        that a statement was wrong."""
        if self.kind == "sqlite":
            # sqlite3 reports a bad statement (no such table, a syntax error) as an
            # OperationalError too: those are the caller's, not a database that is away.
            text = str(exc)
            return isinstance(exc, sqlite3.OperationalError) and not any(
                bad in text for bad in ("no such ", "syntax error", "has no column")
            )
        import psycopg

        return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)

    def is_conflict(self, exc: BaseException) -> bool:
        """Whether `exc` is a unique-key violation (IntegrityError in both drivers)."""
        if self.kind == "sqlite":
            return isinstance(exc, sqlite3.IntegrityError)
        import psycopg

        return isinstance(exc, psycopg.IntegrityError)

    # ---- transactions --------------------------------------------------------------

    def begin(self) -> None:
        if self.connection is None:
            self.connect()
        if self.kind == "sqlite":
            self.connection.execute("BEGIN IMMEDIATE")
        # psycopg begins a transaction at the first statement (autocommit off)

    def commit(self) -> None:
        self.connection.commit() if self.kind != "sqlite" else self.connection.execute("COMMIT")

    def rollback(self) -> None:
        """Roll back whatever is open; a broken connection has nothing to roll back."""
        if self.connection is None:
            return
        try:
            if self.kind == "sqlite":
                if self.connection.in_transaction:
                    self.connection.execute("ROLLBACK")
            else:
                self.connection.rollback()
        except Exception as exc:
            if not self.is_unavailable(exc):
                raise
            self.close()

    # ---- Onceflow's own statements ---------------------------------------------------

    def sql(self, text: str) -> str:
        return text if self.kind == "sqlite" else text.replace("?", "%s")

    def execute(self, text: str, params: Sequence[Any] = ()) -> Any:
        """Run one of Onceflow's statements (written with `?`); the cursor."""
        cursor = self.connection.cursor()
        cursor.execute(self.sql(text), tuple(params))
        return cursor

    def executemany(self, text: str, rows: Sequence[Sequence[Any]]) -> None:
        cursor = self.connection.cursor()
        cursor.executemany(self.sql(text), rows)

    def has_table(self, table: str) -> bool:
        """Whether `table` exists, asked without a write lock (SQLite's BEGIN IMMEDIATE
        would wait behind a writer in the middle of a unit)."""
        if self.kind == "sqlite":
            found = self.connection.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
            ).fetchone()
            return found is not None
        found = self.execute("SELECT to_regclass(?)", (table,)).fetchone()
        self.commit()
        return found[0] is not None

    def run_alone(self, text: str, params: Sequence[Any] = ()) -> int:
        """One statement in a transaction of its own; the rows it changed."""
        self.begin()
        try:
            count = int(self.execute(text, params).rowcount)
            self.commit()
            return count
        except BaseException:
            self.rollback()
            raise


def _parse(dsn: str) -> tuple[str, str]:
    """('sqlite', path) or ('postgresql', libpq conninfo)."""
    if dsn.startswith(("postgresql://", "postgres://")) or (
        "=" in dsn and not dsn.startswith("sqlite:")
    ):
        return "postgresql", dsn
    if dsn.startswith("sqlite:"):
        path = dsn[len("sqlite:") :]
        path = path[2:] if path.startswith("//") else path  # sqlite:///abs or sqlite:rel
        if not path:
            raise ConfigError("a sqlite DSN needs a file: sqlite:///path/to/file.db")
        return "sqlite", path
    raise ConfigError(
        f"unknown database DSN {dsn!r}: use sqlite:///path/to/file.db or "
        "postgresql://user@host:port/dbname"
    )


def open_database(dsn: str) -> Database:
    return Database(dsn)
