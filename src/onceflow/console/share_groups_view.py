"""Share groups (KIP-932): state, members and their assignments, start offsets and lag,
through `onceflow.client` (confluent-kafka's AdminClient has no share-group calls)."""

from __future__ import annotations

import sys
from typing import Any

from onceflow.client.cluster import Cluster
from onceflow.console.clients import KafkaClients
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import request_type

__all__ = ["share_groups"]


def _group(cluster: Cluster, group_id: str) -> dict[str, Any]:
    _, conn = cluster.group_coordinator(group_id)
    described = conn.call(
        ApiKey.SHARE_GROUP_DESCRIBE, group_ids=(group_id,), include_authorized_operations=False
    ).groups[0]
    members = [
        {
            "member_id": m.member_id,
            "client_id": m.client_id,
            "host": m.client_host,
            "assignment": [
                f"{t.topic_name}-{p}" for t in m.assignment.topic_partitions for p in t.partitions
            ],
        }
        for m in described.members
    ]
    entity = request_type(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1)
    module = sys.modules[entity.__module__]
    offsets = conn.call(
        ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
        groups=(module.DescribeShareGroupOffsetsRequestGroup(group_id=group_id, topics=None),),
    ).groups[0]
    partitions = [
        {
            "topic": t.topic_name,
            "partition": p.partition_index,
            "start_offset": p.start_offset if p.start_offset >= 0 else None,
            "lag": p.lag if p.lag >= 0 else None,
        }
        for t in offsets.topics
        for p in t.partitions
    ]
    return {
        "group_id": group_id,
        "state": described.group_state or "Dead",
        "members": members,
        "partitions": partitions,
        "total_lag": sum(p["lag"] or 0 for p in partitions),
    }


def share_groups(clients: KafkaClients) -> dict[str, Any]:
    with clients.wire() as cluster:
        ids: set[str] = set()
        for node in cluster.brokers():
            answer = cluster.node(node.node_id).call(
                ApiKey.LIST_GROUPS, states_filter=(), types_filter=("share",)
            )
            ids.update(g.group_id for g in answer.groups)
        return {"share_groups": [_group(cluster, g) for g in sorted(ids)]}
