"""Where a share-partition's state is read and written (Kafka's persister).

The leader of a topic partition holds its share-partitions; their state lives in the
`__share_group_state` partition of each key, whose leader is the key's share coordinator.
When this broker leads that partition, the store here serves it directly; otherwise the
leader is asked with Kafka's ReadShareGroupState and WriteShareGroupState (v0). A leader
that moved answers NOT_COORDINATOR, and the next write or read finds the new one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from kio.index import load_payload_module
from kio.static.constants import EntityType

from onceflow.broker.topics import SHARE_STATE_TOPIC
from onceflow.broker.topology.base import NO_LEADER, Topology
from onceflow.coordinator.share.partition import StateBatch
from onceflow.coordinator.share.records import Ranges, ShareKey, ShareSnapshot
from onceflow.coordinator.share.state import RecordState
from onceflow.coordinator.share.store import ShareStateStore
from onceflow.errors import ErrorCode, KafkaError
from onceflow.protocol import txn_write_share_state as twss
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import build, request_type

VERSION = 0
CONFIGS_VERSION = 4  # DescribeConfigs
GROUP_RESOURCE = 32
GROUP_CONFIG_SOURCE = 8


class SharePersister:
    def __init__(
        self,
        store: ShareStateStore,
        topology: Callable[[], Topology],
        node_id: int,
        ensure_topic: Callable[[], bool],
    ) -> None:
        self.store = store
        self._topology = topology
        self._node_id = node_id
        self._ensure_topic = ensure_topic

    def _leader(self, key: ShareKey) -> int:
        if not self._ensure_topic():
            raise KafkaError(
                ErrorCode.coordinator_not_available, "__share_group_state is not ready"
            )
        view = self._topology().partition_view(SHARE_STATE_TOPIC, self.store.partition_for(key))
        if view.leader == NO_LEADER:
            raise KafkaError(ErrorCode.coordinator_not_available, "no share coordinator")
        return view.leader

    async def read(self, key: ShareKey) -> ShareSnapshot | None:
        leader = self._leader(key)
        if leader == self._node_id:
            return self.store.read_with_pending(key)
        module = load_payload_module(ApiKey.READ_SHARE_GROUP_STATE, VERSION, EntityType.request)
        request = build(
            request_type(ApiKey.READ_SHARE_GROUP_STATE, VERSION),
            group_id=key.group_id,
            topics=(
                build(
                    module.ReadStateData,
                    topic_id=key.topic_id,
                    partitions=(
                        build(module.PartitionData, partition=key.partition, leader_epoch=-1),
                    ),
                ),
            ),
        )
        answer = await self._topology().peers.share_state(
            leader, ApiKey.READ_SHARE_GROUP_STATE, VERSION, request
        )
        result = answer.results[0].partitions[0]
        if result.error_code == ErrorCode.none and result.start_offset < 0:
            return None  # no state written yet (Kafka's uninitialized start offset)
        if result.error_code == ErrorCode.unknown_topic_or_partition:
            return None  # the same from a broker of an earlier Onceflow
        if result.error_code != ErrorCode.none:
            raise KafkaError(ErrorCode(result.error_code), result.error_message or "")
        return ShareSnapshot(
            result.state_epoch,
            result.start_offset,
            tuple(
                StateBatch(
                    b.first_offset, b.last_offset, RecordState(b.delivery_state), b.delivery_count
                )
                for b in result.state_batches
            ),
        )

    def write(self, key: ShareKey, snapshot: ShareSnapshot, now_ms: int) -> Awaitable[Any]:
        """Started now (so one key's writes go out in call order); awaited for durability."""
        leader = self._leader(key)
        if leader == self._node_id:
            return self.store.write(key, snapshot, now_ms)
        return asyncio.ensure_future(self._write_remote(leader, key, snapshot))

    async def _write_remote(self, leader: int, key: ShareKey, snapshot: ShareSnapshot) -> None:
        module = load_payload_module(ApiKey.WRITE_SHARE_GROUP_STATE, VERSION, EntityType.request)
        request = build(
            request_type(ApiKey.WRITE_SHARE_GROUP_STATE, VERSION),
            group_id=key.group_id,
            topics=(
                build(
                    module.WriteStateData,
                    topic_id=key.topic_id,
                    partitions=(
                        build(
                            module.PartitionData,
                            partition=key.partition,
                            state_epoch=snapshot.state_epoch,
                            leader_epoch=-1,
                            start_offset=snapshot.start_offset,
                            state_batches=tuple(
                                build(
                                    module.StateBatch,
                                    first_offset=b.first,
                                    last_offset=b.last,
                                    delivery_state=int(b.state),
                                    delivery_count=b.delivery_count,
                                )
                                for b in snapshot.batches
                            ),
                        ),
                    ),
                ),
            ),
        )
        answer = await self._topology().peers.share_state(
            leader, ApiKey.WRITE_SHARE_GROUP_STATE, VERSION, request
        )
        code = answer.results[0].partitions[0].error_code
        if code != ErrorCode.none:
            raise KafkaError(ErrorCode(code), f"share state of {key} not written on {leader}")

    def write_txn(
        self,
        key: ShareKey,
        ranges: Ranges,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        now_ms: int,
    ) -> Awaitable[Any]:
        """A transactional acknowledgement, appended by the key's share coordinator: here,
        or on its broker with TxnWriteShareGroupState (Onceflow's, between brokers)."""
        leader = self._leader(key)
        if leader == self._node_id:
            return self.store.write_txn_update(
                key, ranges, transactional_id, producer_id, producer_epoch, now_ms
            )
        request = build(
            twss.TxnWriteShareGroupStateRequest,
            transactional_id=transactional_id,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            group_id=key.group_id,
            topics=(
                build(
                    twss.StateTopic,
                    topic_id=key.topic_id,
                    partitions=(
                        build(
                            twss.StatePartition,
                            partition=key.partition,
                            ranges=tuple(
                                build(
                                    twss.PendingRange,
                                    first_offset=first,
                                    last_offset=last,
                                    delivery_state=int(state),
                                )
                                for first, last, state in ranges
                            ),
                        ),
                    ),
                ),
            ),
        )
        return asyncio.ensure_future(self._write_txn_remote(leader, key, request))

    async def _write_txn_remote(self, leader: int, key: ShareKey, request: Any) -> None:
        answer = await self._topology().peers.share_state(
            leader, twss.API_KEY, twss.VERSION, request
        )
        code = answer.error_code
        if code == ErrorCode.none:
            code = answer.results[0].partitions[0].error_code
        if code != ErrorCode.none:
            raise KafkaError(ErrorCode(code), f"acknowledgement of {key} not written on {leader}")

    async def group_configs(self, group_id: str) -> dict[str, str] | None:
        """The group's overrides from the broker leading its partition (DescribeConfigs of
        the GROUP resource there); None when this broker leads it."""
        if not self._ensure_topic():
            raise KafkaError(
                ErrorCode.coordinator_not_available, "__share_group_state is not ready"
            )
        partition = self.store.group_partition(group_id)
        leader = self._topology().partition_view(SHARE_STATE_TOPIC, partition).leader
        if leader == self._node_id:
            return None
        if leader == NO_LEADER:
            raise KafkaError(ErrorCode.coordinator_not_available, "no share coordinator")
        module = load_payload_module(ApiKey.DESCRIBE_CONFIGS, CONFIGS_VERSION, EntityType.request)
        request = build(
            request_type(ApiKey.DESCRIBE_CONFIGS, CONFIGS_VERSION),
            resources=(
                build(
                    module.DescribeConfigsResource,
                    resource_type=GROUP_RESOURCE,
                    resource_name=group_id,
                    configuration_keys=None,
                ),
            ),
            include_synonyms=False,
            include_documentation=False,
        )
        answer = await self._topology().peers.share_state(
            leader, ApiKey.DESCRIBE_CONFIGS, CONFIGS_VERSION, request
        )
        result = answer.results[0]
        if result.error_code != ErrorCode.none:
            raise KafkaError(ErrorCode(result.error_code), result.error_message or "")
        return {
            c.name: c.value
            for c in result.configs
            if c.config_source == GROUP_CONFIG_SOURCE and c.value is not None
        }

    async def alter_group_configs(self, group_id: str, request: Any, version: int) -> Any:
        """Forward an (Incremental)AlterConfigs of one GROUP resource to the broker leading
        the group's partition; its answer (None: this broker leads it)."""
        partition = self.store.group_partition(group_id)
        if not self._ensure_topic():
            raise KafkaError(
                ErrorCode.coordinator_not_available, "__share_group_state is not ready"
            )
        leader = self._topology().partition_view(SHARE_STATE_TOPIC, partition).leader
        if leader == self._node_id:
            return None
        if leader == NO_LEADER:
            raise KafkaError(ErrorCode.coordinator_not_available, "no share coordinator")
        return await self._topology().peers.share_state(
            leader, ApiKey.INCREMENTAL_ALTER_CONFIGS, version, request
        )

    def delete(self, key: ShareKey, now_ms: int) -> Awaitable[Any]:
        """Deletion is served where the state partition is led (DeleteGroups goes to the
        group's coordinator, which on a cluster may not lead every state partition: a
        state elsewhere stays, and is reset when the group is used again)."""
        if self._leader(key) == self._node_id:
            return self.store.delete(key, now_ms)
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done
