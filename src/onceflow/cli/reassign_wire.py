"""The requests `onceflow reassign-partitions` sends, through Onceflow's own client (confluent-
kafka has no reassignment calls): Metadata for the brokers, racks and current replicas,
AlterPartitionReassignments and ListPartitionReassignments at the controller, as Kafka's
admin client sends them; and the throttles' configs (IncrementalAlterConfigs) through
confluent-kafka's AdminClient."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, no __all__
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
)
from kio.index import load_payload_module
from kio.static.constants import EntityType

from onceflow.cli.common import CliError
from onceflow.client.blocking import Connection
from onceflow.client.cluster import Cluster
from onceflow.client.errors import error_name
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import build, request_type

Tp = tuple[str, int]
#: Each partition being reassigned: replicas, adding, removing.
Ongoing = dict[Tp, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]
TIMEOUT_MS = 30_000
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"


@dataclass(frozen=True, slots=True)
class ClusterView:
    racks: dict[int, str | None]  # every live broker and its rack
    replicas: dict[Tp, tuple[int, ...]]  # partitions of the topics asked for
    missing: list[str]  # topics asked for that do not exist


def describe(cluster: Cluster, topics: list[str] | None) -> ClusterView:
    connection = cluster.bootstrap
    version = connection.version_for(ApiKey.METADATA)
    module = load_payload_module(ApiKey.METADATA, version, EntityType.request)
    wanted = None
    if topics is not None:
        wanted = tuple(build(module.MetadataRequestTopic, topic_id=None, name=t) for t in topics)
    response = connection.call_at(
        ApiKey.METADATA,
        version,
        build(
            request_type(ApiKey.METADATA, version),
            topics=wanted,
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        ),
    )
    racks = {int(b.node_id): b.rack for b in response.brokers}
    replicas: dict[Tp, tuple[int, ...]] = {}
    missing: list[str] = []
    for topic in response.topics:
        if topic.error_code == ErrorCode.unknown_topic_or_partition:
            missing.append(str(topic.name))
            continue
        if topic.error_code != ErrorCode.none:
            raise CliError(f"cannot describe {topic.name}: {error_name(int(topic.error_code))}")
        for p in topic.partitions:
            replicas[(str(topic.name), int(p.partition_index))] = tuple(
                int(r) for r in p.replica_nodes
            )
    return ClusterView(racks, replicas, sorted(missing))


def controller(cluster: Cluster) -> Connection:
    """The controller's connection, where Kafka's admin client sends these requests."""
    described = cluster.bootstrap.call(
        ApiKey.DESCRIBE_CLUSTER, include_cluster_authorized_operations=False
    )
    if described.controller_id < 0:
        return cluster.bootstrap
    return cluster.node(int(described.controller_id))


def alter_reassignments(
    cluster: Cluster, targets: dict[Tp, tuple[int, ...] | None]
) -> dict[Tp, tuple[int, str | None]]:
    """Each partition's error code and message (None targets cancel)."""
    connection = controller(cluster)
    version = connection.version_for(ApiKey.ALTER_PARTITION_REASSIGNMENTS)
    module = load_payload_module(ApiKey.ALTER_PARTITION_REASSIGNMENTS, version, EntityType.request)
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), replicas in sorted(targets.items()):
        by_topic.setdefault(topic, []).append(
            build(module.ReassignablePartition, partition_index=partition, replicas=replicas)
        )
    request = build(
        request_type(ApiKey.ALTER_PARTITION_REASSIGNMENTS, version),
        timeout=datetime.timedelta(milliseconds=TIMEOUT_MS),
        allow_replication_factor_change=True,
        topics=tuple(
            build(module.ReassignableTopic, name=t, partitions=tuple(ps))
            for t, ps in by_topic.items()
        ),
    )
    response = connection.call_at(ApiKey.ALTER_PARTITION_REASSIGNMENTS, version, request)
    if response.error_code != ErrorCode.none:
        raise CliError(
            f"{error_name(int(response.error_code))}: {response.error_message or 'refused'}"
        )
    return {
        (t.name, int(p.partition_index)): (int(p.error_code), p.error_message)
        for t in response.responses
        for p in t.partitions
    }


def list_reassignments(cluster: Cluster) -> Ongoing:
    """Every partition being reassigned: replicas, adding, removing."""
    connection = controller(cluster)
    response = connection.call(
        ApiKey.LIST_PARTITION_REASSIGNMENTS,
        timeout=datetime.timedelta(milliseconds=TIMEOUT_MS),
        topics=None,
    )
    if response.error_code != ErrorCode.none:
        raise CliError(
            f"{error_name(int(response.error_code))}: {response.error_message or 'refused'}"
        )
    return {
        (t.name, int(p.partition_index)): (
            tuple(p.replicas),
            tuple(p.adding_replicas),
            tuple(p.removing_replicas),
        )
        for t in response.topics
        for p in t.partitions
    }


def alter_configs(admin: Any, kind: Any, name: str, changes: dict[str, str | None]) -> None:
    """Set (a value) or delete (None) configs of one resource, as kafka-configs.sh does."""
    entries = [
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
        if value is not None
        else ConfigEntry(key, None, incremental_operation=AlterConfigOpType.DELETE)
        for key, value in changes.items()
    ]
    resource = ConfigResource(kind, name, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource]).values():
        try:
            future.result()
        except KafkaException as exc:
            raise CliError(f"cannot change the throttle configs of {name}: {exc}") from None
