"""The groups cache and its durable form in `__consumer_offsets` (Kafka's metadata manager).

Every change a client must be able to rely on after a restart is written here first: group
metadata when a generation stabilises or the group empties, each offset commit, and the
tombstones that retention produces. The cache is rebuilt from the log alone, one partition
at a time (`load_partition`, Kafka's `loadGroupsAndOffsets`), and a partition's groups are
forgotten when it stops being served here (`forget`, Kafka's `removeGroupsForPartition`).
`partitions` says which partitions are served, which are loading, and at which epoch.

Transactional commits are offset records in a transactional batch. They stay pending per
producer until that producer's COMMIT or ABORT marker in the same partition, both when they
are written (`store_txn_offsets`, then `complete_txn`) and when the log is replayed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterable, Awaitable, Callable, Sequence

from onceflow.clock import Clock
from onceflow.coordinator.group import consumer_records
from onceflow.coordinator.group.config import GroupCoordinatorConfig
from onceflow.coordinator.group.consumer_group import ConsumerGroup
from onceflow.coordinator.group.consumer_records import ConsumerGroupKey, ConsumerMemberKey
from onceflow.coordinator.group.consumer_records import tombstones as consumer_tombstones
from onceflow.coordinator.group.log import KeyValue, LogEntry, OffsetsLog, encode_batch
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
from onceflow.coordinator.partitions import PartitionOwnership
from onceflow.coordinator.write_failures import WriteFailureLog, storage_error_code
from onceflow.errors import ErrorCode, KafkaError
from onceflow.invariants import InvariantViolation
from onceflow.protocol.txn_support import TxnSupport
from onceflow.records.control import ControlType

_logger = log = logging.getLogger(__name__)

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
# A verification that could not reach the transaction coordinator: older clients do not
# retry NETWORK_EXCEPTION here, but all retry a coordinator that is still loading (Kafka too).
_TXN_RETRY = {ErrorCode.network_exception: ErrorCode.coordinator_load_in_progress}


def append_error(exc: Exception, *, offsets: bool) -> ErrorCode:
    """The code a failed append of offsets (or of group metadata) is reported with."""
    if isinstance(exc, InvariantViolation):
        raise exc
    storage = storage_error_code(exc)
    if storage is not None:
        return storage
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
    def __init__(
        self,
        log: OffsetsLog,
        clock: Clock,
        config: GroupCoordinatorConfig,
        *,
        serve_all: bool = True,
    ) -> None:
        self._log = log
        self._write_failures = WriteFailureLog(_logger, "writes to __consumer_offsets")
        self._clock = clock
        self._config = config
        # Only groups of served partitions are here: a partition's groups are installed
        # when its load finishes and removed when it is unloaded.
        self.groups: dict[str, GroupMetadata] = {}
        # Until load() (one broker) every partition is loading; with serve_all=False none.
        self.partitions = PartitionOwnership(
            config.offsets_topic_num_partitions, serve_all=serve_all, initially_loading=True
        )
        # Position of the next record in any partition: orders commits (see offset_store).
        self._next_seq = 0
        # producer id -> groups with transactional offsets of it pending or being written.
        self._txn_groups: dict[int, set[str]] = {}
        # Appends not finished yet, per partition: a load waits for them before reading.
        self._appending: dict[int, set[asyncio.Future[None]]] = {}
        # Markers reported (complete_txn) while their partition was loading: applied when
        # the load installs what it read, in case the read ended before the marker.
        self._completed_while_loading: dict[int, list[tuple[int, bool]]] = {}

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self._config.offsets_topic_num_partitions)

    def get(self, group_id: str) -> GroupMetadata | None:
        return self.groups.get(group_id)

    def add(self, group: GroupMetadata) -> GroupMetadata:
        return self.groups.setdefault(group.group_id, group)

    # -- loading and unloading

    async def load_partition(self, partition: int, token: int) -> list[GroupMetadata] | None:
        """Replay one partition and install its groups and offsets; returns the groups.

        `token` is the load's, from `partitions.begin`. Appends to the partition still in
        flight are awaited first, so the read sees them. None (nothing installed) when the
        partition was unloaded or loaded again meanwhile. A read that fails leaves the
        partition neither served nor loading, and raises.
        """
        try:
            pending = self._appending.get(partition)
            if pending:
                await asyncio.wait(list(pending))
            replay = _Replay(self._take_seq)
            source = self._log.read(partition)
            if isinstance(source, AsyncIterable):
                async for entry in source:
                    replay.add(entry)
            else:
                for entry in source:
                    replay.add(entry)
        except BaseException:
            self.partitions.abandon(partition, token)
            self._completed_while_loading.pop(partition, None)
            raise
        if not self.partitions.current(partition, token):
            return None
        completed = self._completed_while_loading.pop(partition, [])
        loaded = self._install(partition, replay)
        self.partitions.finish(partition, token)
        for producer_id, commit in completed:
            self.complete_txn(producer_id, commit=commit, partition=partition)
        return loaded

    def _install(self, partition: int, replay: _Replay) -> list[GroupMetadata]:
        """Put what the replay found in the cache, replacing whatever of it was there."""
        self.forget(partition)
        now = self._clock.now_ms()
        loaded: dict[str, GroupMetadata] = {}

        def group_for_offsets(group_id: str) -> GroupMetadata:
            # Offsets of a group that only commits (or lost its metadata): created Empty.
            group = loaded.get(group_id)
            if group is None:
                group = loaded[group_id] = GroupMetadata(group_id, now)
            return group

        for group_id, record in replay.groups.items():
            if record is not None:
                loaded[group_id] = GroupMetadata.from_record(group_id, record, now)
        for group_id, consumer in replay.consumer_groups.items():
            if consumer is not None:
                group = group_for_offsets(group_id)
                group.consumer = self._consumer_group(group_id, consumer, replay)
        for key, committed in replay.offsets.items():
            if committed is not None:
                group = group_for_offsets(key.group)
                group.offsets.put(TopicPartition(key.topic, key.partition), committed)
        for producer_id, txn_offsets in replay.pending.items():
            for key, committed in txn_offsets.items():
                if committed is None:
                    continue
                group = group_for_offsets(key.group)
                tp = TopicPartition(key.topic, key.partition)
                group.offsets.add_pending_txn(producer_id, tp, committed)
                self._txn_groups.setdefault(producer_id, set()).add(key.group)
        self.groups.update(loaded)
        return list(loaded.values())

    def _consumer_group(
        self, group_id: str, group: ConsumerGroup, replay: _Replay
    ) -> ConsumerGroup:
        """A consumer-protocol group as its records left it; each member's session starts
        now (a dead one is fenced a session timeout after the load, as in Kafka)."""
        deadline = self._clock.monotonic_ms() + self._config.consumer_session_timeout_ms
        for record in replay.consumer_members.get(group_id, {}).values():
            if record is None:
                continue
            member, target = record
            member.session_deadline_ms = deadline
            group.restore(member, target)
        return group

    def forget(self, partition: int) -> list[GroupMetadata]:
        """Remove a partition's groups from the cache (and from the producers' links);
        returns them, for the coordinator to answer their parked requests."""
        gone = [g for g in self.groups.values() if self.partition_for(g.group_id) == partition]
        for group in gone:
            del self.groups[group.group_id]
        names = {g.group_id for g in gone}
        for producer_id in list(self._txn_groups):
            self._txn_groups[producer_id] -= names
            if not self._txn_groups[producer_id]:
                del self._txn_groups[producer_id]
        self._completed_while_loading.pop(partition, None)
        return gone

    def is_current(self, group: GroupMetadata) -> bool:
        """Whether the group object is the cached one of a served partition: false for a
        group whose partition was unloaded (or reloaded) while a request was using it."""
        return self.groups.get(group.group_id) is group and self.partitions.owns(
            self.partition_for(group.group_id)
        )

    def _take_seq(self, count: int) -> int:
        seq = self._next_seq
        self._next_seq += count
        return seq

    # -- writing

    async def _append(
        self,
        group_id: str,
        records: Sequence[KeyValue],
        before: Callable[[int], object] | None = None,
    ) -> int:
        """Append one batch to the group's partition; returns the first record's sequence.

        Sequences are taken before the await, so they follow the order appends were issued,
        which is the order the log applies them in. `before(seq)` changes the cache at that
        same point, before anything else can run (deletions apply there, as Kafka applies a
        write's records when it issues it).
        """
        seq = self._take_seq(len(records))
        if before is not None:
            before(seq)
        batch = encode_batch(records, self._clock.now_ms())
        partition = self.partition_for(group_id)
        await self._logged(partition, self._log.append(partition, batch), group_id)
        return seq

    async def _logged(self, partition: int, append: Awaitable[object], group_id: str) -> None:
        """Await an append, noting failures in the write-failure log (one line per run).

        The append counts as in flight for its partition until it ends, so a load of the
        partition reads only after it (see load_partition)."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        in_flight = self._appending.setdefault(partition, set())
        in_flight.add(done)
        try:
            await append
        except Exception as exc:
            if storage_error_code(exc) is not None:
                self._write_failures.failed(f"group {group_id}", exc)
            raise
        finally:
            in_flight.discard(done)
            if not in_flight and self._appending.get(partition) is in_flight:
                del self._appending[partition]
            done.set_result(None)
        self._write_failures.succeeded()

    async def append_records(
        self,
        group_id: str,
        records: Sequence[KeyValue],
        before: Callable[[int], object] | None = None,
    ) -> None:
        """Append records (tombstones) to the group's partition, calling `before(seq)` with
        the first record's sequence once it is taken and before any other request runs.
        Raises as the log does."""
        await self._append(group_id, records, before)

    def remove(self, group: GroupMetadata) -> None:
        """Drop a deleted group from the cache, if it is still the cached one."""
        if self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]

    def reinstate(self, dead: GroupMetadata, revived: GroupMetadata) -> None:
        """Put `revived` in the place of `dead` (a deletion whose tombstones were never
        written), unless the cache moved on: the partition was unloaded meanwhile."""
        if self.groups.get(dead.group_id) is dead:
            self.groups[dead.group_id] = revived

    async def store_group(self, group: GroupMetadata, assignments: dict[str, bytes]) -> ErrorCode:
        """Persist the group as it is now, with these assignments; NONE once durable."""
        return await self.store_group_record(group.group_id, group.to_record(assignments))

    async def store_group_record(self, group_id: str, record: GroupRecord) -> ErrorCode:
        entry = (encode_group_key(group_id), encode_group_value(record))
        try:
            await self._append(group_id, [entry])
        except Exception as exc:
            return append_error(exc, offsets=False)
        return ErrorCode.none

    def _too_large(
        self, offsets: dict[TopicPartition, OffsetAndMetadata]
    ) -> dict[TopicPartition, ErrorCode]:
        # offset.metadata.max.bytes counts Java chars (UTF-16 code units), as Kafka does.
        limit = self._config.offset_metadata_max_bytes
        return {
            tp: ErrorCode.offset_metadata_too_large
            for tp, value in offsets.items()
            if len(value.metadata.encode("utf-16-le")) // 2 > limit
        }

    @staticmethod
    def _offset_records(
        group_id: str, offsets: dict[TopicPartition, OffsetAndMetadata]
    ) -> list[KeyValue]:
        return [
            (encode_offset_key(group_id, tp.topic, tp.partition), encode_offset_value(v))
            for tp, v in offsets.items()
        ]

    async def store_offsets(
        self, group: GroupMetadata, offsets: dict[TopicPartition, OffsetAndMetadata]
    ) -> dict[TopicPartition, ErrorCode]:
        """Write the commits that fit; each partition's code says how it went."""
        errors = self._too_large(offsets)
        accepted = {tp: value for tp, value in offsets.items() if tp not in errors}
        if not accepted:
            return errors
        records = self._offset_records(group.group_id, accepted)
        group.offsets.prepare(accepted)
        try:
            seq = await self._append(group.group_id, records)
        except Exception as exc:
            for tp in accepted:
                group.offsets.complete(tp, None)
            return errors | dict.fromkeys(accepted, append_error(exc, offsets=True))
        for i, (tp, value) in enumerate(accepted.items()):
            group.offsets.complete(tp, CommittedOffset(value, seq + i))
        return errors | dict.fromkeys(accepted, ErrorCode.none)

    async def store_txn_offsets(
        self,
        group: GroupMetadata,
        offsets: dict[TopicPartition, OffsetAndMetadata],
        *,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        support: TxnSupport = TxnSupport.DEFAULT_ERROR,
    ) -> dict[TopicPartition, ErrorCode]:
        """Write a TxnOffsetCommit as one transactional batch; its offsets stay pending.

        They are invisible to OffsetFetch until `complete_txn` sees the transaction's COMMIT
        marker. If the log refuses the batch (the producer was fenced, the partition is not in
        its transaction) every partition gets the log's code and nothing is pending.
        """
        errors = self._too_large(offsets)
        accepted = {tp: value for tp, value in offsets.items() if tp not in errors}
        if not accepted:
            return errors
        group_id = group.group_id
        batch = encode_batch(
            self._offset_records(group_id, accepted),
            self._clock.now_ms(),
            producer_id=producer_id,
            producer_epoch=producer_epoch,
        )
        # As in _append: the sequences are taken in the order the appends are issued.
        seq = self._take_seq(len(accepted))
        entries = {
            tp: CommittedOffset(value, seq + i) for i, (tp, value) in enumerate(accepted.items())
        }
        self._txn_groups.setdefault(producer_id, set()).add(group_id)
        append = group.offsets.begin_txn_append(producer_id, entries)
        try:
            partition = self.partition_for(group_id)
            await self._logged(
                partition, self._log.append(partition, batch, transactional_id, support), group_id
            )
        except Exception as exc:
            group.offsets.finish_txn_append(append, appended=False)
            self._forget_producer(producer_id, group)
            code = append_error(exc, offsets=True)
            code = _TXN_RETRY.get(code, code)
            if storage_error_code(exc) is None:
                log.warning("transactional commit of group %s failed: %r", group_id, exc)
            return errors | dict.fromkeys(accepted, code)
        group.offsets.finish_txn_append(append, appended=True)
        self._forget_producer(producer_id, group)
        return errors | dict.fromkeys(accepted, ErrorCode.none)

    def complete_txn(self, producer_id: int, *, commit: bool, partition: int) -> None:
        """Settle a producer's pending offsets in groups of one partition after its marker.

        COMMIT installs each offset unless a newer record set that partition meanwhile;
        ABORT drops them. A second call for the same marker finds nothing left to do.
        While the partition loads the call is kept and applied once the load installs what
        it read (the marker may lie beyond the end of that read); for a partition not
        served here it does nothing (the next load replays the marker from the log).
        """
        if self.partitions.loading(partition):
            self._completed_while_loading.setdefault(partition, []).append((producer_id, commit))
            return
        group_ids = self._txn_groups.get(producer_id)
        if not group_ids:
            return
        for group_id in [g for g in group_ids if self.partition_for(g) == partition]:
            group = self.groups.get(group_id)
            if group is None:
                group_ids.discard(group_id)
                continue
            group.offsets.complete_txn(producer_id, commit=commit)
            self._forget_producer(producer_id, group)

    def _forget_producer(self, producer_id: int, group: GroupMetadata) -> None:
        """Drop the producer -> group link once nothing of that producer is pending there.

        Not for a group object that was unloaded meanwhile: the link, if any, is then a
        reloaded group's."""
        if (
            group.offsets.has_pending_txn_from(producer_id)
            or self.groups.get(group.group_id) is not group
        ):
            return
        group_ids = self._txn_groups.get(producer_id)
        if group_ids is not None:
            group_ids.discard(group.group_id)
            if not group_ids:
                del self._txn_groups[producer_id]

    # -- reading offsets

    def fetch_offsets(
        self,
        group_id: str,
        partitions: list[TopicPartition] | None,
        *,
        require_stable: bool = False,
    ) -> dict[TopicPartition, FetchedOffset]:
        """Committed offsets, whatever the group's state; -1 where nothing is committed.

        With `require_stable` a partition whose commit is not settled (a transaction still
        pending, or a commit still being written) answers UNSTABLE_OFFSET_COMMIT instead, so
        a read_committed consumer retries rather than start from an offset about to change.
        """
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return {} if partitions is None else {tp: _fetched(None) for tp in partitions}
        committed = group.offsets.all()
        wanted = list(committed) if partitions is None else partitions
        return {
            tp: _UNSTABLE
            if require_stable and group.offsets.is_unstable(tp)
            else _fetched(committed.get(tp))
            for tp in wanted
        }

    # -- retention

    async def expire_offsets(self, owns: Callable[[str], bool] = lambda _: True) -> int:
        """Drop offsets past retention and groups left with nothing; write their tombstones.
        Only groups that `owns` (the partitions still coordinated here)."""
        now = self._clock.now_ms()
        removed = 0
        for group in list(self.groups.values()):
            # Checked for each group in turn: a partition may be unloaded during an append.
            if not owns(group.group_id) or not self.is_current(group):
                continue
            tombstones: list[KeyValue] = []
            for tp in self._expired(group, now):
                group.offsets.remove(tp)
                tombstones.append((encode_offset_key(group.group_id, tp.topic, tp.partition), None))
            live = group.consumer is not None and bool(group.consumer.members)
            if group.is_(GroupState.EMPTY) and not live and not group.offsets.has_offsets():
                group.transition_to(GroupState.DEAD, now)
                del self.groups[group.group_id]
                tombstones.append((encode_group_key(group.group_id), None))
                if group.consumer is not None:
                    tombstones += consumer_tombstones(group.group_id, group.consumer)
            if not tombstones:
                continue
            removed += len(tombstones)
            try:
                await self._append(group.group_id, tombstones)
            except Exception as exc:  # the next load brings them back; they expire again
                append_error(exc, offsets=True)
        return removed

    def _expired(self, group: GroupMetadata, now: int) -> list[TopicPartition]:
        retention = self._config.offsets_retention_ms
        if group.consumer is not None:
            # As Kafka's consumer groups: offsets of topics no member subscribes to (all of
            # them once the group is empty) expire by their commit time.
            return group.offsets.expired(
                now,
                retention,
                lambda v: v.commit_timestamp_ms,
                group.consumer.subscribed_topics(),
            )
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


