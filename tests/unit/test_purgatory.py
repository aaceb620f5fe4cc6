"""The fetch purgatory wakes the fetches watching a partition and tells `on_notify` of
every notification (purgatory.py): a follower's session fetch looks again only at the
partitions it heard of, so a notification not passed on would leave their records unsent
until the fetch times out."""

from __future__ import annotations

import asyncio

from onceflow.broker.purgatory import EVERYTHING, FetchPurgatory, PartitionKey

A, B, C = ("t", 0), ("t", 1), ("u", 0)


def test_a_notification_wakes_the_waiters_of_its_key_once() -> None:
    async def main() -> None:
        purgatory = FetchPurgatory()
        waiter = purgatory.watch([A, B, C])
        other = purgatory.watch([C])
        purgatory.notify(B)
        purgatory.notify(C)  # after the future is done, before the waiter looked
        assert waiter.done() and other.done()
        purgatory.forget([A, B, C], waiter)
        purgatory.forget([C], other)
        assert len(purgatory) == 0

    asyncio.run(main())


def test_notify_all_wakes_every_waiter() -> None:
    async def main() -> None:
        purgatory = FetchPurgatory()
        one = purgatory.watch([A])
        two = purgatory.watch([A, B])
        purgatory.notify_all()
        assert one.done() and two.done()
        assert len(purgatory) == 0

    asyncio.run(main())


def test_forget_leaves_the_other_waiters_of_a_key() -> None:
    async def main() -> None:
        purgatory = FetchPurgatory()
        one = purgatory.watch([A, B])
        two = purgatory.watch([A])
        purgatory.forget([A, B], one)
        assert len(purgatory) == 1
        purgatory.notify(A)
        assert two.done() and not one.done()

    asyncio.run(main())


def test_on_notify_hears_every_notification_waiters_or_not() -> None:
    """The followers' sessions learn what changed between their requests, when no fetch
    of theirs waits: on_notify hears each key, and EVERYTHING for notify_all."""

    async def main() -> None:
        purgatory = FetchPurgatory()
        heard: list[PartitionKey] = []
        purgatory.on_notify = heard.append
        purgatory.notify(A)  # nobody waits
        waiter = purgatory.watch([B])
        purgatory.notify(B)
        purgatory.notify_all()
        assert waiter.done()
        assert heard == [A, B, EVERYTHING]

    asyncio.run(main())
