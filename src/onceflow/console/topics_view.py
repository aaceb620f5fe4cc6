"""Brokers and topics; a topic's partitions with leader, replicas, ISR, offsets and LSO lag."""

from __future__ import annotations

from typing import Any

from onceflow.console.clients import ClusterUnavailable, KafkaClients

__all__ = ["overview", "topic_detail"]


def _error_text(error: Any) -> str | None:
    return None if error is None else str(error.str() if hasattr(error, "str") else error)


def overview(clients: KafkaClients) -> dict[str, Any]:
    metadata = clients.metadata()
    brokers = [
        {"id": b.id, "host": b.host, "port": b.port, "controller": b.id == metadata.controller_id}
        for b in sorted(metadata.brokers.values(), key=lambda b: b.id)
    ]
    topics = []
    for name in sorted(metadata.topics):
        t = metadata.topics[name]
        partitions = list(t.partitions.values())
        topics.append(
            {
                "name": name,
                "internal": name.startswith("__"),
                "partitions": len(partitions),
                "replication": max((len(p.replicas) for p in partitions), default=0),
                "under_replicated": sum(len(p.isrs) < len(p.replicas) for p in partitions),
                "error": _error_text(t.error),
            }
        )
    return {"cluster_id": metadata.cluster_id, "brokers": brokers, "topics": topics}


def topic_detail(clients: KafkaClients, name: str) -> dict[str, Any]:
    metadata = clients.metadata(name)
    t = metadata.topics.get(name)
    if t is None or t.error is not None:
        reason = "not in the metadata" if t is None else _error_text(t.error)
        raise ClusterUnavailable(f"topic {name}: {reason}")
    keys = [(name, p) for p in sorted(t.partitions)]
    earliest = clients.earliest_offsets(keys)
    high = clients.latest_offsets(keys, committed=False)
    stable = clients.latest_offsets(keys, committed=True)
    partitions = []
    for key in keys:
        p = t.partitions[key[1]]
        partitions.append(
            {
                "partition": p.id,
                "leader": p.leader,
                "replicas": list(p.replicas),
                "isr": list(p.isrs),
                "earliest": earliest[key],
                "high_watermark": high[key],
                "lso": stable[key],
                "lso_lag": high[key] - stable[key],
            }
        )
    return {"name": name, "partitions": partitions}
