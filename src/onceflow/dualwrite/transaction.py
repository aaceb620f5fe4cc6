"""The open unit of work a DualWriter hands out: the database connection in its
transaction, and `produce` into the unit's Kafka transaction."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from onceflow.client.participant import HeadersArg, TwoPhaseProducer

__all__ = ["Transaction"]

#: Runs a call the way the writer does, turning the database's or the broker's failures
#: into the dual write's errors (DualWriter._db and _kafka).
_Guard = Callable[[Callable[[], Any]], Any]


class Transaction:
    """The open unit of work: a DB-API connection in a transaction, and a producer."""

    def __init__(
        self, connection: Any, producer: TwoPhaseProducer, db_call: _Guard, kafka_call: _Guard
    ) -> None:
        self.connection = connection
        self._producer = producer
        self._db = db_call
        self._kafka = kafka_call
        self.records = 0

    def cursor(self) -> Any:
        return self.connection.cursor()

    def execute(self, sql: str, params: Any = ()) -> Any:
        """cursor.execute in the unit's transaction; the cursor (fetchone, rowcount...).
        A lost database is DatabaseUnavailable; the statement's own errors are the
        driver's (sqlite3.IntegrityError, psycopg.errors.UniqueViolation...)."""
        cursor = self.connection.cursor()
        self._db(lambda: cursor.execute(sql, params))
        return cursor

    def executemany(self, sql: str, rows: Any) -> Any:
        cursor = self.connection.cursor()
        self._db(lambda: cursor.executemany(sql, rows))
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
        self._kafka(lambda: self._producer.produce(topic, value, key, partition, headers))
        self.records += 1
