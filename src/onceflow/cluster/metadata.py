"""MetadataCache: one broker's copy of the cluster's metadata, as ZooKeeper's watches last
delivered it. Handlers read it; the ClusterLink writes it, on the event loop only."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from onceflow.cluster.znodes import NO_LEADER, BrokerRegistration, ElectionRequest, PartitionState


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    name: str
    topic_id: str
    assignment: dict[int, tuple[int, ...]]  # partition -> replicas, preferred leader first
    configs: dict[str, str]
    config_version: int = -1  # the config znode's version the configs were read at
    #: Partitions being reassigned: the replicas being added and removed (see
    #: znodes.TopicAssignment); `assignment` then holds the full replica set.
    adding: dict[int, tuple[int, ...]] = field(default_factory=dict)
    removing: dict[int, tuple[int, ...]] = field(default_factory=dict)
    assignment_version: int = -1  # the assignment znode's version (for compare-and-set)

    @property
    def partitions(self) -> int:
        return len(self.assignment)


@dataclass(frozen=True, slots=True)
class VersionedState:
    """A partition's state and the znode version it was read at (for compare-and-set)."""

    state: PartitionState
    version: int


@dataclass(slots=True)
class MetadataCache:
    brokers: dict[int, BrokerRegistration] = field(default_factory=dict)
    shutting_down: set[int] = field(default_factory=set)
    controller_id: int | None = None
    topics: dict[str, TopicMetadata] = field(default_factory=dict)
    states: dict[tuple[str, int], VersionedState] = field(default_factory=dict)
    #: ElectLeaders requests waiting for the controller, by znode name.
    election_requests: dict[str, ElectionRequest] = field(default_factory=dict)

    def leader_of(self, topic: str, partition: int) -> int:
        """The partition's leader if it is alive; NO_LEADER otherwise."""
        current = self.states.get((topic, partition))
        if current is None or current.state.leader not in self.brokers:
            return NO_LEADER
        return current.state.leader

    def replicas_of(self, topic: str, partition: int) -> tuple[int, ...]:
        meta = self.topics.get(topic)
        if meta is None:
            return ()
        return meta.assignment.get(partition, ())

    def partitions(self) -> Iterator[tuple[str, int, tuple[int, ...]]]:
        for name, meta in self.topics.items():
            for partition, replicas in meta.assignment.items():
                yield name, partition, replicas

    def drop_topic(self, topic: str) -> None:
        self.topics.pop(topic, None)
        for key in [k for k in self.states if k[0] == topic]:
            del self.states[key]
