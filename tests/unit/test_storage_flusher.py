"""GroupCommitFlusher: many appends waiting for durability share few fsync rounds."""

from __future__ import annotations

import asyncio
import gc
import threading
import time

import pytest

from onceflow.clock import ManualClock
from onceflow.records.batch import validate_produced_batches
from onceflow.records.builder import build_batch
from onceflow.storage.failures import LogOffline
from onceflow.storage.flusher import ON_LOOP_BELOW_S, GroupCommitFlusher
from onceflow.storage.fs import SimFileSystem
from onceflow.storage.partition_log import LogConfig, PartitionLog
from onceflow.storage.recovery import open_partition


class FailingFsyncFS(SimFileSystem):
    """A SimFileSystem whose fsyncs fail once `broken` is set, like a dying disk."""

    broken = False

    def __init__(self) -> None:
        super().__init__()
        self.failed_on: list[str] = []  # the thread of each failed fsync

    def step(self, what: str) -> None:
        if self.broken and what.startswith("fsync"):
            self.failed_on.append(threading.current_thread().name)
            raise OSError(5, "Input/output error")
        super().step(what)


class WatchedFsyncFS(SimFileSystem):
    """A SimFileSystem that notes the thread of every segment fsync and can make them slow."""

    def __init__(self) -> None:
        super().__init__()
        self.fsync_threads: list[str] = []
        self.fsync_seconds = 0.0

    def step(self, what: str) -> None:
        if what.startswith("fsync") and what.endswith(".log"):  # a round's: record bytes
            self.fsync_threads.append(threading.current_thread().name)
            time.sleep(self.fsync_seconds)
        super().step(what)


def open_log(
    fs: SimFileSystem | None = None, durable: bool = True, name: str = "t"
) -> PartitionLog:
    config = LogConfig(durable=durable, index_interval_bytes=128)
    plog, _ = open_partition(
        fs or SimFileSystem(), f"/data/{name}-0", name, 0, config, ManualClock(), 0, False
    )
    return plog


def append(plog: PartitionLog) -> int:
    data = build_batch([(b"k", b"v" * 20, [])], timestamp_ms=plog.clock.now_ms())
    return plog.append_batches(data, validate_produced_batches(data, 1 << 20)).last_offset


def test_many_concurrent_waiters_are_resolved_by_few_fsync_rounds() -> None:
    async def main() -> None:
        plog = open_log()
        flushed: list[int] = []
        flusher = GroupCommitFlusher(on_flushed=lambda p: flushed.append(p.flushed_offset))
        flusher.start()

        async def producer(batches: int) -> None:
            for _ in range(batches):
                offset = append(plog)
                await flusher.durable(plog, offset)
                assert plog.flushed_offset > offset
                assert plog.high_watermark > offset

        waiters = 20 * 5
        await asyncio.gather(*(producer(5) for _ in range(20)))
        assert plog.flushed_offset == plog.log_end_offset == waiters
        assert 0 < flusher.rounds < waiters, "appends share fsync rounds"
        assert flushed == sorted(flushed) and flushed[-1] == waiters
        await flusher.close()

    asyncio.run(main())


def test_a_burst_of_waiters_before_the_first_round_needs_one_round() -> None:
    async def main() -> None:
        plog = open_log()
        flusher = GroupCommitFlusher()
        flusher.start()
        futures = [flusher.durable(plog, append(plog)) for _ in range(50)]
        await asyncio.gather(*futures)
        assert flusher.rounds == 1
        await flusher.close()

    asyncio.run(main())


def test_one_round_covers_several_logs() -> None:
    async def main() -> None:
        fs = SimFileSystem()
        logs = [open_log(fs, name=f"t{i}") for i in range(4)]
        flusher = GroupCommitFlusher()
        flusher.start()
        futures = [flusher.durable(p, append(p)) for p in logs for _ in range(3)]
        await asyncio.gather(*futures)
        assert flusher.rounds == 1
        assert all(p.high_watermark == 3 for p in logs)
        await flusher.close()

    asyncio.run(main())


def test_high_watermark_waits_for_the_round_in_durable_mode() -> None:
    async def main() -> None:
        plog = open_log(durable=True)
        flusher = GroupCommitFlusher()
        flusher.start()
        offset = append(plog)
        future = flusher.durable(plog, offset)
        assert plog.high_watermark == 0, "not visible before the fsync"
        await future
        assert plog.high_watermark == 1
        await flusher.close()

    asyncio.run(main())


def test_high_watermark_moves_at_append_in_non_durable_mode() -> None:
    async def main() -> None:
        plog = open_log(durable=False)
        flusher = GroupCommitFlusher()
        flusher.start()
        offset = append(plog)
        assert plog.high_watermark == 1
        flusher.mark(plog)
        await flusher.durable(plog, offset)
        assert plog.flushed_offset == 1
        await flusher.close()

    asyncio.run(main())


def test_waiting_for_an_offset_already_flushed_resolves_at_once() -> None:
    async def main() -> None:
        plog = open_log()
        offset = append(plog)
        plog.flush()
        flusher = GroupCommitFlusher()  # not even started
        future = flusher.durable(plog, offset)
        assert future.done() and future.result() is None

    asyncio.run(main())


