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

    Previous owners keep their partitions first; the rest go one by one to the eligible
    member with the fewest; then a partition moves from a member to an eligible one holding
    at least two fewer until none can. Each move lowers the sum of squared counts, so this
    ends, and it ends balanced for the subscriptions: no partition's owner has two more
    than another member that could take it.
    """
    owned: dict[str, set[TopicPartition]] = {m: set() for m in members}
    eligible = _eligible(members, topics)
    free: list[TopicPartition] = []
    for tp in _all_partitions(topics, members):
        keeper = next((m for m in eligible[tp.topic] if tp in members[m].previous), None)
        if keeper is None:
            free.append(tp)
        else:
            owned[keeper].add(tp)
    for tp in free:
        owned[min(eligible[tp.topic], key=lambda m: (len(owned[m]), m))].add(tp)
    _rebalance(owned, eligible, members)
    return {m: frozenset(p) for m, p in owned.items()}


def _rebalance(
    owned: dict[str, set[TopicPartition]],
    eligible: Mapping[str, list[str]],
    members: Mapping[str, MemberSpec],
) -> None:
    moved = True
    while moved:
        moved = False
        # From the most loaded member, a partition it did not have before goes first.
        for giver in sorted(owned, key=lambda m: (-len(owned[m]), m)):
            for tp in sorted(owned[giver], key=lambda p: (p in members[giver].previous, p)):
                taker = min(eligible[tp.topic], key=lambda m: (len(owned[m]), m))
                if len(owned[taker]) + 1 < len(owned[giver]):
                    owned[giver].remove(tp)
                    owned[taker].add(tp)
                    moved = True
                    break
            if moved:
                break


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
