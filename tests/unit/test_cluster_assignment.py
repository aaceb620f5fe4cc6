"""Rack-aware replica assignment: Kafka's examples and properties, as tables."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from onceflow.cluster.assignment import MIXED_RACKS, assign_replicas, rack_alternated
from onceflow.errors import ErrorCode, KafkaError

SIX = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}

# (racks, brokers listed one rack at a time in turn)
ALTERNATED = [
    (SIX, [0, 3, 1, 5, 4, 2]),
    ({1: "a", 2: "a", 3: "b"}, [1, 3, 2]),
    ({1: "c", 2: "b", 3: "a"}, [3, 2, 1]),
    ({1: "a", 2: "a", 3: "a", 4: "b"}, [1, 4, 2, 3]),
]


@pytest.mark.parametrize(("racks", "expected"), ALTERNATED)
def test_rack_alternated_list(racks: dict[int, str], expected: list[int]) -> None:
    assert rack_alternated(racks) == expected


# (partitions, rf, racks, start, expected assignment)
PLACED = [
    (
        7,
        3,
        SIX,
        0,
        {
            0: [0, 3, 1],
            1: [3, 1, 5],
            2: [1, 5, 4],
            3: [5, 4, 2],
            4: [4, 2, 0],
            5: [2, 0, 3],
            6: [0, 4, 2],
        },
    ),
    (3, 3, {1: "a", 2: "b", 3: "c"}, 0, {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}),
    # Two racks for three replicas: the third replica shares a rack, never a broker.
    (2, 3, {1: "a", 2: "a", 3: "b", 4: "b"}, 0, {0: [1, 3, 2], 1: [3, 2, 4]}),
]


@pytest.mark.parametrize(("partitions", "rf", "racks", "start", "expected"), PLACED)
def test_placements(
    partitions: int, rf: int, racks: dict[int, str], start: int, expected: dict[int, list[int]]
) -> None:
    assert assign_replicas(partitions, rf, list(racks), start=start, racks=racks) == expected


# (brokers per rack, racks, rf, partitions)
SPREADS = [(1, 3, 3, 12), (2, 3, 3, 30), (3, 3, 2, 27), (2, 4, 3, 40), (2, 5, 3, 50)]


@pytest.mark.parametrize(("per_rack", "rack_count", "rf", "partitions"), SPREADS)
def test_replicas_on_distinct_racks_and_leaders_even(
    per_rack: int, rack_count: int, rf: int, partitions: int
) -> None:
    racks = {r * per_rack + i: f"r{r}" for r in range(rack_count) for i in range(per_rack)}
    for seed in range(5):
        placed = assign_replicas(partitions, rf, list(racks), rng=random.Random(seed), racks=racks)
        for replicas in placed.values():
            assert len({racks[b] for b in replicas}) == rf  # racks >= rf: one each
        leaders = Counter(r[0] for r in placed.values())
        assert set(leaders) == set(racks)
        assert max(leaders.values()) - min(leaders.values()) <= 1


def test_new_partitions_continue_rack_aware() -> None:
    racks = {1: "a", 2: "b", 3: "c"}
    whole = assign_replicas(6, 3, list(racks), start=0, racks=racks)
    more = assign_replicas(3, 3, list(racks), first_partition=3, start=0, racks=racks)
    assert more == {p: whole[p] for p in (3, 4, 5)}


def test_no_racks_is_the_round_robin() -> None:
    racks: dict[int, str | None] = {1: None, 2: None, 3: None}
    assert assign_replicas(6, 2, [1, 2, 3], start=1, racks=racks) == assign_replicas(
        6, 2, [1, 2, 3], start=1
    )


def test_some_brokers_without_a_rack_are_refused() -> None:
    with pytest.raises(KafkaError) as caught:
        assign_replicas(1, 2, [1, 2, 3], racks={1: "a", 2: "b", 3: None})
    assert (caught.value.code, caught.value.message) == (
        ErrorCode.unknown_server_error,
        MIXED_RACKS,
    )
