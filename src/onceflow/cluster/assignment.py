"""Replica assignment: Kafka's rack-unaware round robin.

The first replica of partition p goes to broker (start + p) mod n; the followers follow it
at a shift that grows by one every n partitions, so that leaders and followers both spread
evenly and no two partitions of a small topic share the same replica list by accident.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from onceflow.errors import ErrorCode, KafkaError


def assign_replicas(
    partitions: int,
    replication_factor: int,
    brokers: Sequence[int],
    first_partition: int = 0,
    start: int | None = None,
    rng: random.Random | None = None,
) -> dict[int, list[int]]:
    """Replica lists of partitions first_partition .. first_partition + partitions - 1.

    `start` fixes where the round robin begins (random otherwise, as in Kafka).
    """
    ids = sorted(brokers)
    count = len(ids)
    if replication_factor <= 0:
        raise KafkaError(ErrorCode.invalid_replication_factor, "replication factor must be > 0")
    if replication_factor > count:
        raise KafkaError(
            ErrorCode.invalid_replication_factor,
            f"replication factor {replication_factor} is larger than the {count} available brokers",
        )
    if partitions <= 0:
        raise KafkaError(ErrorCode.invalid_partitions, "the partition count must be positive")
    pick = rng or random.Random()
    first_index = start if start is not None else pick.randrange(count)
    shift = start if start is not None else pick.randrange(count)
    assignment: dict[int, list[int]] = {}
    for partition in range(first_partition, first_partition + partitions):
        if partition > 0 and partition % count == 0:
            shift += 1
        leader_index = (partition + first_index) % count
        replicas = [ids[leader_index]]
        for j in range(replication_factor - 1):
            offset = 1 + (shift + j) % (count - 1)
            replicas.append(ids[(leader_index + offset) % count])
        assignment[partition] = replicas
    return assignment
