"""The outbox relay: publishes each row of an application's outbox table exactly once, for
applications that cannot write through a DualWriter.

Each round is one dual-write unit: read unpublished rows in id order, produce one record
per row (keyed by the row's key column, so rows of a key keep their order in a partition),
and record their ids in the relay's ledger table in the same database transaction. The
unit commits both or neither, so a relay killed at any step neither skips nor repeats a
row. Relays on one table and topic share a transactional id: the newest fences the others
(in the broker and in the state table), so they never publish a row twice.

Rows are found by their absence from the ledger rather than by a high-water id, because
PostgreSQL ids are taken before their transactions commit: a row with a lower id can become
visible after a higher one was published. The relay reads on from the last id it published
and, every `sweep_interval_s` and when it runs dry, sweeps the whole table for such rows.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from onceflow.client.errors import ConfigError, Unreachable
from onceflow.dualwrite.database import check_identifier
from onceflow.dualwrite.errors import DatabaseUnavailable, Fenced, InDoubt
from onceflow.dualwrite.writer import DualWriter

__all__ = ["DEFAULT_LEDGER_TABLE", "OutboxRelay", "relay_transactional_id"]

log = logging.getLogger(__name__)

DEFAULT_LEDGER_TABLE = "onceflow_outbox_published"


def relay_transactional_id(relay_id: str) -> str:
    return f"onceflow-outbox-{relay_id}"


def _bytes(value: Any) -> bytes | str | None:
    if value is None or isinstance(value, bytes | str):
        return value
    if isinstance(value, memoryview | bytearray):
        return bytes(value)
    return str(value)


class OutboxRelay:
    def __init__(
        self,
        dsn: str,
        bootstrap_servers: str,
        table: str,
        topic: str,
        *,
        relay_id: str | None = None,
        id_column: str = "id",
        key_column: str | None = "key",
        value_column: str = "value",
        ledger_table: str = DEFAULT_LEDGER_TABLE,
        batch_size: int = 1000,
        sweep_interval_s: float = 5.0,
        **writer_settings: Any,
    ) -> None:
        self.table = check_identifier(table, "outbox table")
        self.topic = topic
        self.relay_id = relay_id or f"{table}-{topic}"
        self.ledger = check_identifier(ledger_table, "ledger table")
        id_col = check_identifier(id_column, "id column")
        value_col = check_identifier(value_column, "value column")
        key_col = check_identifier(key_column, "key column") if key_column else "NULL"
        self.batch_size = batch_size
        self.sweep_interval_s = sweep_interval_s
        self.published = 0
        self._after = -1  # the last id published by this relay (a lower bound for reads)
        self._last_sweep = 0.0
        self.writer = DualWriter(
            dsn, bootstrap_servers, relay_transactional_id(self.relay_id), **writer_settings
        )
        db = self.writer.db
        if not db.has_table(self.table):
            self.writer.close()
            raise ConfigError(f"the database {db.safe_dsn} has no table {self.table}")
        if not db.has_table(self.ledger):
            db.run_alone(
                f"CREATE TABLE IF NOT EXISTS {self.ledger} ("
                " relay TEXT NOT NULL, id BIGINT NOT NULL, PRIMARY KEY (relay, id))"
            )
        self._select = db.sql(
            f"SELECT o.{id_col}, {key_col}, o.{value_col} FROM {self.table} o"
            f" WHERE o.{id_col} > ? AND NOT EXISTS (SELECT 1 FROM {self.ledger} p"
            f" WHERE p.relay = ? AND p.id = o.{id_col}) ORDER BY o.{id_col} LIMIT ?"
        )
        self._record = db.sql(f"INSERT INTO {self.ledger} (relay, id) VALUES (?, ?)")

    def run_once(self) -> int:
        """One unit: publish up to `batch_size` unpublished rows; how many."""
        sweep = time.monotonic() - self._last_sweep >= self.sweep_interval_s
        count = self._publish(-(2**62) if sweep else self._after)
        if sweep:
            self._last_sweep = time.monotonic()
        elif count == 0 and self._after >= 0:
            # Dry: sweep for rows that became visible below the last id published.
            count = self._publish(-(2**62))
            self._last_sweep = time.monotonic()
        return count

    def _publish(self, after: int) -> int:
        with self.writer.transaction() as tx:
            rows = tx.execute(self._select, (after, self.relay_id, self.batch_size)).fetchall()
            for _, key, value in rows:
                tx.produce(self.topic, _bytes(value), _bytes(key))
            if rows:
                try:
                    tx.executemany(self._record, [(self.relay_id, r[0]) for r in rows])
                except Exception as exc:
                    if not self.writer.db.is_conflict(exc):
                        raise
                    # Another relay of the table published these rows and is newer: the
                    # state table would refuse this unit anyway.
                    raise Fenced(f"relay {self.relay_id}: another relay took over") from exc
        if rows:
            self._after = max(self._after, int(rows[-1][0]))
            self.published += len(rows)
        return len(rows)

    def run(
        self,
        stop: threading.Event | None = None,
        *,
        poll_interval_s: float = 0.5,
        until_empty: bool = False,
    ) -> int:
        """Publish until `stop` is set (or, with `until_empty`, until a round finds
        nothing); rows published."""
        stop = stop or threading.Event()
        while not stop.is_set():
            try:
                count = self.run_once()
            except (DatabaseUnavailable, InDoubt, Unreachable) as exc:
                # Away for a while (a restart): the unit was rolled back or is settled by
                # recovery before the next one; try again after a pause.
                log.warning("relay %s: %s; trying again", self.relay_id, exc)
                stop.wait(max(poll_interval_s, 1.0))
                continue
            if count == 0:
                if until_empty:
                    break
                stop.wait(poll_interval_s)
        return self.published

    def close(self) -> None:
        self.writer.close()

    def __enter__(self) -> OutboxRelay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
