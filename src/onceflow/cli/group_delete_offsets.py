"""`onceflow groups --delete-offsets --group G --topic T[:P,...]`: OffsetDelete, as Kafka's
kafka-consumer-groups.sh does it, with its messages.

confluent-kafka has no OffsetDelete, so this speaks the protocol through Onceflow's own client:
FindCoordinator for the group, then OffsetDelete to the coordinator, again while it answers
NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS. Kafka deletes a
partition's offset unless the group is active and subscribed to its topic
(GROUP_SUBSCRIBED_TO_TOPIC); a group of another protocol must be empty (NON_EMPTY_GROUP).
"""

from __future__ import annotations

import sys
from typing import Any

from onceflow.cli.group_reset import Tp, parse_topic_arg
from onceflow.client.cluster import Cluster
from onceflow.client.errors import error_name
from onceflow.client.retry import retrying
from onceflow.client.wire import request_entity
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import build, request_type

__all__ = ["delete_offsets", "run_delete_offsets"]

#: Kafka's line for each top-level outcome ({} is the group).
_OUTCOME = {
    ErrorCode.invalid_group_id: "Error: '{}' is not valid.",
    ErrorCode.group_id_not_found: "Error: '{}' does not exist.",
    ErrorCode.group_authorization_failed: "Error: Access to '{}' is not authorized.",
    ErrorCode.non_empty_group: (
        "Error: Deleting offsets of a consumer group '{}' is forbidden if the group is not empty."
    ),
}
#: Answers from a broker that is not (yet) the group's coordinator: ask again.
_NOT_COORDINATING = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress})
_PARTITION_LEVEL = frozenset(
    {
        ErrorCode.group_subscribed_to_topic,
        ErrorCode.topic_authorization_failed,
        ErrorCode.unknown_topic_or_partition,
    }
)


def _partitions(cluster: Cluster, topic_args: list[str]) -> tuple[list[Tp], dict[Tp, int]]:
    """The partitions named (whole topics from the metadata), and the unknown topics'
    errors keyed (topic, -1) as Kafka's tool keys them."""
    named = [parse_topic_arg(text) for text in topic_args]
    whole = sorted({topic for topic, partitions in named if partitions is None})
    metadata = cluster.metadata(whole) if whole else None
    chosen: set[Tp] = set()
    errors: dict[Tp, int] = {}
    for topic, partitions in named:
        if partitions is not None:
            chosen.update((topic, p) for p in partitions)
        elif metadata is not None and topic in metadata.leaders:
            chosen.update((topic, p) for p in metadata.leaders[topic])
        elif metadata is not None:
            errors[(topic, -1)] = metadata.topic_errors.get(
                topic, ErrorCode.unknown_topic_or_partition
            )
    return sorted(chosen), errors


def delete_offsets(
    cluster: Cluster, group: str, topic_args: list[str]
) -> tuple[int, dict[Tp, int]]:
    """OffsetDelete: the top-level error (or the first partition's, as Kafka's Admin
    reports it) and each partition's error code."""
    partitions, results = _partitions(cluster, topic_args)
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    api = ApiKey.OFFSET_DELETE

    def attempt() -> Any:
        _, connection = cluster.group_coordinator(group)
        version = connection.version_for(api)
        topics = tuple(
            request_entity(
                api,
                version,
                "OffsetDeleteRequestTopic",
                name=topic,
                partitions=tuple(
                    request_entity(api, version, "OffsetDeleteRequestPartition", partition_index=p)
                    for p in ps
                ),
            )
            for topic, ps in by_topic.items()
        )
        request = build(request_type(api, version), group_id=group, topics=topics)
        return connection.call_at(api, version, request)

    response = retrying(attempt, lambda r: r.error_code in _NOT_COORDINATING, cluster.timeout_s)
    top = int(response.error_code)
    for topic in response.topics:
        for partition in topic.partitions:
            results[(topic.name, int(partition.partition_index))] = int(partition.error_code)
    if top == ErrorCode.none:
        top = next((code for code in results.values() if code != ErrorCode.none), top)
    return top, results


def run_delete_offsets(cluster: Cluster, group: str, topic_args: list[str]) -> int:
    """Kafka's report: the outcome, then each partition's status."""
    top, results = delete_offsets(cluster, group, topic_args)
    if top == ErrorCode.none:
        print(
            f"Request succeed for deleting offsets with topic {', '.join(topic_args)} group {group}"
        )
    elif top in _OUTCOME:
        print(_OUTCOME[ErrorCode(top)].format(group), file=sys.stderr)
    elif top in _PARTITION_LEVEL:
        print(
            "Error: Encounter some partition level error, see the follow-up details:",
            file=sys.stderr,
        )
    else:
        print(f"Error: Encounter some unknown error: {error_name(top)}", file=sys.stderr)
    if results:
        print(f"\n{'TOPIC':<30} {'PARTITION':<15} STATUS")
    for (topic, partition), code in sorted(results.items()):
        shown = str(partition) if partition >= 0 else "Not Provided"
        status = "Successful" if code == ErrorCode.none else f"Error: {error_name(code)}"
        print(f"{topic:<30} {shown:<15} {status}")
    return 0 if top == ErrorCode.none else 1