def test_waiting_for_an_offset_never_appended_fails() -> None:
    async def main() -> None:
        plog = open_log()
        append(plog)
        flusher = GroupCommitFlusher()
        flusher.start()
        with pytest.raises(RuntimeError, match="never appended"):
            await asyncio.wait_for(flusher.durable(plog, 10), 5)
        await flusher.close()

    asyncio.run(main())


def test_waiters_of_a_deleted_log_are_released() -> None:
    async def main() -> None:
        plog = open_log()
        flusher = GroupCommitFlusher()
        future = flusher.durable(plog, append(plog))
        plog.delete()
        flusher.start()
        await asyncio.wait_for(future, 5)
        await flusher.close()

    asyncio.run(main())


def test_an_fsync_error_takes_the_log_offline_fails_its_waiters_and_keeps_the_hw() -> None:
    async def main() -> None:
        fs = FailingFsyncFS()
        plog = open_log(fs)
        fs.broken = True
        flusher = GroupCommitFlusher()
        flusher.start()
        future = flusher.durable(plog, append(plog))
        with pytest.raises(LogOffline):
            await asyncio.wait_for(future, 5)
        assert plog.high_watermark == 0 and plog.flushed_offset == 0
        assert plog.offline is not None
        # Never retried as if it had worked: the log refuses appends and reads until a restart.
        fs.broken = False
        with pytest.raises(LogOffline):
            append(plog)
        with pytest.raises(LogOffline):
            flusher.durable(plog, 0).result()
        await flusher.close()

    asyncio.run(main())


def test_a_failed_wait_whose_request_is_gone_is_not_a_lost_exception() -> None:
    # The producer left before its fsync failed: nobody awaits the future, and asyncio
    # must not log its error as lost (a broker's log would show an internal error).
    async def main() -> list[dict[str, object]]:
        reported: list[dict[str, object]] = []
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: reported.append(ctx))
        fs = FailingFsyncFS()
        plog = open_log(fs)
        fs.broken = True
        flusher = GroupCommitFlusher()
        flusher.start()
        flusher.durable(plog, append(plog))
        await flusher.barrier()
        for _ in range(5):
            await asyncio.sleep(0.01)
        await flusher.close()
        gc.collect()
        return reported

    assert asyncio.run(main()) == []


def test_close_waits_for_a_running_round() -> None:
    async def main() -> None:
        plog = open_log()
        flusher = GroupCommitFlusher()
        flusher.start()
        future = flusher.durable(plog, append(plog))
        await asyncio.sleep(0)
        await flusher.close()
        if future.done():
            assert future.exception() is None
        await flusher.barrier()

    asyncio.run(main())


def watched_log(fs: WatchedFsyncFS) -> tuple[PartitionLog, GroupCommitFlusher]:
    """A log on `fs` and a started flusher; the fsyncs noted from now on are the rounds'."""
    plog = open_log(fs)
    fs.fsync_threads.clear()  # the new segment's, when the log was made
    flusher = GroupCommitFlusher()
    flusher.start()
    return plog, flusher


def test_a_followers_round_runs_on_the_loop_while_fsyncs_are_fast() -> None:
    async def main() -> list[str]:
        fs = WatchedFsyncFS()
        plog, flusher = watched_log(fs)
        # The first round has no measured fsync yet: the thread.
        await flusher.durable(plog, append(plog), follower=True)
        # A leader's round stays on the thread however fast the disk is.
        await flusher.durable(plog, append(plog))
        # A follower's round runs on the loop, and is durable when it is answered.
        offset = append(plog)
        await flusher.durable(plog, offset, follower=True)
        assert plog.flushed_offset > offset
        await flusher.close()
        return fs.fsync_threads

    threads = asyncio.run(main())
    assert threads == ["group-commit", "group-commit", threading.current_thread().name]


def test_a_slow_fsync_sends_the_followers_next_rounds_to_the_thread() -> None:
    async def main() -> list[str]:
        fs = WatchedFsyncFS()
        plog, flusher = watched_log(fs)
        await flusher.durable(plog, append(plog), follower=True)  # measured fast
        fs.fsync_seconds = 20 * ON_LOOP_BELOW_S  # the disk stalls
        await flusher.durable(plog, append(plog), follower=True)  # on the loop, once
        fs.fsync_seconds = 0.0
        await flusher.durable(plog, append(plog), follower=True)  # the thread again
        await flusher.close()
        return fs.fsync_threads

    threads = asyncio.run(main())
    assert threads == ["group-commit", threading.current_thread().name, "group-commit"]


def test_a_failed_fsync_on_the_loop_takes_the_log_offline() -> None:
    async def main() -> None:
        fs = FailingFsyncFS()
        plog = open_log(fs)
        flusher = GroupCommitFlusher()
        flusher.start()
        await flusher.durable(plog, append(plog), follower=True)
        fs.broken = True
        with pytest.raises(LogOffline):
            await asyncio.wait_for(flusher.durable(plog, append(plog), follower=True), 5)
        assert plog.offline is not None and flusher.fsync_failures == 1
        assert fs.failed_on == [threading.current_thread().name]  # the loop's, not the flusher's
        await flusher.close()

    asyncio.run(main())
