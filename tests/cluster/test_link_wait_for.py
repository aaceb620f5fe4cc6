"""ClusterLink.wait_for: code on the event loop awaits a change of the cluster's metadata
(a leader elected, configs applied, a topic gone) instead of polling the cache. The changes
come as ZooKeeper's watches deliver them: posted from another thread (kazoo's) and applied
on the loop."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, cast

import pytest

from onceflow.cluster.link import ClusterLink, MetadataChange
from onceflow.cluster.metadata import TopicMetadata, VersionedState
from onceflow.cluster.znodes import NO_LEADER, BrokerRegistration, PartitionState

BOUND_S = 30.0  # a bound on a hung test, never a measured time


def new_link() -> ClusterLink:
    return ClusterLink(cast(Any, None), cast(Any, None), asyncio.get_running_loop())


def from_kazoo_thread(link: ClusterLink, *changes: tuple[str, int, int]) -> None:
    """What the watches do: on another thread, post each (topic, partition, leader)."""

    def post() -> None:
        for topic, partition, leader in changes:
            state = VersionedState(PartitionState(leader, 0, (1, 2), 0), 0)
            link._post(lambda t=topic, p=partition, s=state: link._set_state(t, p, s))

    thread = threading.Thread(target=post)
    thread.start()
    thread.join()


def led(link: ClusterLink, topic: str, partitions: int) -> bool:
    return all(link.cache.leader_of(topic, p) != NO_LEADER for p in range(partitions))


def with_brokers(link: ClusterLink) -> None:
    for b in (1, 2):
        link.cache.brokers[b] = BrokerRegistration(b, "127.0.0.1", 9000 + b, 0)
    link.cache.topics["t"] = TopicMetadata("t", "id", {0: (1, 2), 1: (2, 1)}, {})


def test_it_returns_once_the_changes_make_the_predicate_true() -> None:
    async def go() -> None:
        link = new_link()
        with_brokers(link)
        waiting = asyncio.create_task(link.wait_for(lambda: led(link, "t", 2), BOUND_S))
        await asyncio.sleep(0)
        from_kazoo_thread(link, ("t", 0, 1))  # one of two: not yet
        await asyncio.sleep(0.05)
        assert not waiting.done()
        from_kazoo_thread(link, ("t", 1, 2))
        assert await waiting is True
        assert link.listeners == []

    asyncio.run(go())


def test_a_predicate_already_true_returns_at_once() -> None:
    async def go() -> None:
        link = new_link()
        assert await link.wait_for(lambda: True, BOUND_S) is True
        assert link.listeners == []

    asyncio.run(go())


def test_no_change_that_satisfies_it_is_a_timeout() -> None:
    async def go() -> None:
        link = new_link()
        with_brokers(link)
        waiting = asyncio.create_task(link.wait_for(lambda: led(link, "t", 2), 0.3))
        await asyncio.sleep(0)
        from_kazoo_thread(link, ("t", 0, 1), ("t", 1, 3))  # broker 3 is not alive
        assert await waiting is False
        assert link.listeners == []

    asyncio.run(go())


def test_it_sees_what_earlier_listeners_did_in_reaction() -> None:
    """The replica manager and the controller are listeners registered first; a wait reads
    their state after they have handled the change."""

    async def go() -> None:
        link = new_link()
        with_brokers(link)
        roles: dict[tuple[str, int], str] = {}

        def replica_manager(change: MetadataChange) -> None:
            if change.kind == "partition" and link.cache.leader_of(change.topic, 0) == 1:
                roles[(change.topic, change.partition)] = "leader"

        link.listeners.append(replica_manager)
        waiting = asyncio.create_task(link.wait_for(lambda: ("t", 0) in roles, BOUND_S))
        await asyncio.sleep(0)
        from_kazoo_thread(link, ("t", 0, 1))
        assert await waiting is True
        assert link.listeners == [replica_manager]

    asyncio.run(go())


def test_an_error_of_the_predicate_is_raised_to_the_waiter() -> None:
    async def go() -> None:
        link = new_link()
        with_brokers(link)

        def predicate() -> bool:
            if ("t", 0) in link.cache.states:
                raise LookupError("no such thing")
            return False

        waiting = asyncio.create_task(link.wait_for(predicate, BOUND_S))
        await asyncio.sleep(0)
        from_kazoo_thread(link, ("t", 0, 1))
        with pytest.raises(LookupError, match="no such thing"):
            await waiting
        assert link.listeners == []

    asyncio.run(go())


def test_a_cancelled_wait_stops_listening() -> None:
    async def go() -> None:
        link = new_link()
        waiting = asyncio.create_task(link.wait_for(lambda: False, BOUND_S))
        await asyncio.sleep(0)
        assert len(link.listeners) == 1
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert link.listeners == []
        from_kazoo_thread(link, ("t", 0, 1))  # nobody left to tell
        await asyncio.sleep(0.05)

    asyncio.run(go())
