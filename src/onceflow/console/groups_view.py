"""Consumer groups: state, members and their assignments, committed offsets and lag."""

from __future__ import annotations

from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions

from onceflow.console.clients import KafkaClients

__all__ = ["groups"]


def _state(value: Any) -> str:
    """Kafka's name of a group state (PreparingRebalance), from confluent-kafka's enum."""
    name = str(getattr(value, "name", value))
    return "".join(word.capitalize() for word in name.split("_"))


def _group(clients: KafkaClients, description: Any) -> dict[str, Any]:
    group_id = description.group_id
    members = []
    owner: dict[tuple[str, int], str] = {}
    for m in description.members:
        assigned = sorted((tp.topic, tp.partition) for tp in m.assignment.topic_partitions)
        owner.update(dict.fromkeys(assigned, m.client_id))
        members.append(
            {
                "member_id": m.member_id,
                "client_id": m.client_id,
                "host": m.host,
                "assignment": [f"{t}-{p}" for t, p in assigned],
            }
        )
    request = [ConsumerGroupTopicPartitions(group_id)]
    (future,) = clients.admin.list_consumer_group_offsets(
        request, request_timeout=clients.timeout_s
    ).values()
    committed = {
        (tp.topic, tp.partition): tp.offset
        for tp in clients.result(future).topic_partitions
        if tp.offset >= 0
    }
    keys = sorted(set(committed) | set(owner))
    high = clients.latest_offsets(keys, committed=False)
    stable = clients.latest_offsets(keys, committed=True)
    partitions = []
    for key in keys:
        offset = committed.get(key)
        partitions.append(
            {
                "topic": key[0],
                "partition": key[1],
                "committed": offset,
                "high_watermark": high[key],
                "lso": stable[key],
                "lag": None if offset is None else max(high[key] - offset, 0),
                "member": owner.get(key),
            }
        )
    return {
        "group_id": group_id,
        "state": _state(description.state),
        "protocol": description.partition_assignor,
        "coordinator": getattr(description.coordinator, "id", None),
        "members": members,
        "partitions": partitions,
        "total_lag": sum(p["lag"] or 0 for p in partitions),
    }


def groups(clients: KafkaClients) -> dict[str, Any]:
    listing = clients.result(clients.admin.list_consumer_groups(request_timeout=clients.timeout_s))
    ids = sorted(g.group_id for g in listing.valid)
    if not ids:
        return {"groups": []}
    futures = clients.admin.describe_consumer_groups(ids, request_timeout=clients.timeout_s)
    described = [clients.result(futures[group_id]) for group_id in ids]
    return {"groups": [_group(clients, d) for d in described]}
