"""A topic deleted and made again under its name, the deletion unseen by a broker (its
ZooKeeper watch read the new topic directly): nothing of the old topic may carry over. The
replica of the old topic would otherwise ask its leader for the old topic id for ever (or, by
name, copy the new topic onto the old log)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from tests.unit.test_storage_log_manager import append, manager

from onceflow.clock import ManualClock
from onceflow.cluster.link import ClusterLink
from onceflow.cluster.metadata import MetadataCache, TopicMetadata, VersionedState
from onceflow.cluster.replica_manager import ReplicaManager, ReplicationSettings
from onceflow.cluster.znodes import PartitionState

OLD_ID = "6a2c8a3e-0c1f-4a57-9d56-0e7f1c2b3a41"
NEW_ID = "0b4e7d19-8f3a-4c2e-b1d5-7a9c6e5f4d32"
LOCAL = 1


def topic(topic_id: str, config_version: int = 0) -> TopicMetadata:
    return TopicMetadata("t", topic_id, {0: (LOCAL,)}, {}, config_version)


def leader_state(version: int) -> VersionedState:
    return VersionedState(PartitionState(LOCAL, 0, (LOCAL,), 0), version)


def test_the_link_forgets_the_old_topic_when_its_id_changes() -> None:
    async def go() -> None:
        link = ClusterLink(cast(Any, None), cast(Any, None), asyncio.get_running_loop())
        link._set_topic(topic(OLD_ID, config_version=5))
        link.cache.states[("t", 0)] = leader_state(version=7)
        link._set_topic(topic(NEW_ID, config_version=0))
        assert link.cache.topics["t"].topic_id == NEW_ID
        assert link.cache.topics["t"].config_version == 0  # not the old topic's 5
        assert ("t", 0) not in link.cache.states  # the new topic's version 0 is not stale
        link._set_state("t", 0, leader_state(version=0))
        assert link.cache.states[("t", 0)].version == 0

    asyncio.run(go())


class _Link:
    """What a ReplicaManager reads of its ClusterLink here: the metadata cache."""

    def __init__(self) -> None:
        self.cache = MetadataCache()
        self.registration = SimpleNamespace(broker_id=LOCAL)
        self.listeners: list[object] = []


def test_a_replica_of_the_old_topic_is_replaced_by_one_of_the_new(tmp_path: Path) -> None:
    async def go() -> None:
        link = _Link()
        logs = manager(tmp_path)
        replicas = ReplicaManager(
            cast(Any, link),
            logs,
            cast(Any, None),
            ReplicationSettings(),
            ManualClock(),
            frozenset(),
            lambda _topic, _configs: 1,
        )
        link.cache.topics["t"] = topic(OLD_ID)
        link.cache.states[("t", 0)] = leader_state(version=0)
        replicas._reconcile_one("t", 0)
        old = replicas.partitions[("t", 0)]
        append(old.log)
        assert old.log.log_end_offset == 1
        link.cache.topics["t"] = topic(NEW_ID)
        replicas._reconcile_one("t", 0)
        new = replicas.partitions[("t", 0)]
        assert new is not old
        assert str(new.topic_id) == NEW_ID
        assert new.log.log_end_offset == 0  # the old topic's records are gone

    asyncio.run(go())
