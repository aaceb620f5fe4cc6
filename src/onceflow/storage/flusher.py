"""Group commit: one round of fsyncs, off the event loop, covers every append waiting.

Appends mark their log dirty and ask for durability. A round takes every dirty log's flush
plan (on the loop), hands the plans to the flusher thread, which fsyncs them, and finishes
back on the loop, where the logs' flushed offsets move and the waiters are released. While
a round runs, newer appends queue up for the next round, so under load many appends share
one fsync instead of paying one each.

The round's path is kept short because an idempotent librdkafka producer has one request in
flight per partition, so every hop is on its critical path: one `call_soon` to start (which
lets every partition of a produce request join the round), one queue put to the thread, one
`call_soon_threadsafe` back, and the next round starts at once from the finished one.

A round that a follower waits for runs on the event loop instead, while the disk's fsyncs
are fast (an average below `ON_LOOP_BELOW_S`): a follower's fetch round waits for its fsync
before it asks the leader for more, so the two thread hand-offs are on the replication path,
and cost more than a fast fsync (less broker CPU and less time per acks=all append on RF=3).
A leader's rounds stay on the thread: its fsync overlaps with its followers' fetches, which
a blocked loop would delay (more time per append). The figures: benchmarks/README.md.
One slow fsync sends the next rounds to the thread, so a slow or stalling disk blocks the
loop for one round at most.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable

from onceflow.errors import fail_future
from onceflow.storage.partition_log import FlushPlan, PartitionLog

log = logging.getLogger(__name__)

_STOP = None  # put on the job queue: the flusher thread ends

#: Rounds a follower waits for run on the loop while the fsyncs' recent average is below this.
ON_LOOP_BELOW_S = 0.001
_AVERAGE_WEIGHT = 0.2  # of the newest round in the moving average of fsync seconds


class GroupCommitFlusher:
    def __init__(
        self,
        on_flushed: Callable[[PartitionLog], None] | None = None,
        on_round: Callable[[float, int], None] | None = None,
    ) -> None:
        self._on_flushed = on_flushed
        # Metrics: called on the loop after each round with its fsync seconds and the
        # records it made durable (the group-commit size).
        self._on_round = on_round
        self._dirty: dict[int, PartitionLog] = {}
        self._waiters: list[tuple[PartitionLog, int, asyncio.Future[None]]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._jobs: queue.SimpleQueue[list[FlushPlan] | None] = queue.SimpleQueue()
        self.fsync_failures = 0
        self._thread: threading.Thread | None = None
        self._idle: asyncio.Event | None = None  # set while no round is in the thread
        self._running = False
        self._scheduled = False
        self._closed = False
        self.rounds = 0
        self._fsync_seconds: float | None = None  # moving average; None before a round
        self._follower_waits = False  # a follower waits for the next round

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._idle = asyncio.Event()
        self._idle.set()
        self._thread = threading.Thread(target=self._fsync_rounds, name="group-commit")
        self._thread.daemon = True
        self._thread.start()
        if self._dirty or self._waiters:
            # mark() and durable() before start() could not schedule a round; without this
            # their waiters would hang until some later append.
            self._schedule()

    def mark(self, plog: PartitionLog) -> None:
        """Note that `plog` has unflushed appends; they will be flushed soon."""
        self._dirty[id(plog)] = plog
        self._schedule()

    def durable(
        self, plog: PartitionLog, offset: int, follower: bool = False
    ) -> asyncio.Future[None]:
        """A future that completes once `plog` is flushed past `offset`, or fails with
        LogOffline if its fsync failed. `follower`: a follower's fetch round waits for it
        (its round may run on the loop)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if plog.flushed_offset > offset:
            fut.set_result(None)
            return fut
        if plog.offline is not None:
            fail_future(fut, plog.offline_error())
            return fut
        self._waiters.append((plog, offset, fut))
        self._follower_waits |= follower
        self.mark(plog)
        return fut

    async def barrier(self) -> None:
        """Wait until no fsync round is running (before closing files)."""
        while self._running:
            assert self._idle is not None
            await self._idle.wait()

    async def close(self) -> None:
        self._closed = True
        await self.barrier()
        if self._thread is not None:
            self._jobs.put(_STOP)
            self._thread.join()
            self._thread = None

    # ---- rounds ----------------------------------------------------------------------

    def _schedule(self) -> None:
        if self._loop is None or self._scheduled or self._running or self._closed:
            return  # a running round starts the next one when it finishes
        self._scheduled = True
        self._loop.call_soon(self._start_round)

    def _start_round(self) -> None:
        self._scheduled = False
        if self._running or self._closed:
            return
        logs = [p for p in self._dirty.values() if not p.deleted]
        self._dirty = {}
        plans = [plan for plan in (plog.prepare_flush() for plog in logs) if plan is not None]
        if not plans:
            self._settle()
            return
        on_loop, self._follower_waits = self._follower_waits and self._fsyncs_fast(), False
        if on_loop:
            started = time.perf_counter()
            errors = _execute(plans)
            self._finish_round(plans, errors, time.perf_counter() - started, on_loop=True)
            return
        assert self._idle is not None
        self._running = True
        self._idle.clear()
        self._jobs.put(plans)

    def _fsync_rounds(self) -> None:
        """The flusher thread: the slow part of each round, while the loop serves others."""
        loop = self._loop
        assert loop is not None
        while (plans := self._jobs.get()) is not _STOP:
            started = time.perf_counter()
            errors = _execute(plans)
            seconds = time.perf_counter() - started
            try:
                loop.call_soon_threadsafe(self._finish_round, plans, errors, seconds)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                return

    def _fsyncs_fast(self) -> bool:
        return self._fsync_seconds is not None and self._fsync_seconds < ON_LOOP_BELOW_S

    def _finish_round(
        self,
        plans: list[FlushPlan],
        errors: list[OSError | None],
        seconds: float = 0.0,
        on_loop: bool = False,
    ) -> None:
        assert self._idle is not None
        self._running = False
        self._idle.set()
        self.rounds += 1
        average = self._fsync_seconds
        self._fsync_seconds = (
            seconds if average is None else average + _AVERAGE_WEIGHT * (seconds - average)
        )
        if self._on_round is not None:
            records = sum(max(0, p.end_offset - p.log.flushed_offset) for p in plans)
            self._on_round(seconds, records)
        for plan, error in zip(plans, errors, strict=True):
            if error is not None:
                self.fsync_failures += 1
                plan.log.flush_failed(error)  # offline: its waiters fail in _settle
                continue
            plan.log.complete_flush(plan)
            if self._on_flushed is not None:
                self._on_flushed(plan.log)
        self._settle()
        if self._dirty and not self._closed:
            if on_loop:  # nothing was appended meanwhile; what a callback appended goes next
                self._schedule()
            else:
                self._start_round()  # everything appended meanwhile, without another hop

    def _settle(self) -> None:
        waiting = []
        for plog, offset, fut in self._waiters:
            if fut.done():
                continue
            if plog.flushed_offset > offset or plog.deleted:
                fut.set_result(None)
            elif plog.offline is not None:
                fail_future(fut, plog.offline_error())
            elif not plog.has_unflushed:
                fail_future(fut, RuntimeError(f"{plog.name}: offset {offset} was never appended"))
            else:
                waiting.append((plog, offset, fut))
                self._dirty[id(plog)] = plog
        self._waiters = waiting
        if waiting:
            self._schedule()


def _execute(plans: list[FlushPlan]) -> list[OSError | None]:
    """Each plan's fsyncs; one log's failure is that log's alone."""
    errors: list[OSError | None] = []
    for plan in plans:
        try:
            plan.execute()
            errors.append(None)
        except OSError as exc:
            errors.append(exc)
    return errors
