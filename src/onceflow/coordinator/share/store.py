"""The share coordinator's state store (Kafka's ShareCoordinator and the persister's
Initialize/Read/Write/Delete/ReadSummary): share-partition snapshots in `__share_group_state`.

A key's partition of `__share_group_state` is Kafka's: the hash of "group:topicId:partition".
The store serves the keys of the partitions it has loaded (on a cluster: the ones its broker
leads, following leadership as the group and transaction coordinators do); a write appends
the snapshot through the replicated log and returns once it is durable, so a snapshot that
was answered for survives a kill -9 and a leader move. Loading keeps each key's last record.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Iterable
from typing import Protocol

from onceflow.coordinator.group.log import LogEntry
from onceflow.coordinator.group.offsets import partition_for
from onceflow.coordinator.partitions import PartitionOwnership
from onceflow.coordinator.share.partition import ShareLimits, SharePartition, StateBatch
from onceflow.coordinator.share.records import (
    CorruptShareRecord,
    GroupConfigKey,
    Ranges,
    ShareKey,
    ShareSnapshot,
    TxnUpdateKey,
    decode_group_config_value,
    decode_key,
    decode_txn_value,
    decode_value,
    encode_group_config,
    encode_key,
    encode_txn_update,
    encode_value,
)
from onceflow.coordinator.share.state import RecordState
from onceflow.errors import ErrorCode, KafkaError
from onceflow.records.builder import build_batch

log = logging.getLogger(__name__)
COMMIT_MARKER = 1  # ControlType.COMMIT


class ShareStateLog(Protocol):
    """`__share_group_state` as the store sees it: appends (started at once, durable when
    awaited; a transactional batch is checked as a producer's, KIP-890) and each
    partition's records, markers included."""

    def append(
        self, partition: int, batch: bytes, transactional_id: str | None = None
    ) -> Awaitable[int]: ...

    def read(self, partition: int) -> Iterable[LogEntry]: ...


#: Transactional acknowledgements waiting for their producer's marker:
#: producer id -> [(share-partition, ranges)].
PendingUpdates = dict[int, list[tuple[ShareKey, Ranges]]]
#: Committed transactional acknowledgements' terminal states, per share-partition, with
#: the state epoch they belong to: laid again over every later snapshot of the key. The
#: share-partition's leader may be another broker that learns of the commit only later,
#: and a snapshot it writes meanwhile must not undo it (terminal states only move
#: forward within a state epoch, so laying them again is always right).
Committed = dict[ShareKey, tuple[int, Ranges]]
TERMINAL = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


class ShareStateStore:
    def __init__(self, log_: ShareStateLog, num_partitions: int) -> None:
        self._log = log_
        self.num_partitions = num_partitions
        self.ownership = PartitionOwnership(
            num_partitions, serve_all=False, initially_loading=False
        )
        self._states: dict[int, dict[ShareKey, ShareSnapshot]] = {}
        self._group_configs: dict[int, dict[str, dict[str, str]]] = {}
        self._pending: dict[int, PendingUpdates] = {}
        self._committed: dict[int, Committed] = {}

    def partition_for(self, key: ShareKey) -> int:
        return partition_for(key.coordinator_key(), self.num_partitions)

    # -- loading (role changes)

    def load_partition(self, partition: int, epoch: int | None = None) -> None:
        token = self.ownership.begin(partition, epoch)
        if token is None:
            return
        states: dict[ShareKey, ShareSnapshot] = {}
        configs: dict[str, dict[str, str]] = {}
        pending: PendingUpdates = {}
        committed: Committed = {}
        for entry in self._log.read(partition):
            if entry.control is not None:
                updates = pending.pop(entry.producer_id, [])
                if entry.control == COMMIT_MARKER:
                    _commit(updates, states, committed)
                continue
            if entry.key is None:
                continue
            try:
                self._replay(entry, states, configs, pending, committed)
            except CorruptShareRecord as exc:
                log.warning("skipping a bad record of __share_group_state-%d: %s", partition, exc)
        if self.ownership.current(partition, token):
            self._states[partition] = states
            self._group_configs[partition] = configs
            self._pending[partition] = pending
            self._committed[partition] = committed
            self.ownership.finish(partition, token)
        log.info(
            "loaded %d share-partition states of __share_group_state-%d", len(states), partition
        )

    @staticmethod
    def _replay(
        entry: LogEntry,
        states: dict[ShareKey, ShareSnapshot],
        configs: dict[str, dict[str, str]],
        pending: PendingUpdates,
        committed: Committed,
    ) -> None:
        assert entry.key is not None
        key = decode_key(entry.key)
        if isinstance(key, GroupConfigKey):
            if entry.value is None:
                configs.pop(key.group_id, None)
            else:
                configs[key.group_id] = decode_group_config_value(entry.value)
        elif isinstance(key, TxnUpdateKey):
            if entry.transactional and entry.value is not None:
                ranges = decode_txn_value(entry.value)
                pending.setdefault(entry.producer_id, []).append((key.key, ranges))
        elif entry.value is None:
            states.pop(key, None)
            committed.pop(key, None)
        else:
            states[key] = _merged(committed, key, decode_value(entry.value))

    def unload(self, partition: int, epoch: int | None = None) -> None:
        if self.ownership.drop(partition, epoch):
            self._states.pop(partition, None)
            self._group_configs.pop(partition, None)
            self._pending.pop(partition, None)
            self._committed.pop(partition, None)

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

    def read_with_pending(self, key: ShareKey) -> ShareSnapshot | None:
        """The snapshot a share-partition's leader loads or checks its transactional
        acknowledgements against: records tied to an open transaction shown Acquired (the
        transaction decides them; Kafka's snapshots never hold Acquired otherwise)."""
        snapshot = self.read(key)
        held = [
            (first, last, RecordState.ACQUIRED)
            for _, ranges in self.pending_for(key)
            for first, last, _ in ranges
        ]
        if snapshot is None or not held:
            return snapshot
        sp = SharePartition(snapshot.start_offset, ShareLimits())
        sp.restore(snapshot.start_offset, snapshot.batches)
        sp.force_states(held)
        raw = tuple(StateBatch(r.first, r.last, r.state, r.delivery_count) for r in sp.runs)
        return ShareSnapshot(snapshot.state_epoch, sp.start_offset, raw)

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
        partition = self.partition_for(key)
        snapshot = _merged(self._committed[partition], key, snapshot)
        batch = build_batch([(encode_key(key), encode_value(snapshot), ())], timestamp_ms=now_ms)
        written = self._log.append(partition, batch)
        states[key] = snapshot
        return written

    def delete(self, key: ShareKey, now_ms: int) -> Awaitable[int]:
        states = self._served(key)
        self._committed[self.partition_for(key)].pop(key, None)
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

    # -- transactional acknowledgements

    def write_txn_update(
        self,
        key: ShareKey,
        ranges: Ranges,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        now_ms: int,
    ) -> Awaitable[int]:
        """Append the acknowledgement as the producer's transactional record (its partition
        was added to the transaction before). It waits for the producer's marker once the
        append succeeded: one refused (not in the transaction, KIP-890) holds nothing."""
        partition = self._check_served(self.partition_for(key))
        raw_key, value = encode_txn_update(key, ranges)
        batch = build_batch(
            [(raw_key, value, ())],
            timestamp_ms=now_ms,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            transactional=True,
        )
        written = asyncio.ensure_future(self._log.append(partition, batch, transactional_id))
        pending = self._pending[partition]

        def appended(done: asyncio.Future[int]) -> None:
            # Before the answer (this callback was added first), so before any marker.
            if done.cancelled() or done.exception() is not None:
                return
            if self._pending.get(partition) is pending:  # not reloaded meanwhile
                pending.setdefault(producer_id, []).append((key, ranges))

        if written.done():
            appended(written)
        else:
            written.add_done_callback(appended)
        return written

    def pending_for(self, key: ShareKey) -> list[tuple[int, Ranges]]:
        """The open transactions' acknowledgements of a share-partition (after a load)."""
        pending = self._pending.get(self.partition_for(key), {})
        return [(pid, r) for pid, updates in pending.items() for k, r in updates if k == key]

    def complete_txn(self, producer_id: int, commit: bool, partition: int) -> list[ShareKey]:
        """The producer's marker is in `partition`: its updates leave the pending set (a
        committed one is applied to the stored snapshot); the share-partitions touched."""
        updates = self._pending.get(partition, {}).pop(producer_id, [])
        if commit and partition in self._states:
            _commit(updates, self._states[partition], self._committed[partition])
        return list(dict.fromkeys(key for key, _ in updates))


def _commit(
    updates: list[tuple[ShareKey, Ranges]],
    states: dict[ShareKey, ShareSnapshot],
    committed: Committed,
) -> None:
    for key, ranges in updates:
        if key not in states:
            continue
        states[key] = apply_ranges(states[key], ranges)
        final = tuple(r for r in ranges if r[2] in TERMINAL)
        if final:
            epoch, earlier = committed.get(key, (states[key].state_epoch, ()))
            committed[key] = (
                states[key].state_epoch,
                (earlier if epoch == states[key].state_epoch else ()) + final,
            )


def _merged(committed: Committed, key: ShareKey, snapshot: ShareSnapshot) -> ShareSnapshot:
    """`snapshot` with the key's committed terminal states laid over it (dropped once the
    start offset passed them, or the state epoch changed: AlterShareGroupOffsets)."""
    entry = committed.get(key)
    if entry is None:
        return snapshot
    epoch, ranges = entry
    live = tuple(r for r in ranges if r[1] >= snapshot.start_offset)
    if epoch != snapshot.state_epoch or not live:
        del committed[key]
        return snapshot
    committed[key] = (epoch, live)
    return apply_ranges(snapshot, live)


def apply_ranges(snapshot: ShareSnapshot, ranges: Ranges) -> ShareSnapshot:
    sp = SharePartition(snapshot.start_offset, ShareLimits())
    sp.restore(snapshot.start_offset, snapshot.batches)
    sp.force_states(ranges)
    return ShareSnapshot(snapshot.state_epoch, sp.start_offset, tuple(sp.state_batches()))
