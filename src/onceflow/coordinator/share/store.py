"""The share coordinator's state store (Kafka's ShareCoordinator and the persister's
Initialize/Read/Write/Delete/ReadSummary): share-partition snapshots in `__share_group_state`.

A key's partition of `__share_group_state` is Kafka's: the hash of "group:topicId:partition".
The store serves the keys of the partitions it has loaded (on a cluster: the ones its broker
leads, following leadership as the group and transaction coordinators do); a write appends
the snapshot through the replicated log and returns once it is durable, so a snapshot that
was answered for survives a kill -9 and a leader move. Loading keeps each key's last record.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Iterable
from typing import Protocol

from onceflow.coordinator.group.offsets import partition_for
from onceflow.coordinator.partitions import PartitionOwnership
from onceflow.coordinator.share.records import (
    CorruptShareRecord,
    GroupConfigKey,
    ShareKey,
    ShareSnapshot,
    decode_group_config_value,
    decode_key,
    decode_value,
    encode_group_config,
    encode_key,
    encode_value,
)
from onceflow.errors import ErrorCode, KafkaError
from onceflow.records.builder import build_batch

log = logging.getLogger(__name__)


class ShareStateLog(Protocol):
    """`__share_group_state` as the store sees it: appends (durable when awaited; the bytes
    are in the log when the call returns) and each partition's (key, value) records."""

    def append(self, partition: int, batch: bytes) -> Awaitable[int]: ...

    def read(self, partition: int) -> Iterable[tuple[bytes | None, bytes | None]]: ...


class ShareStateStore:
    def __init__(self, log_: ShareStateLog, num_partitions: int) -> None:
        self._log = log_
        self.num_partitions = num_partitions
        self.ownership = PartitionOwnership(
            num_partitions, serve_all=False, initially_loading=False
        )
        self._states: dict[int, dict[ShareKey, ShareSnapshot]] = {}
        self._group_configs: dict[int, dict[str, dict[str, str]]] = {}

    def partition_for(self, key: ShareKey) -> int:
        return partition_for(key.coordinator_key(), self.num_partitions)

    # -- loading (role changes)

    def load_partition(self, partition: int, epoch: int | None = None) -> None:
        token = self.ownership.begin(partition, epoch)
        if token is None:
            return
        states: dict[ShareKey, ShareSnapshot] = {}
        configs: dict[str, dict[str, str]] = {}
        for raw_key, raw_value in self._log.read(partition):
            if raw_key is None:
                continue
            try:
                key = decode_key(raw_key)
                if isinstance(key, GroupConfigKey):
                    if raw_value is None:
                        configs.pop(key.group_id, None)
                    else:
                        configs[key.group_id] = decode_group_config_value(raw_value)
                elif raw_value is None:
                    states.pop(key, None)
                else:
                    states[key] = decode_value(raw_value)
            except CorruptShareRecord as exc:
                log.warning("skipping a bad record of __share_group_state-%d: %s", partition, exc)
        if self.ownership.current(partition, token):
            self._states[partition] = states
            self._group_configs[partition] = configs
            self.ownership.finish(partition, token)
        log.info(
            "loaded %d share-partition states of __share_group_state-%d", len(states), partition
        )

    def unload(self, partition: int, epoch: int | None = None) -> None:
        if self.ownership.drop(partition, epoch):
            self._states.pop(partition, None)
            self._group_configs.pop(partition, None)

    def _served(self, key: ShareKey) -> dict[ShareKey, ShareSnapshot]:
        return self._states[self._check_served(self.partition_for(key))]

    def _check_served(self, partition: int) -> int:
        states = self._states.get(partition)
        if states is None or not self.ownership.owns(partition):
            code = (
                ErrorCode.coordinator_load_in_progress
                if self.ownership.loading(partition)
                else ErrorCode.not_coordinator
            )
            raise KafkaError(code, f"__share_group_state-{partition} is not served here")
        return partition

    # -- the persister's requests

    def read(self, key: ShareKey) -> ShareSnapshot | None:
        return self._served(key).get(key)

    def share_keys(self, group_id: str | None = None) -> list[ShareKey]:
        """Every key served (of one group)."""
        return [
            k
            for states in self._states.values()
            for k in states
            if group_id is None or k.group_id == group_id
        ]

    def write(self, key: ShareKey, snapshot: ShareSnapshot, now_ms: int) -> Awaitable[int]:
        """Append the snapshot now (so writes of one key land in call order); the result
        completes once it is durable. The state is served from memory at once."""
        states = self._served(key)
        batch = build_batch([(encode_key(key), encode_value(snapshot), ())], timestamp_ms=now_ms)
        written = self._log.append(self.partition_for(key), batch)
        states[key] = snapshot
        return written

    def delete(self, key: ShareKey, now_ms: int) -> Awaitable[int]:
        states = self._served(key)
        batch = build_batch([(encode_key(key), None, ())], timestamp_ms=now_ms)
        written = self._log.append(self.partition_for(key), batch)
        states.pop(key, None)
        return written

    # -- group configs

    def group_partition(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def group_configs(self, group_id: str) -> dict[str, str]:
        """A group's config overrides ({} when none, or when its partition is elsewhere)."""
        configs = self._group_configs.get(self.group_partition(group_id), {})
        return dict(configs.get(group_id, {}))

    def write_group_configs(
        self, group_id: str, configs: dict[str, str], now_ms: int
    ) -> Awaitable[int]:
        partition = self._check_served(self.group_partition(group_id))
        key, value = encode_group_config(group_id, configs or None)
        written = self._log.append(partition, build_batch([(key, value, ())], timestamp_ms=now_ms))
        if configs:
            self._group_configs[partition][group_id] = dict(configs)
        else:
            self._group_configs[partition].pop(group_id, None)
        return written
