"""Group commit: one round of fsyncs, off the event loop, covers every append waiting.

Appends mark their log dirty and ask for durability. While a round of fsyncs runs in a
worker thread, newer appends queue up for the next round, so under load many appends share
one fsync instead of paying one each.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from onceflow.storage.partition_log import FlushPlan, PartitionLog

log = logging.getLogger(__name__)


class GroupCommitFlusher:
    def __init__(self, on_flushed: Callable[[PartitionLog], None] | None = None) -> None:
        self._on_flushed = on_flushed
        self._dirty: dict[int, PartitionLog] = {}
        self._waiters: list[tuple[PartitionLog, int, asyncio.Future[None]]] = []
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._round_done: asyncio.Event | None = None
        self.rounds = 0
        self._closed = False

    def start(self) -> None:
        self._wake = asyncio.Event()
        self._round_done = asyncio.Event()
        if self._dirty or self._waiters:
            # mark() and durable() before start() had no event to set; without this their
            # waiters would hang until some later append woke the loop.
            self._wake.set()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="group-commit")

    def mark(self, plog: PartitionLog) -> None:
        """Note that `plog` has unflushed appends; they will be flushed soon."""
        self._dirty[id(plog)] = plog
        if self._wake is not None:
            self._wake.set()

    def durable(self, plog: PartitionLog, offset: int) -> asyncio.Future[None]:
        """A future that completes once `plog` is flushed past `offset`."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if plog.flushed_offset > offset:
            fut.set_result(None)
            return fut
        self._waiters.append((plog, offset, fut))
        self.mark(plog)
        return fut

    async def barrier(self) -> None:
        """Wait until no fsync round is running (before closing files)."""
        while self._running:
            assert self._round_done is not None
            self._round_done.clear()
            await self._round_done.wait()

    _running = False

    async def _run(self) -> None:
        assert self._wake is not None and self._round_done is not None
        loop = asyncio.get_running_loop()
        while not self._closed:
            await self._wake.wait()
            self._wake.clear()
            plans = [p for p in (plog.prepare_flush() for plog in self._take_dirty()) if p]
            if not plans:
                self._settle()
                continue
            self._running = True
            try:
                await loop.run_in_executor(None, _execute_all, plans)
                for plan in plans:
                    plan.log.complete_flush(plan)
                    if self._on_flushed is not None:
                        self._on_flushed(plan.log)
            except OSError as exc:
                log.error("fsync failed: %s", exc)
                self._fail(exc)
            finally:
                self._running = False
                self._round_done.set()
            self.rounds += 1
            self._settle()

    def _take_dirty(self) -> list[PartitionLog]:
        logs = [p for p in self._dirty.values() if not p.deleted]
        self._dirty = {}
        return logs

    def _settle(self) -> None:
        waiting = []
        for plog, offset, fut in self._waiters:
            if fut.done():
                continue
            if plog.flushed_offset > offset or plog.deleted:
                fut.set_result(None)
            elif not plog.has_unflushed:
                fut.set_exception(RuntimeError(f"{plog.name}: offset {offset} was never appended"))
            else:
                waiting.append((plog, offset, fut))
                self._dirty[id(plog)] = plog
        self._waiters = waiting
        if waiting and self._wake is not None:
            self._wake.set()

    def _fail(self, exc: BaseException) -> None:
        for _, _, fut in self._waiters:
            if not fut.done():
                fut.set_exception(exc)
        self._waiters = []

    async def close(self) -> None:
        self._closed = True
        if self._wake is not None:
            self._wake.set()
        if self._task is not None:
            await self.barrier()
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def _execute_all(plans: list[FlushPlan]) -> None:
    for plan in plans:
        plan.execute()
