"""Server-side assignors of consumer-protocol groups (KIP-848): `uniform` and `range`.

An assignor maps the group's members to a target assignment: each partition of a topic
some member subscribes to goes to exactly one member subscribed to that topic. The
coordinator then moves each member towards its target (reconcile.py). Both are pure
functions of the members' subscriptions, their previous target and the topics' sizes.

- `uniform` (Kafka's default) balances partition counts, members differing by at most one
  partition among those that could take it, and keeps each member's previous partitions
  where balance allows, so a membership change moves as few partitions as possible.
- `range` gives each member, topic by topic, a contiguous range of partitions (members in
  member-id order, the first ones one more when it does not divide), so members subscribed
  to the same topics get the same partition numbers of each: co-partitioned joins work.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from onceflow.coordinator.group.offsets import TopicPartition

Assignment = dict[str, frozenset[TopicPartition]]


@dataclass(frozen=True, slots=True)
class MemberSpec:
    subscribed: frozenset[str]
    previous: frozenset[TopicPartition] = frozenset()


Assignor = Callable[[Mapping[str, MemberSpec], Mapping[str, int]], Assignment]


def uniform(members: Mapping[str, MemberSpec], topics: Mapping[str, int]) -> Assignment:
    """Balanced and sticky, for any mix of subscriptions.

    Previous owners keep their partitions first. When every member subscribes to the same
    topics (the usual case) each member's quota is the partition count divided among them,
    the larger quotas going to those holding the most, and only what exceeds a quota moves:
    the fewest moves any balanced assignment needs. Otherwise the rest go one by one to the
    eligible member with the fewest, then partitions move from a member to an eligible one
    holding at least two fewer until none can (each move lowers the sum of squared counts,
    so this ends): balanced for the subscriptions, no partition's owner has two more than
    another member that could take it, though not always with the fewest moves. About
    O(P log M) for P partitions and M members, plus O(T x M + P) per balancing pass.
    """
    owned: dict[str, set[TopicPartition]] = {m: set() for m in members}
    eligible = _eligible(members, topics)
    previous = {tp: m for m, spec in members.items() for tp in spec.previous}
    free: dict[str, list[TopicPartition]] = {}
    for tp in _all_partitions(topics, members):
        keeper = previous.get(tp)
        if keeper is not None and tp.topic in members[keeper].subscribed:
            owned[keeper].add(tp)
        else:
            free.setdefault(tp.topic, []).append(tp)
    if all(len(candidates) == len(members) for candidates in eligible.values()):
        _fill_quotas(owned, [tp for partitions in free.values() for tp in partitions])
        return {m: frozenset(p) for m, p in owned.items()}
    for topic, partitions in free.items():
        _give_to_least_loaded(partitions, eligible[topic], owned)
    while _balancing_pass(owned, eligible, members):
        pass
    return {m: frozenset(p) for m, p in owned.items()}


def _fill_quotas(owned: dict[str, set[TopicPartition]], free: list[TopicPartition]) -> None:
    """Every member may take every partition: quotas of P // M, one more for the P % M
    members holding the most (ties: member id); excess beyond a quota moves to those
    below theirs."""
    if not owned:
        return
    total = len(free) + sum(len(p) for p in owned.values())
    base, extra = divmod(total, len(owned))
    order = sorted(owned, key=lambda m: (-len(owned[m]), m))
    quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(order)}
    for member in order:
        excess = len(owned[member]) - quota[member]
        if excess > 0:
            given_up = sorted(owned[member])[-excess:]
            owned[member].difference_update(given_up)
            free.extend(given_up)
    free.sort()
    for member in order:
        missing = quota[member] - len(owned[member])
        if missing > 0:
            owned[member].update(free[:missing])
            del free[:missing]


def _give_to_least_loaded(
    partitions: list[TopicPartition], candidates: list[str], owned: dict[str, set[TopicPartition]]
) -> None:
    """Each partition to the candidate holding the fewest (ties: member id), by a heap
    whose stale entries (a count that grew since) are pushed back with the true count."""
    heap = [(len(owned[m]), m) for m in candidates]
    heapq.heapify(heap)
    for tp in partitions:
        while True:
            count, member = heapq.heappop(heap)
            if count == len(owned[member]):
                break
            heapq.heappush(heap, (len(owned[member]), member))
        owned[member].add(tp)
        heapq.heappush(heap, (count + 1, member))


def _balancing_pass(
    owned: dict[str, set[TopicPartition]],
    eligible: Mapping[str, list[str]],
    members: Mapping[str, MemberSpec],
) -> bool:
    """Move partitions from members to eligible ones with at least two fewer; True if any
    moved. Givers go from the most loaded down, each giving while it holds at least as many
    as the next one, so partitions leave the most loaded first and are not passed on
    between members that both had enough. The fewest per topic is computed once a pass and
    checked again before a move."""
    fewest = {t: min(len(owned[m]) for m in candidates) for t, candidates in eligible.items()}
    moved = False
    givers = sorted(owned, key=lambda m: (-len(owned[m]), m))
    for giver, after in zip(givers, [*givers[1:], None], strict=True):
        # Partitions it did not have before go first.
        for tp in sorted(owned[giver], key=lambda p: (p in members[giver].previous, p)):
            if after is not None and len(owned[giver]) < len(owned[after]):
                break
            if fewest[tp.topic] + 1 >= len(owned[giver]):
                continue
            taker = min(eligible[tp.topic], key=lambda m: (len(owned[m]), m))
            fewest[tp.topic] = len(owned[taker])
            if len(owned[taker]) + 1 < len(owned[giver]):
                owned[giver].remove(tp)
                owned[taker].add(tp)
                moved = True
    return moved


def range_(members: Mapping[str, MemberSpec], topics: Mapping[str, int]) -> Assignment:
    """Per topic, contiguous ranges to its subscribers in member-id order."""
    owned: dict[str, set[TopicPartition]] = {m: set() for m in members}
    for topic, subscribers in _eligible(members, topics).items():
        count = topics[topic]
        share, extra = divmod(count, len(subscribers))
        start = 0
        for i, member in enumerate(subscribers):
            size = share + (1 if i < extra else 0)
            owned[member].update(TopicPartition(topic, p) for p in range(start, start + size))
            start += size
    return {m: frozenset(p) for m, p in owned.items()}


def _eligible(members: Mapping[str, MemberSpec], topics: Mapping[str, int]) -> dict[str, list[str]]:
    """Each existing subscribed topic's subscribers, in member-id order."""
    eligible: dict[str, list[str]] = {}
    for member in sorted(members):
        for topic in members[member].subscribed:
            if topics.get(topic, 0) > 0:
                eligible.setdefault(topic, []).append(member)
    return dict(sorted(eligible.items()))


def _all_partitions(
    topics: Mapping[str, int], members: Mapping[str, MemberSpec]
) -> list[TopicPartition]:
    subscribed = set().union(*(m.subscribed for m in members.values())) if members else set()
    return [
        TopicPartition(topic, p)
        for topic in sorted(subscribed)
        if topic in topics
        for p in range(topics[topic])
    ]


ASSIGNORS: dict[str, Assignor] = {"uniform": uniform, "range": range_}
