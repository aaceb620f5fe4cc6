"""DeleteGroups and OffsetDelete: removing a group, or some of its offsets, for good.

Both write tombstones to `__consumer_offsets`, so a deletion survives restarts, reloads on
another broker and compaction (the cleaner keeps a tombstone for delete.retention.ms).
Kafka's rules: only an Empty group may be deleted (NON_EMPTY_GROUP otherwise,
GROUP_ID_NOT_FOUND for an unknown or Dead one), with its group record and every offset;
OffsetDelete removes offsets of topics the group does not subscribe to
(GROUP_SUBSCRIBED_TO_TOPIC per partition otherwise), and of an active group only when it
uses the consumer protocol (else NON_EMPTY_GROUP).

The cache changes when the tombstones take their place in the log order, as Kafka's
coordinator applies a write's records when it issues it: a deleted group turns Dead at once
(its members' retries get COORDINATOR_NOT_AVAILABLE and find it gone), and a commit still
being written from before the deletion cannot bring an offset back. A failed append takes
the change back and answers the append's error.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from onceflow.clock import Clock
from onceflow.coordinator.group.consumer_records import tombstones
from onceflow.coordinator.group.log import KeyValue
from onceflow.coordinator.group.manager import GroupMetadataManager, append_error
from onceflow.coordinator.group.metadata import CONSUMER_PROTOCOL_TYPE, GroupMetadata
from onceflow.coordinator.group.offset_store import Deleted
from onceflow.coordinator.group.offsets import (
    TopicPartition,
    encode_group_key,
    encode_offset_key,
)
from onceflow.coordinator.group.state import GroupState
from onceflow.errors import ErrorCode

log = logging.getLogger(__name__)

StatusCheck = Callable[[str], ErrorCode | None]

_ACTIVE = (
    GroupState.STABLE,
    GroupState.PREPARING_REBALANCE,
    GroupState.COMPLETING_REBALANCE,
)


class GroupDeleter:
    def __init__(self, clock: Clock, manager: GroupMetadataManager) -> None:
        self._clock = clock
        self._manager = manager

    async def delete_groups(
        self, group_ids: Sequence[str], status: StatusCheck
    ) -> dict[str, ErrorCode]:
        """Delete each Empty group; every distinct id gets its code."""
        results: dict[str, ErrorCode] = {}
        doomed: list[GroupMetadata] = []
        now = self._clock.now_ms()
        for group_id in dict.fromkeys(group_ids):
            error = status(group_id)
            group = self._manager.get(group_id)
            if error is None:
                error = _deletable(group)
            if error is not None or group is None:
                results[group_id] = error or ErrorCode.group_id_not_found
                continue
            # Dead from now on, before any await: nobody joins or commits into it meanwhile.
            group.transition_to(GroupState.DEAD, now)
            doomed.append(group)
        outcomes = await asyncio.gather(*(self._delete(group) for group in doomed))
        results.update(zip((g.group_id for g in doomed), outcomes, strict=True))
        return results

    async def _delete(self, group: GroupMetadata) -> ErrorCode:
        group_id = group.group_id
        partitions = sorted(group.offsets.partitions())
        records: list[KeyValue] = [
            (encode_offset_key(group_id, tp.topic, tp.partition), None) for tp in partitions
        ]
        records.append((encode_group_key(group_id), None))
        if group.consumer is not None:
            records += tombstones(group_id, group.consumer)
        try:
            await self._manager.append_records(group_id, records)
        except Exception as exc:
            self._manager.reinstate(group, _revived(group, self._clock.now_ms()))
            return append_error(exc, offsets=True)
        self._manager.remove(group)
        log.info("group %s deleted with %d offsets", group_id, len(partitions))
        return ErrorCode.none

    async def delete_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition], status: StatusCheck
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete: the top-level code, and each partition's."""
        error = status(group_id)
        group = self._manager.get(group_id)
        if error is None and (group is None or group.is_(GroupState.DEAD)):
            error = ErrorCode.group_id_not_found
        if (
            error is None
            and group is not None
            and group.is_(*_ACTIVE)
            and group.protocol_type != CONSUMER_PROTOCOL_TYPE
        ):
            error = ErrorCode.non_empty_group
        if error is not None or group is None:
            return error or ErrorCode.group_id_not_found, {}
        results: dict[TopicPartition, ErrorCode] = {}
        targets: list[TopicPartition] = []
        for tp in dict.fromkeys(partitions):
            if _subscribed(group, tp.topic):
                results[tp] = ErrorCode.group_subscribed_to_topic
                continue
            results[tp] = ErrorCode.none
            if group.offsets.has_offset(tp):
                targets.append(tp)
        if not targets:
            return ErrorCode.none, results
        removed: list[Deleted] = []

        def apply(seq: int) -> None:
            removed.extend(group.offsets.delete(tp, seq + i) for i, tp in enumerate(targets))

        records: list[KeyValue] = [
            (encode_offset_key(group_id, tp.topic, tp.partition), None) for tp in targets
        ]
        try:
            await self._manager.append_records(group_id, records, apply)
        except Exception as exc:
            for entry in removed:
                group.offsets.undelete(entry)
            return append_error(exc, offsets=True), {}
        return ErrorCode.none, results


def _deletable(group: GroupMetadata | None) -> ErrorCode | None:
    """Kafka's validateDeleteGroup."""
    if group is None or group.is_(GroupState.DEAD):
        return ErrorCode.group_id_not_found
    if group.is_(*_ACTIVE) or (group.consumer is not None and group.consumer.members):
        return ErrorCode.non_empty_group
    return None


def _subscribed(group: GroupMetadata, topic: str) -> bool:
    """Kafka's isSubscribedToTopic: a consumer group whose subscriptions cannot be read
    counts as subscribed to everything."""
    if group.consumer is not None:
        return topic in group.consumer.subscribed_topics()
    if group.subscribed_topics is not None:
        return topic in group.subscribed_topics
    return group.protocol_type == CONSUMER_PROTOCOL_TYPE


def _revived(dead: GroupMetadata, now_ms: int) -> GroupMetadata:
    """The Empty group a deletion that never reached the log leaves, as a reload of the
    log would rebuild it (with the same offsets)."""
    group = GroupMetadata(dead.group_id, now_ms)
    group.protocol_type = dead.protocol_type
    group.generation_id = dead.generation_id
    group.state_timestamp_ms = dead.state_timestamp_ms
    group.subscribed_topics = dead.subscribed_topics
    group.offsets = dead.offsets
    return group