class _Replay:
    """One partition replayed: the newest record per key wins, markers settle transactions.

    A transactional offset record waits under its producer id. That producer's COMMIT
    marker installs it unless a newer record already set the key; ABORT drops it; what
    has no marker yet stays pending, for the transaction coordinator to finish.
    """

    def __init__(self, take_seq: Callable[[int], int]) -> None:
        self._take_seq = take_seq
        self.groups: dict[str, GroupRecord | None] = {}
        self.offsets: dict[OffsetKey, CommittedOffset | None] = {}
        self.pending: dict[int, dict[OffsetKey, CommittedOffset | None]] = {}
        # Consumer-protocol groups: the newest group and member values, decoded (None:
        # deleted). A value that does not decode is skipped: the one before it stands.
        self.consumer_groups: dict[str, ConsumerGroup | None] = {}
        self.consumer_members: dict[str, dict[str, consumer_records.MemberRecord | None]] = {}

    def add(self, entry: LogEntry) -> None:
        seq = self._take_seq(1)
        if entry.control is not None:
            settled = self.pending.pop(entry.producer_id, {})
            if entry.control == ControlType.COMMIT:
                for settled_key, committed in settled.items():
                    current = self.offsets.get(settled_key)
                    if committed is not None and (
                        current is None or current.log_seq < committed.log_seq
                    ):
                        self.offsets[settled_key] = committed
            return
        try:
            key = _decode_key(entry.key) if entry.key is not None else None
            if isinstance(key, ConsumerGroupKey):
                group = None
                if entry.value is not None:
                    group = ConsumerGroup()
                    consumer_records.decode_group_value(entry.value, group)
                self.consumer_groups[key.group] = group
            elif isinstance(key, ConsumerMemberKey):
                member = None
                if entry.value is not None:
                    member = consumer_records.decode_member_value(key.member, entry.value)
                self.consumer_members.setdefault(key.group, {})[key.member] = member
            elif isinstance(key, OffsetKey):
                value = (
                    None
                    if entry.value is None
                    else CommittedOffset(decode_offset_value(entry.value), seq)
                )
                if entry.transactional:
                    self.pending.setdefault(entry.producer_id, {})[key] = value
                else:
                    self.offsets[key] = value
                    if value is None:  # as in Kafka: a tombstone ends pending commits too
                        for pending in self.pending.values():
                            pending.pop(key, None)
            elif isinstance(key, GroupKey):
                self.groups[key.group] = (
                    None if entry.value is None else decode_group_value(entry.value)
                )
        except KafkaError as exc:
            # One undecodable record must not keep the partition from loading.
            log.error("skipping an undecodable record at offset %d: %s", entry.offset, exc)


def _decode_key(
    data: bytes,
) -> OffsetKey | GroupKey | ConsumerGroupKey | ConsumerMemberKey | None:
    version = int.from_bytes(data[:2], "big", signed=True)
    if version in consumer_records.KEY_VERSIONS:
        return consumer_records.decode_key(version, data)
    return decode_key(data)


_UNSTABLE = FetchedOffset(
    offset=-1, leader_epoch=-1, metadata="", error=ErrorCode.unstable_offset_commit
)


def _fetched(value: OffsetAndMetadata | None) -> FetchedOffset:
    if value is None:
        return FetchedOffset(offset=-1, leader_epoch=-1, metadata="")
    return FetchedOffset(value.offset, value.leader_epoch, value.metadata)
