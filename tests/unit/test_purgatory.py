"""The fetch purgatory tells a waiter which partitions woke it (purgatory.py): a follower's
session fetch looks again only at those, so a key left out of `woken` would leave its
records unsent until the fetch times out."""

from __future__ import annotations

import asyncio

from onceflow.broker.purgatory import EVERYTHING, FetchPurgatory, PartitionKey

A, B, C = ("t", 0), ("t", 1), ("u", 0)


def test_woken_names_every_key_appended_before_the_waiter_runs() -> None:
    async def main() -> None:
        purgatory = FetchPurgatory()
        woken: set[PartitionKey] = set()
        waiter = purgatory.watch([A, B, C], woken)
        purgatory.notify(B)
        purgatory.notify(C)  # after the future is done, before the waiter looked
        assert waiter.done()
        assert woken == {B, C}
        purgatory.forget([A, B, C], waiter)
        assert len(purgatory) == 0

    asyncio.run(main())


def test_notify_all_marks_everything_and_a_waiter_without_a_set_still_wakes() -> None:
    async def main() -> None:
        purgatory = FetchPurgatory()
        woken: set[PartitionKey] = set()
        with_set = purgatory.watch([A], woken)
        without = purgatory.watch([A, B])
        purgatory.notify_all()
        assert with_set.done() and without.done()
        assert woken == {EVERYTHING}
        assert len(purgatory) == 0

    asyncio.run(main())


def test_forget_leaves_the_other_waiters_of_a_key() -> None:
    async def main() -> None:
        purgatory = FetchPurgatory()
        first, second = set[PartitionKey](), set[PartitionKey]()
        one = purgatory.watch([A, B], first)
        two = purgatory.watch([A], second)
        purgatory.forget([A, B], one)
        assert len(purgatory) == 1
        purgatory.notify(A)
        assert two.done() and not one.done()
        assert second == {A} and first == set()

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
