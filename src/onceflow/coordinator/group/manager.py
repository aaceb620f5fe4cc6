"""The groups cache and its durable form in `__consumer_offsets` (Kafka's metadata manager).

Every change a client must be able to rely on after a restart is written here first: group
metadata when a generation stabilises or the group empties, each offset commit, and the
tombstones that retention produces. `load()` rebuilds the cache from the log alone.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from onceflow.clock import Clock
from onceflow.coordinator.group.config import GroupCoordinatorConfig
from onceflow.coordinator.group.log import KeyValue, OffsetsLog, encode_batch
from onceflow.coordinator.group.metadata import CONSUMER_PROTOCOL_TYPE, GroupMetadata
from onceflow.coordinator.group.offset_store import CommittedOffset
from onceflow.coordinator.group.offsets import (
    GroupKey,
    GroupRecord,
    OffsetAndMetadata,
    OffsetKey,
    TopicPartition,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
    partition_for,
)
from onceflow.coordinator.group.results import FetchedOffset
from onceflow.coordinator.group.state import GroupState
from onceflow.errors import ErrorCode, KafkaError
from onceflow.invariants import InvariantViolation

log = logging.getLogger(__name__)

# Storage errors as a client should see them, following Kafka: "try another coordinator"
# for unavailable or lost partitions, a size error for commits that cannot fit.
_RETRY_ELSEWHERE = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
}
_TOO_LARGE = {ErrorCode.message_too_large, ErrorCode.record_list_too_large}


def append_error(exc: Exception, *, offsets: bool) -> ErrorCode:
    """The code a failed append of offsets (or of group metadata) is reported with."""
    if isinstance(exc, InvariantViolation):
        raise exc
    if isinstance(exc, KafkaError):
        code = exc.code
    elif isinstance(exc, OSError):
        code = ErrorCode.kafka_storage_error
    else:
        return ErrorCode.unknown_server_error
    if code in _TOO_LARGE or code is ErrorCode.invalid_fetch_size:
        return ErrorCode.invalid_commit_offset_size if offsets else ErrorCode.unknown_server_error
    return _RETRY_ELSEWHERE.get(code, code)


class GroupMetadataManager:
    def __init__(self, log: OffsetsLog, clock: Clock, config: GroupCoordinatorConfig) -> None:
        self._log = log
        self._clock = clock
        self._config = config
        self.groups: dict[str, GroupMetadata] = {}
        self.loaded = False
        # Position of the next record in any partition: orders commits (see offset_store).
        self._next_seq = 0

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self._config.offsets_topic_num_partitions)

    def get(self, group_id: str) -> GroupMetadata | None:
        return self.groups.get(group_id)

    def add(self, group: GroupMetadata) -> GroupMetadata:
        return self.groups.setdefault(group.group_id, group)

    # -- loading

    def load(self) -> None:
        """Rebuild every group and committed offset from the log: newest record per key wins."""
        self.groups.clear()
        for partition in range(self._config.offsets_topic_num_partitions):
            self._load_partition(self._log.read(partition))
        self.loaded = True

    def _load_partition(self, records: Iterable[tuple[bytes | None, bytes | None]]) -> None:
        groups: dict[str, GroupRecord | None] = {}
        offsets: dict[OffsetKey, CommittedOffset | None] = {}
        for raw_key, raw_value in records:
            seq = self._take_seq(1)
            key = decode_key(raw_key) if raw_key is not None else None
            if isinstance(key, OffsetKey):
                offsets[key] = (
                    None
                    if raw_value is None
                    else CommittedOffset(decode_offset_value(raw_value), seq)
                )
            elif isinstance(key, GroupKey):
                groups[key.group] = None if raw_value is None else decode_group_value(raw_value)
        now = self._clock.now_ms()
        for group_id, record in groups.items():
            if record is not None:
                self.groups[group_id] = GroupMetadata.from_record(group_id, record, now)
        for key, entry in offsets.items():
            if entry is None:
                continue
            group = self.groups.get(key.group)
            if group is None:  # offsets of a group that only commits (or lost its metadata)
                group = self.groups[key.group] = GroupMetadata(key.group, now)
            group.offsets.put(TopicPartition(key.topic, key.partition), entry)

    def _take_seq(self, count: int) -> int:
        seq = self._next_seq
        self._next_seq += count
        return seq

    # -- writing

    async def _append(self, group_id: str, records: Sequence[KeyValue]) -> int:
        """Append one batch to the group's partition; returns the first record's sequence.

        Sequences are taken before the await, so they follow the order appends were issued,
        which is the order the log applies them in.
        """
        seq = self._take_seq(len(records))
        batch = encode_batch(records, self._clock.now_ms())
        await self._log.append(self.partition_for(group_id), batch)
        return seq

    async def store_group(self, group: GroupMetadata, assignments: dict[str, bytes]) -> ErrorCode:
        """Persist the group as it is now, with these assignments; NONE once durable."""
        return await self.store_group_record(group.group_id, group.to_record(assignments))

    async def store_group_record(self, group_id: str, record: GroupRecord) -> ErrorCode:
        entry = (encode_group_key(group_id), encode_group_value(record))
        try:
            await self._append(group_id, [entry])
        except Exception as exc:
            code = append_error(exc, offsets=False)
            log.warning("writing metadata of group %s failed: %r", group_id, exc)
            return code
        return ErrorCode.none

    async def store_offsets(
        self, group: GroupMetadata, offsets: dict[TopicPartition, OffsetAndMetadata]
    ) -> dict[TopicPartition, ErrorCode]:
        """Write the commits that fit; each partition's code says how it went."""
        # offset.metadata.max.bytes counts Java chars (UTF-16 code units), as Kafka does.
        limit = self._config.offset_metadata_max_bytes
        errors = {
            tp: ErrorCode.offset_metadata_too_large
            for tp, value in offsets.items()
            if len(value.metadata.encode("utf-16-le")) // 2 > limit
        }
        accepted = {tp: value for tp, value in offsets.items() if tp not in errors}
        if not accepted:
            return errors
        records = [
            (encode_offset_key(group.group_id, tp.topic, tp.partition), encode_offset_value(v))
            for tp, v in accepted.items()
        ]
        group.offsets.prepare(accepted)
        try:
            seq = await self._append(group.group_id, records)
        except Exception as exc:
            for tp in accepted:
                group.offsets.complete(tp, None)
            code = append_error(exc, offsets=True)
            log.warning("committing offsets of group %s failed: %r", group.group_id, exc)
            return errors | dict.fromkeys(accepted, code)
        for i, (tp, value) in enumerate(accepted.items()):
            group.offsets.complete(tp, CommittedOffset(value, seq + i))
        return errors | dict.fromkeys(accepted, ErrorCode.none)

    # -- reading offsets

    def fetch_offsets(
        self, group_id: str, partitions: list[TopicPartition] | None
    ) -> dict[TopicPartition, FetchedOffset]:
        """Committed offsets, whatever the group's state; -1 where nothing is committed."""
        group = self.groups.get(group_id)
        committed = {} if group is None or group.is_(GroupState.DEAD) else group.offsets.all()
        if partitions is None:
            return {tp: _fetched(v) for tp, v in committed.items()}
        return {tp: _fetched(committed.get(tp)) for tp in partitions}

    # -- retention

    async def expire_offsets(self) -> int:
        """Drop offsets past retention and groups left with nothing; write their tombstones."""
        now = self._clock.now_ms()
        removed = 0
        for group in list(self.groups.values()):
            tombstones: list[KeyValue] = []
            for tp in self._expired(group, now):
                group.offsets.remove(tp)
                tombstones.append((encode_offset_key(group.group_id, tp.topic, tp.partition), None))
            if group.is_(GroupState.EMPTY) and not group.offsets.has_offsets():
                group.transition_to(GroupState.DEAD, now)
                del self.groups[group.group_id]
                tombstones.append((encode_group_key(group.group_id), None))
            if not tombstones:
                continue
            removed += len(tombstones)
            try:
                await self._append(group.group_id, tombstones)
            except Exception as exc:  # the next load brings them back; they expire again
                append_error(exc, offsets=True)
                log.warning("writing tombstones of group %s failed: %r", group.group_id, exc)
        return removed

    def _expired(self, group: GroupMetadata, now: int) -> list[TopicPartition]:
        retention = self._config.offsets_retention_ms
        if group.protocol_type is not None and group.is_(GroupState.EMPTY):
            # Nobody consumes: the clock starts when the group became empty.
            became_empty = group.state_timestamp_ms
            return group.offsets.expired(
                now,
                retention,
                lambda v: v.commit_timestamp_ms if became_empty is None else became_empty,
            )
        if (
            group.protocol_type == CONSUMER_PROTOCOL_TYPE
            and group.subscribed_topics is not None
            and group.is_(GroupState.STABLE)
        ):
            # Live consumers: only offsets of topics nobody subscribes to any more age out.
            return group.offsets.expired(
                now, retention, lambda v: v.commit_timestamp_ms, group.subscribed_topics
            )
        if group.protocol_type is None:  # commits only, no membership
            return group.offsets.expired(now, retention, lambda v: v.commit_timestamp_ms)
        return []


def _fetched(value: OffsetAndMetadata | None) -> FetchedOffset:
    if value is None:
        return FetchedOffset(offset=-1, leader_epoch=-1, metadata="")
    return FetchedOffset(value.offset, value.leader_epoch, value.metadata)
