"""Delayed operations: a long-polling fetch waits here until an append wakes it.

Waiters are keyed by partition. When a partition's high watermark (or last stable offset)
moves, every fetch watching it is woken once and re-evaluates; nothing sleeps on a timer
except the fetch's own max_wait deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

PartitionKey = tuple[str, int]


class FetchPurgatory:
    def __init__(self) -> None:
        self._watchers: dict[PartitionKey, list[asyncio.Future[None]]] = {}

    def watch(self, keys: Iterable[PartitionKey]) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for key in keys:
            self._watchers.setdefault(key, []).append(fut)
        return fut

    def notify(self, key: PartitionKey) -> None:
        waiters = self._watchers.pop(key, None)
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    def notify_all(self) -> None:
        """Wake every waiter (to re-evaluate what it asks for)."""
        watchers, self._watchers = self._watchers, {}
        for waiters in watchers.values():
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    def forget(self, keys: Iterable[PartitionKey], fut: asyncio.Future[None]) -> None:
        for key in keys:
            waiters = self._watchers.get(key)
            if waiters is None:
                continue
            waiters[:] = [w for w in waiters if w is not fut]
            if not waiters:
                del self._watchers[key]

    def __len__(self) -> int:
        return sum(len(w) for w in self._watchers.values())
