"""AlterPartitionReassignments on a cluster: any broker writes the request into the topics'
assignment znodes (compare-and-set, `reassignment.alter` deciding on the newest content),
then waits until its own cache shows what it wrote. The controller does the rest."""

from __future__ import annotations

import asyncio
from collections import defaultdict

from onceflow.cluster.link import ClusterLink
from onceflow.cluster.reassignment import AlterResult, alter
from onceflow.cluster.zk_store import MetadataStoreError, NoSuchTopic
from onceflow.cluster.znodes import TopicAssignment
from onceflow.errors import ErrorCode

WRITE_WAIT_S = 10.0
_UNKNOWN: AlterResult = (ErrorCode.unknown_topic_or_partition, "The partition does not exist.")


async def alter_reassignments(
    link: ClusterLink,
    requested: dict[tuple[str, int], tuple[int, ...] | None],
    allow_rf_change: bool,
) -> dict[tuple[str, int], AlterResult]:
    by_topic: dict[str, dict[int, tuple[int, ...] | None]] = defaultdict(dict)
    for (topic, partition), target in requested.items():
        by_topic[topic][partition] = target
    results: dict[tuple[str, int], AlterResult] = {}
    written: dict[str, int] = {}
    for topic, partitions in sorted(by_topic.items()):
        if topic not in link.cache.topics:
            results.update({(topic, p): _UNKNOWN for p in partitions})
            continue
        answers: dict[int, AlterResult] = {}

        alive = list(link.cache.brokers)

        def change(
            current: TopicAssignment,
            wanted: dict[int, tuple[int, ...] | None] = partitions,
            out: dict[int, AlterResult] = answers,
            alive: list[int] = alive,
        ) -> TopicAssignment:
            updated, decided = alter(current, wanted, alive, allow_rf_change)
            out.clear()
            out.update(decided)
            return updated

        try:
            _, version = await asyncio.to_thread(link.store.alter_assignment, topic, change)
        except NoSuchTopic:
            results.update({(topic, p): _UNKNOWN for p in partitions})
            continue
        except (MetadataStoreError, Exception) as exc:  # ZooKeeper away
            failed: AlterResult = (ErrorCode.unknown_server_error, f"not written: {exc!r}")
            results.update({(topic, p): failed for p in partitions})
            continue
        results.update({(topic, p): answer for p, answer in answers.items()})
        written[topic] = version

    def seen() -> bool:
        cache = link.cache.topics
        return all(t not in cache or cache[t].assignment_version >= v for t, v in written.items())

    if written:
        await link.wait_for(seen, WRITE_WAIT_S)
    return results
