"""The open unit of work a DualWriter hands out: the database connection in its
transaction, and `produce` into the unit's Kafka transaction."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from onceflow.client.participant import HeadersArg

if TYPE_CHECKING:
    from onceflow.dualwrite.writer import DualWriter

__all__ = ["Transaction"]


class Transaction:
    """The open unit of work: a DB-API connection in a transaction, and a producer."""

    def __init__(self, writer: DualWriter) -> None:
        self._writer = writer
        self.connection: Any = writer.db.connection
        self.records = 0

    def cursor(self) -> Any:
        return self.connection.cursor()

    def execute(self, sql: str, params: Any = ()) -> Any:
        """cursor.execute in the unit's transaction; the cursor (fetchone, rowcount...).
        A lost database is DatabaseUnavailable; the statement's own errors are the
        driver's (sqlite3.IntegrityError, psycopg.errors.UniqueViolation...)."""
        cursor = self.connection.cursor()
        self._writer._db(lambda: cursor.execute(sql, params))
        return cursor

    def executemany(self, sql: str, rows: Any) -> Any:
        cursor = self.connection.cursor()
        self._writer._db(lambda: cursor.executemany(sql, rows))
        return cursor

    def produce(
        self,
        topic: str,
        value: bytes | str | None,
        key: bytes | str | None = None,
        partition: int | None = None,
        headers: HeadersArg = None,
    ) -> None:
        """A record of the unit (partitioned by the key's murmur2, as Kafka's producer)."""
        self._writer._kafka(
            lambda: self._writer.producer.produce(topic, value, key, partition, headers)
        )
        self.records += 1
