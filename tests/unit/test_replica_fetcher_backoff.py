"""A replica fetcher whose leader cannot be reached (down, or refusing this broker's TLS
or credentials) waits out its whole backoff, even while partitions are added.

A starting broker follows its partitions one at a time; when each woke the fetcher, a
broker with a wrong inter-broker password logged in (and failed) once per partition.
"""

from __future__ import annotations

import asyncio

from onceflow.clock import ManualClock
from onceflow.replication.fetcher import FetcherSettings, ReplicaFetcher
from onceflow.replication.partition import LeaderAndIsr, Partition
from onceflow.storage.fs import SimFileSystem
from onceflow.storage.partition_log import LogConfig, PartitionLog
from onceflow.storage.recovery import open_partition

LEADER, LOCAL = 1, 2


class _Host:
    def appended(self, plog: PartitionLog) -> None:
        pass

    async def durable(self, plog: PartitionLog, offset: int, follower: bool = False) -> None:
        pass


def _following(fs: SimFileSystem, index: int) -> Partition:
    clock = ManualClock(1_000_000)
    plog, _ = open_partition(fs, f"/data/t-{index}", "t", index, LogConfig(), clock, 0, False)
    partition = Partition(plog, LOCAL, clock)
    partition.make_follower(LeaderAndIsr(LEADER, 0, (LEADER, LOCAL), (LEADER, LOCAL), 0))
    return partition


def test_partitions_added_during_the_backoff_after_a_failure_do_not_retry_at_once() -> None:
    async def main() -> int:
        attempts = 0

        def refuse(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal attempts
            attempts += 1
            writer.close()  # as a leader refusing the handshake does, for the fetcher

        server = await asyncio.start_server(refuse, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        fetcher = ReplicaFetcher(
            LOCAL, LEADER, ("127.0.0.1", port), FetcherSettings(backoff_ms=60_000), _Host()
        )
        fs = SimFileSystem()
        try:
            fetcher.follow(_following(fs, 0))
            while attempts == 0:
                await asyncio.sleep(0.01)
            for index in range(1, 11):
                fetcher.follow(_following(fs, index))
                await asyncio.sleep(0.02)  # room for a retry, were one made
            return attempts
        finally:
            await fetcher.stop()
            server.close()
            await server.wait_closed()

    assert asyncio.run(main()) == 1
