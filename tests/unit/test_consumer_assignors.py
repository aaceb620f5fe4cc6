"""The consumer protocol's server-side assignors: coverage, balance, stickiness, ranges."""

from __future__ import annotations

import random

import pytest

from onceflow.coordinator.group.assignors import ASSIGNORS, MemberSpec, range_, uniform
from onceflow.coordinator.group.offsets import TopicPartition as TP


def specs(subscriptions: dict[str, set[str]], previous: dict | None = None) -> dict:
    previous = previous or {}
    return {
        m: MemberSpec(frozenset(topics), frozenset(previous.get(m, ())))
        for m, topics in subscriptions.items()
    }


def covers_once(assignment: dict, members: dict, topics: dict[str, int]) -> None:
    """Every partition of a subscribed topic to exactly one of its subscribers."""
    seen: dict[TP, str] = {}
    for member, partitions in assignment.items():
        for tp in partitions:
            assert tp not in seen, f"{tp} given to {seen[tp]} and {member}"
            assert tp.topic in members[member].subscribed
            seen[tp] = member
    subscribed = set().union(*(m.subscribed for m in members.values()))
    expected = {TP(t, p) for t in subscribed if t in topics for p in range(topics[t])}
    assert set(seen) == expected


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
@pytest.mark.parametrize("seed", range(20))
def test_every_partition_goes_to_exactly_one_subscriber(name: str, seed: int) -> None:
    rng = random.Random(seed)
    topics = {f"t{i}": rng.randint(1, 7) for i in range(rng.randint(1, 4))}
    topics["unsubscribed"] = 3
    names = [t for t in topics if t != "unsubscribed"] + ["missing"]
    members = specs(
        {
            f"m{i}": set(rng.sample(names, rng.randint(1, len(names))))
            for i in range(rng.randint(1, 6))
        }
    )
    assignment = ASSIGNORS[name](members, topics)
    assert set(assignment) == set(members)
    covers_once(assignment, members, topics)


@pytest.mark.parametrize("seed", range(20))
def test_uniform_balances_any_subscriptions(seed: int) -> None:
    """No member has two more partitions than another member that could take one of them."""
    rng = random.Random(seed)
    topics = {f"t{i}": rng.randint(1, 9) for i in range(3)}
    members = specs(
        {
            f"m{i}": set(rng.sample(sorted(topics), rng.randint(1, 3)))
            for i in range(rng.randint(2, 6))
        }
    )
    assignment = uniform(members, topics)
    for partitions in assignment.values():
        for tp in partitions:
            for other, spec in members.items():
                if tp.topic in spec.subscribed:
                    assert len(assignment[other]) >= len(partitions) - 1


def test_uniform_with_equal_subscriptions_differs_by_at_most_one() -> None:
    topics = {"a": 7, "b": 3}
    members = specs({f"m{i}": {"a", "b"} for i in range(3)})
    sizes = sorted(len(p) for p in uniform(members, topics).values())
    assert sizes == [3, 3, 4]


def test_uniform_moves_only_what_a_new_member_needs() -> None:
    """Stickiness: a joining member takes its share; the others keep the rest of theirs."""
    topics = {"t": 12}
    first = uniform(specs({"a": {"t"}, "b": {"t"}}), topics)
    second = uniform(specs({"a": {"t"}, "b": {"t"}, "c": {"t"}}, first), topics)
    assert all(len(p) == 4 for p in second.values())
    assert second["a"] <= first["a"] and second["b"] <= first["b"]
    # And when it leaves again, only its partitions move.
    third = uniform(specs({"a": {"t"}, "b": {"t"}}, second), topics)
    assert third["a"] >= second["a"] and third["b"] >= second["b"]


def test_uniform_keeps_a_balanced_assignment_as_it_is() -> None:
    topics = {"t": 6, "u": 2}
    members = specs({"a": {"t", "u"}, "b": {"t", "u"}})
    first = uniform(members, topics)
    assert uniform(specs({"a": {"t", "u"}, "b": {"t", "u"}}, first), topics) == first


def test_range_gives_contiguous_co_partitioned_ranges() -> None:
    topics = {"orders": 5, "payments": 5}
    members = specs({"b": {"orders", "payments"}, "a": {"orders", "payments"}})
    assignment = range_(members, topics)
    # Member-id order, the first one the larger range; the same numbers in both topics.
    assert assignment["a"] == {TP(t, p) for t in topics for p in (0, 1, 2)}
    assert assignment["b"] == {TP(t, p) for t in topics for p in (3, 4)}


def test_range_assigns_each_topic_among_its_own_subscribers() -> None:
    topics = {"x": 4, "y": 2}
    assignment = range_(specs({"a": {"x"}, "b": {"x", "y"}}), topics)
    assert assignment["a"] == {TP("x", 0), TP("x", 1)}
    assert assignment["b"] == {TP("x", 2), TP("x", 3), TP("y", 0), TP("y", 1)}


def test_more_members_than_partitions_leaves_some_without() -> None:
    topics = {"t": 2}
    members = specs({f"m{i}": {"t"} for i in range(4)})
    for assignor in (uniform, range_):
        sizes = sorted(len(p) for p in assignor(members, topics).values())
        assert sizes == [0, 0, 1, 1]


def test_uniform_spreads_what_one_member_held_and_moves_nothing_else() -> None:
    topics = {"t": 40}
    alone = uniform(specs({"a": {"t"}}), topics)
    members = specs({m: {"t"} for m in "abcd"}, alone)
    spread = uniform(members, topics)
    assert sorted(len(p) for p in spread.values()) == [10, 10, 10, 10]
    assert spread["a"] <= alone["a"]


@pytest.mark.parametrize("seed", range(10))
def test_uniform_gives_a_joining_member_only_its_share(seed: int) -> None:
    """With equal subscriptions a join moves exactly the partitions the new member gets."""
    rng = random.Random(seed)
    topics = {f"t{i}": rng.randint(1, 12) for i in range(3)}
    names = {f"m{i}" for i in range(rng.randint(1, 7))}
    before = uniform(specs({m: set(topics) for m in names}), topics)
    after = uniform(specs({m: set(topics) for m in names | {"new"}}, before), topics)
    moved = sum(len(before[m] - after[m]) for m in names)
    assert moved == len(after["new"])
