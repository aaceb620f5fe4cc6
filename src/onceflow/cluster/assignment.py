"""Replica assignment as Kafka's ZooKeeper-era AdminUtils places new partitions.

Rack-unaware (no broker has `broker.rack`): the first replica of partition p goes to broker
(start + p) mod n; the followers follow it at a shift that grows by one every n partitions,
so that leaders and followers both spread evenly and no two partitions of a small topic
share the same replica list by accident.

Rack-aware (every broker has a rack): the same walk over the brokers listed rack by rack in
turn (the first broker of each rack, then the second of each, ...), so that consecutive
brokers sit on different racks; a follower is taken only if its rack holds no replica of
the partition yet, until every rack does, and the shift steps a whole round of racks. With
at least as many racks as replicas, each partition's replicas sit on distinct racks.
Some brokers with a rack and others without is refused, as Kafka's AdminOperationException
(an UNKNOWN_SERVER_ERROR to the client).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from onceflow.errors import ErrorCode, KafkaError

MIXED_RACKS = "Not all brokers have rack information for replica rack aware assignment."


def assign_replicas(
    partitions: int,
    replication_factor: int,
    brokers: Sequence[int],
    first_partition: int = 0,
    start: int | None = None,
    rng: random.Random | None = None,
    racks: Mapping[int, str | None] | None = None,
) -> dict[int, list[int]]:
    """Replica lists of partitions first_partition .. first_partition + partitions - 1.

    `start` fixes where the walk begins and the followers' first shift (random otherwise,
    as in Kafka); `racks` gives each broker's `broker.rack` (None: no rack).
    """
    count = len(brokers)
    if replication_factor <= 0:
        raise KafkaError(ErrorCode.invalid_replication_factor, "replication factor must be > 0")
    if replication_factor > count:
        raise KafkaError(
            ErrorCode.invalid_replication_factor,
            f"replication factor {replication_factor} is larger than the {count} available brokers",
        )
    if partitions <= 0:
        raise KafkaError(ErrorCode.invalid_partitions, "the partition count must be positive")
    rack_of = {b: (racks or {}).get(b) for b in brokers}
    if all(rack is None for rack in rack_of.values()):
        ordered, rack_count = sorted(brokers), 1
        rack_of = {b: str(b) for b in brokers}  # every broker its own rack: no constraint
    elif any(rack is None for rack in rack_of.values()):
        raise KafkaError(ErrorCode.unknown_server_error, MIXED_RACKS)
    else:
        ordered = rack_alternated(rack_of)
        rack_count = len(set(rack_of.values()))
    pick = rng or random.Random()
    first_index = start if start is not None else pick.randrange(count)
    shift = start if start is not None else pick.randrange(count)
    assignment: dict[int, list[int]] = {}
    for partition in range(first_partition, first_partition + partitions):
        if partition > 0 and partition % count == 0:
            shift += 1
        leader_index = (partition + first_index) % count
        assignment[partition] = _replicas(
            ordered, rack_of, leader_index, shift * rack_count, replication_factor
        )
    return assignment


def rack_alternated(rack_of: Mapping[int, str | None]) -> list[int]:
    """The brokers taken one per rack in turn, racks and each rack's brokers by name and id."""
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(rack_of):
        by_rack.setdefault(str(rack_of[broker]), []).append(broker)
    columns = [by_rack[rack] for rack in sorted(by_rack)]
    depth = max(len(c) for c in columns)
    return [c[i] for i in range(depth) for c in columns if i < len(c)]


def _replicas(
    ordered: list[int],
    rack_of: Mapping[int, str | None],
    leader_index: int,
    shift: int,
    replication_factor: int,
) -> list[int]:
    """One partition's replicas: its leader, then followers at growing shifts, skipping a
    broker whose rack (or itself) already holds a replica while another rack (broker) is
    still free."""
    count = len(ordered)
    all_racks = len(set(rack_of.values()))
    leader = ordered[leader_index]
    replicas, used_racks = [leader], {rack_of[leader]}
    k = 0
    while len(replicas) < replication_factor:
        offset = 1 + (shift + k) % (count - 1)
        broker = ordered[(leader_index + offset) % count]
        k += 1
        rack_free = rack_of[broker] not in used_racks or len(used_racks) == all_racks
        broker_free = broker not in replicas or len(replicas) == count
        if rack_free and broker_free:
            replicas.append(broker)
            used_racks.add(rack_of[broker])
    return replicas
