"""Delayed operations: a long-polling fetch waits here until an append wakes it.

Waiters are keyed by partition. When a partition's high watermark (or last stable offset)
moves, every fetch watching it is woken once and re-evaluates; nothing sleeps on a timer
except the fetch's own max_wait deadline. A waiter may bring a set in which the keys that
woke it are collected (`EVERYTHING` when all waiters were woken), so that a follower's
session fetch looks again at those partitions only, not at all of its session's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

PartitionKey = tuple[str, int]
#: In a waiter's `woken` set: woken by notify_all, anything may have changed.
EVERYTHING: PartitionKey = ("", -1)

# Per partition, each waiter's future and its `woken` set (None: the waiter keeps none).
_Waiters = dict[asyncio.Future[None], set[PartitionKey] | None]


class FetchPurgatory:
    def __init__(self) -> None:
        self._watchers: dict[PartitionKey, _Waiters] = {}
        #: Told of every key notified (EVERYTHING for notify_all), waiters or not: the
        #: followers' fetch sessions collect what changed between two of their requests.
        self.on_notify: Callable[[PartitionKey], None] | None = None

    def watch(
        self, keys: Iterable[PartitionKey], woken: set[PartitionKey] | None = None
    ) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for key in keys:
            self._watchers.setdefault(key, {})[fut] = woken
        return fut

    def notify(self, key: PartitionKey) -> None:
        if self.on_notify is not None:
            self.on_notify(key)
        waiters = self._watchers.pop(key, None)
        if waiters:
            _wake(waiters, key)

    def notify_all(self) -> None:
        """Wake every waiter (to re-evaluate what it asks for)."""
        if self.on_notify is not None:
            self.on_notify(EVERYTHING)
        watchers, self._watchers = self._watchers, {}
        for waiters in watchers.values():
            _wake(waiters, EVERYTHING)

    def forget(self, keys: Iterable[PartitionKey], fut: asyncio.Future[None]) -> None:
        for key in keys:
            waiters = self._watchers.get(key)
            if waiters is not None:
                waiters.pop(fut, None)
                if not waiters:
                    del self._watchers[key]

    def __len__(self) -> int:
        return sum(len(w) for w in self._watchers.values())


def _wake(waiters: _Waiters, key: PartitionKey) -> None:
    for fut, woken in waiters.items():
        if woken is not None:
            woken.add(key)  # also once done: appends before the waiter runs count too
        if not fut.done():
            fut.set_result(None)
