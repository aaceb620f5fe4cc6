"""Delayed operations: a long-polling fetch waits here until an append wakes it.

Waiters are keyed by partition. When a partition's high watermark (or last stable offset)
moves, every fetch watching it is woken once and re-evaluates; nothing sleeps on a timer
except the fetch's own max_wait deadline. Every notification is also told to `on_notify`,
waiters or not (`EVERYTHING` when all waiters were woken): the followers' fetch sessions
collect there the partitions that changed, so a session's pass looks again at those only,
not at all of its session's (fetch_sessions.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

PartitionKey = tuple[str, int]
#: Told to on_notify by notify_all: anything may have changed.
EVERYTHING: PartitionKey = ("", -1)


class FetchPurgatory:
    def __init__(self) -> None:
        self._watchers: dict[PartitionKey, set[asyncio.Future[None]]] = {}
        self.on_notify: Callable[[PartitionKey], None] | None = None

    def watch(self, keys: Iterable[PartitionKey]) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for key in keys:
            self._watchers.setdefault(key, set()).add(fut)
        return fut

    def notify(self, key: PartitionKey) -> None:
        if self.on_notify is not None:
            self.on_notify(key)
        waiters = self._watchers.pop(key, None)
        if waiters:
            _wake(waiters)

    def notify_all(self) -> None:
        """Wake every waiter (to re-evaluate what it asks for)."""
        if self.on_notify is not None:
            self.on_notify(EVERYTHING)
        watchers, self._watchers = self._watchers, {}
        for waiters in watchers.values():
            _wake(waiters)

    def forget(self, keys: Iterable[PartitionKey], fut: asyncio.Future[None]) -> None:
        for key in keys:
            waiters = self._watchers.get(key)
            if waiters is not None:
                waiters.discard(fut)
                if not waiters:
                    del self._watchers[key]

    def __len__(self) -> int:
        return sum(len(w) for w in self._watchers.values())


def _wake(waiters: set[asyncio.Future[None]]) -> None:
    for fut in waiters:
        if not fut.done():
            fut.set_result(None)
