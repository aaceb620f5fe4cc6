"""ReplicaFetcher: a follower's copy loop, one per leader broker (Kafka's
ReplicaFetcherThread, as an asyncio task).

Each round sends one Fetch with this broker's id as replica_id for every partition it
follows from that leader, appends what comes back with the leader's own offsets and leader
epochs, and, in durable mode, waits for the fsync before the next round: the next fetch
offset tells the leader what this follower holds on disk, and the leader's high watermark
never passes what every in-sync replica has made durable.

Before a partition's first fetch under a new leader epoch, the follower asks the leader
where its own latest epoch ends (OffsetsForLeaderEpoch, KIP-101/279) and truncates anything
beyond it, so that no replica keeps a tail the new leader does not have.

The leader's log start offset comes with every answer, and the follower moves its own up
to it (as far as its high watermark), so records deleted on the leader (DeleteRecords) go
here too; its next fetch reports its own, which is what the leader's low watermark waits
for. A fetch below the leader's log start answers OFFSET_OUT_OF_RANGE: the follower asks
where the leader's log starts (ListOffsets EARLIEST, as Kafka's fetchOffsetAndTruncate) and
starts over there if its own log ends before it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, Protocol

from kio.static.constants import EntityType

from onceflow.client.aio import AsyncConnection
from onceflow.client.errors import Unreachable
from onceflow.errors import ErrorCode, KafkaError
from onceflow.protocol import follower_fetch
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import build, payload_module, request_type
from onceflow.replication.follower_session import FetchState, FollowerSession, Key
from onceflow.replication.partition import Partition, Role
from onceflow.security.client_config import ClientSecurity
from onceflow.storage.failures import LogOffline, OutOfSpace
from onceflow.storage.partition_log import PartitionLog

log = logging.getLogger(__name__)

# Fetch by topic id (v13+) with the follower in ReplicaState (v15+) and its log dir id
# (v17, unused: one log dir). A topic with no id on record is fetched by name (v12).
FETCH_VERSION = 17
FETCH_BY_NAME_VERSION = 12
EPOCH_VERSION = 3
LIST_OFFSETS_VERSION = 1
EARLIEST_TIMESTAMP = -2
STOP_RETRY_S = 0.1
UNDEFINED = -1
#: The leader lost or moved on from this fetcher's session: fetch in full at once.
SESSION_ERRORS = (ErrorCode.fetch_session_id_not_found, ErrorCode.invalid_fetch_session_epoch)


@dataclass(frozen=True, slots=True)
class FetcherSettings:
    max_wait_ms: int = 500
    max_bytes: int = 10 << 20
    partition_max_bytes: int = 1 << 20
    backoff_ms: int = 1000
    socket_timeout_ms: int = 30_000
    #: How to reach and authenticate to a leader (the inter-broker listener's security).
    security: ClientSecurity | None = None


class FollowerHost(Protocol):
    """What a fetcher needs from the broker that runs it."""

    def appended(self, plog: PartitionLog) -> None: ...

    def durable(
        self, plog: PartitionLog, offset: int, follower: bool = False
    ) -> Awaitable[None]: ...


@dataclass(slots=True)
class _Followed:
    partition: Partition
    leader_epoch: int
    truncated: bool = False  # done for this leader epoch
    leader_hw: int = -1  # the high watermark the leader last reported
    leader_start: int = -1  # the log start offset the leader last reported
    out_of_range: bool = False  # to ask where the leader's log starts before fetching
    retry_at: float = 0.0  # after an error, left out of requests until then (loop time)


class ReplicaFetcher:
    def __init__(
        self,
        local_id: int,
        leader_id: int,
        address: tuple[str, int],
        settings: FetcherSettings,
        host: FollowerHost,
    ) -> None:
        self.local_id = local_id
        self.leader_id = leader_id
        self.address = address
        self.settings = settings
        self.host = host
        self.partitions: dict[tuple[str, int], _Followed] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._session = FollowerSession()
        self._conn = AsyncConnection(
            address[0], address[1], f"replica-{local_id}", self._timeout_s, settings.security
        )

    @property
    def _timeout_s(self) -> float:
        return (self.settings.socket_timeout_ms + self.settings.max_wait_ms) / 1000

    # ---- membership ------------------------------------------------------------------

    def follow(self, partition: Partition) -> None:
        """Copy this partition from the leader from now on; truncate first if needed."""
        self.partitions[partition.key] = _Followed(partition, partition.leader_epoch)
        self._wake.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def unfollow(self, key: tuple[str, int]) -> None:
        self.partitions.pop(key, None)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            # Python 3.11's wait_for drops a cancellation that arrives as the request it
            # waits for completes (the loop would then go on fetching): cancel until done.
            while not task.done():
                task.cancel()
                await asyncio.wait({task}, timeout=STOP_RETRY_S)
            if not task.cancelled():
                task.exception()  # retrieved: an ended loop's error was logged already
        self._conn.close()

    # ---- the loop --------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            if not self.partitions:
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                await self._truncate_new()
                await self._find_leader_starts()
                progressed = await self._fetch_round()
            except asyncio.CancelledError:
                raise
            except Unreachable as exc:
                log.info("replica fetcher for broker %d: %s", self.leader_id, exc)
                # The whole backoff, even if partitions are added meanwhile: they would meet
                # the same refusal, and a starting broker adds its partitions one by one (a
                # wrong inter-broker password cost the leader a TLS handshake and a failed
                # login per partition).
                await asyncio.sleep(self.settings.backoff_ms / 1000)
                continue
            except Exception:
                log.exception("replica fetcher for broker %d failed a round", self.leader_id)
                progressed = False
            if not progressed:
                await self._backoff()

    async def _backoff(self) -> None:
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), self.settings.backoff_ms / 1000)

    def _current(self, key: tuple[str, int], followed: _Followed) -> bool:
        """Whether this entry is still what we follow (not replaced while we waited)."""
        return (
            self.partitions.get(key) is followed
            and followed.partition.role is Role.FOLLOWER
            and followed.partition.leader_epoch == followed.leader_epoch
        )

    # ---- truncation (KIP-101, KIP-279) -----------------------------------------------

    async def _truncate_new(self) -> None:
        now = asyncio.get_running_loop().time()
        pending = {
            k: f for k, f in self.partitions.items() if not f.truncated and f.retry_at <= now
        }
        if not pending:
            return
        asking: dict[tuple[str, int], tuple[_Followed, int]] = {}
        for key, followed in pending.items():
            plog = followed.partition.log
            latest = plog.epochs.latest_epoch
            if latest is None or latest < 0:
                # No epochs on record (an empty log, or data without them): nothing of ours
                # is known to be beyond the high watermark's agreement.
                if plog.log_end_offset > plog.high_watermark:
                    plog.truncate_to(plog.high_watermark)
                followed.truncated = True
            else:
                asking[key] = (followed, latest)
        if not asking:
            return
        module = payload_module(ApiKey.OFFSET_FOR_LEADER_EPOCH, EPOCH_VERSION, EntityType.request)
        topics: dict[str, list[Any]] = {}
        for (topic, index), (followed, latest) in asking.items():
            topics.setdefault(topic, []).append(
                build(
                    module.OffsetForLeaderPartition,
                    partition=index,
                    current_leader_epoch=followed.leader_epoch,
                    leader_epoch=latest,
                )
            )
        request = build(
            request_type(ApiKey.OFFSET_FOR_LEADER_EPOCH, EPOCH_VERSION),
            replica_id=self.local_id,
            topics=tuple(
                build(module.OffsetForLeaderTopic, topic=t, partitions=tuple(ps))
                for t, ps in topics.items()
            ),
        )
        response = await self._conn.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, EPOCH_VERSION, request)
        for topic_result in response.topics:
            for result in topic_result.partitions:
                key = (topic_result.topic, result.partition)
                entry = asking.get(key)
                if entry is None or not self._current(key, entry[0]):
                    continue
                followed, latest = entry
                if result.error_code != ErrorCode.none:
                    log.info(
                        "%s-%d: leader %d answered OffsetsForLeaderEpoch with %s",
                        *key,
                        self.leader_id,
                        ErrorCode(result.error_code).name,
                    )
                    self._delay(followed)
                    continue
                self._truncate_to_leader(
                    followed.partition.log, latest, int(result.leader_epoch), int(result.end_offset)
                )
                followed.truncated = True

    def _truncate_to_leader(
        self, plog: PartitionLog, asked: int, epoch: int, end_offset: int
    ) -> None:
        if end_offset == UNDEFINED:
            target = plog.high_watermark  # the leader knows none of our epochs
        elif epoch != asked:
            # The leader never had our latest epoch: cut at where its epoch ends, or at the
            # end of that epoch in our own log if ours ends sooner.
            _, our_end = plog.epochs.end_offset_for(epoch, plog.log_end_offset)
            target = min(end_offset, our_end if our_end >= 0 else plog.log_end_offset)
        else:
            target = end_offset
        if target < plog.log_end_offset:
            log.info(
                "%s: truncating from %d to %d, where the leader's epoch %d ends",
                plog.name,
                plog.log_end_offset,
                target,
                epoch,
            )
            plog.truncate_to(max(target, plog.log_start_offset))

    # ---- fetching --------------------------------------------------------------------

    async def _fetch_round(self) -> bool:
        # One pass over the partitions followed (dozens on a cluster with internal topics,
        # on every round): which are ready, what the leader should hold of each, and which
        # have a tail to flush first.
        now = asyncio.get_running_loop().time()
        ready: dict[Key, _Followed] = {}
        wanted: dict[Key, FetchState] = {}
        ids: dict[str, uuid.UUID | None] = {}
        tails: list[PartitionLog] = []
        for key, f in self.partitions.items():
            partition = f.partition
            if (
                not f.truncated
                or f.out_of_range
                or f.retry_at > now
                or (partition.follower_throttle is not None and _held(f))
            ):
                continue
            plog = partition.log
            end = plog.log_end_offset
            ready[key] = f
            wanted[key] = (partition.topic_id, f.leader_epoch, end, plog.log_start_offset)
            ids[key[0]] = partition.topic_id
            if plog.flushed_offset < end and plog.config.durable:
                tails.append(plog)
        if not ready:
            return False
        # A fetch offset tells the leader what this replica holds on disk (durable mode):
        # a tail not yet flushed (recovered after a crash, say) is flushed first.
        for plog in tails:
            self.host.appended(plog)
            with contextlib.suppress(LogOffline):
                await self.host.durable(plog, plog.log_end_offset - 1, follower=True)
        version, names, request, sent, forgotten = self._fetch_request(wanted, ids)
        try:
            response = await self._conn.request(ApiKey.FETCH, version, request)
        except BaseException:
            self._session.reset()  # the leader may or may not have applied it
            raise
        error = ErrorCode(response.error_code)
        if error is not ErrorCode.none:
            self._session.reset()
            if error in SESSION_ERRORS:  # the leader restarted, say: a full fetch now
                log.debug("leader %d: %s, fetching in full", self.leader_id, error.name)
                return True
            log.info("leader %d refused a fetch: %s", self.leader_id, error.name)
            return False
        self._session.answered(version, response.session_id, sent, forgotten)
        progressed = False
        durable: list[Awaitable[None]] = []
        # Only partitions in the answer can have news (an incremental answer leaves out
        # the others; a full one holds them all).
        answered: list[tuple[Key, _Followed]] = []
        for topic_result in response.responses:
            name = names.get(topic_result.topic_id) if version >= 13 else topic_result.topic
            for data in topic_result.partitions:
                key = (name or "", data.partition_index)
                entry = ready.get(key)
                if entry is None or not self._current(key, entry):
                    continue
                answered.append((key, entry))
                if data.error_code != ErrorCode.none:
                    self._session.refused(key)
                wait = self._apply(entry, data)
                if wait is not None:
                    durable.append(wait)
                    progressed = True
        for wait in durable:
            with contextlib.suppress(LogOffline):
                await wait
        for key, followed in answered:
            if self._current(key, followed):
                plog = followed.partition.log
                if followed.leader_hw >= 0:
                    plog.update_high_watermark(min(followed.leader_hw, plog.log_end_offset))
                self._follow_log_start(plog, followed.leader_start)
        return progressed or bool(ready)

    def _fetch_request(
        self, wanted: dict[Key, FetchState], ids: dict[str, uuid.UUID | None]
    ) -> tuple[int, dict[uuid.UUID, str], Any, dict[Key, FetchState], list[tuple[Key, FetchState]]]:
        """One Fetch in this fetcher's session (follower_session.py) for the ready
        partitions (what the leader should hold of each, and their topics' ids): its
        version, the names of the topic ids asked for, the request, and the partitions it
        names and forgets. The leader answers an id it does not know (a deleted topic,
        whatever has its name now) with UNKNOWN_TOPIC_ID."""
        by_id = all(i is not None for i in ids.values())
        version = FETCH_VERSION if by_id else FETCH_BY_NAME_VERSION
        sent, forgotten = self._session.plan(version, wanted)
        max_bytes = self.settings.partition_max_bytes
        topics: dict[str, list[follower_fetch.FetchPartition]] = {}
        for (topic, index), (_, leader_epoch, fetch_offset, log_start) in sent.items():
            # No diverging-epoch answers (KIP-595, last fetched epoch -1): truncation is
            # done beforehand, by OffsetsForLeaderEpoch, at every new leader epoch.
            topics.setdefault(topic, []).append(
                follower_fetch.FetchPartition(
                    index, leader_epoch, fetch_offset, log_start, max_bytes
                )
            )
        forgetting: dict[str, tuple[uuid.UUID | None, list[int]]] = {}
        for (topic, index), (topic_id, _, _, _) in forgotten:
            forgetting.setdefault(topic, (topic_id, []))[1].append(index)
        request = follower_fetch.encode_body(
            version,
            follower_fetch.FollowerFetch(
                replica_id=self.local_id,
                max_wait_ms=self.settings.max_wait_ms,
                max_bytes=self.settings.max_bytes,
                session_id=self._session.id,
                session_epoch=self._session.epoch,
                topics=tuple(
                    follower_fetch.FetchTopic(t, ids[t], tuple(ps)) for t, ps in topics.items()
                ),
                forgotten=tuple(
                    follower_fetch.ForgottenTopic(t, i, tuple(ps))
                    for t, (i, ps) in forgetting.items()
                ),
            ),
        )
        names = {topic_id: name for name, topic_id in ids.items() if topic_id is not None}
        return version, names, request, sent, forgotten

    @staticmethod
    def _follow_log_start(plog: PartitionLog, leader_start: int) -> None:
        """Move this replica's log start offset up to the leader's (Kafka's follower does
        after every fetch), never past its own high watermark."""
        target = min(leader_start, plog.high_watermark)
        if target > plog.log_start_offset:
            with contextlib.suppress(LogOffline):
                plog.increment_log_start_offset(target)

    def _start_over_or_truncate(self, followed: _Followed, leader_start: int) -> None:
        """After OFFSET_OUT_OF_RANGE: a log that ends before the leader's starts over at
        the leader's start; any other asks the leader's epochs again (its end is ahead)."""
        plog = followed.partition.log
        if plog.log_end_offset < leader_start:
            log.info(
                "%s: the leader's log starts at %d, past ours at %d: starting over there",
                plog.name,
                leader_start,
                plog.log_end_offset,
            )
            plog.truncate_fully_and_start_at(leader_start)
        else:
            followed.truncated = False

    async def _find_leader_starts(self) -> None:
        """Ask the leader where its logs start (ListOffsets EARLIEST) for the partitions
        whose fetch was out of range."""
        now = asyncio.get_running_loop().time()
        asking = {k: f for k, f in self.partitions.items() if f.out_of_range and f.retry_at <= now}
        if not asking:
            return
        module = payload_module(ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, EntityType.request)
        topics: dict[str, list[Any]] = {}
        for topic, index in asking:
            topics.setdefault(topic, []).append(
                build(
                    module.ListOffsetsPartition, partition_index=index, timestamp=EARLIEST_TIMESTAMP
                )
            )
        request = build(
            request_type(ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION),
            replica_id=self.local_id,
            topics=tuple(
                build(module.ListOffsetsTopic, name=t, partitions=tuple(ps))
                for t, ps in topics.items()
            ),
        )
        response = await self._conn.request(ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, request)
        for topic_result in response.topics:
            for result in topic_result.partitions:
                key = (topic_result.name, result.partition_index)
                followed = asking.get(key)
                if followed is None or not self._current(key, followed):
                    continue
                if result.error_code != ErrorCode.none:
                    log.info(
                        "%s-%d: leader %d answered ListOffsets with %s",
                        *key,
                        self.leader_id,
                        ErrorCode(result.error_code).name,
                    )
                    self._delay(followed)
                    continue
                followed.out_of_range = False
                self._start_over_or_truncate(followed, int(result.offset))

    def _delay(self, followed: _Followed) -> None:
        followed.retry_at = asyncio.get_running_loop().time() + self.settings.backoff_ms / 1000

    def _apply(self, followed: _Followed, data: Any) -> Awaitable[None] | None:
        plog = followed.partition.log
        error = ErrorCode(data.error_code)
        if error is ErrorCode.offset_out_of_range:
            if data.log_start_offset < 0:
                followed.out_of_range = True  # the answer does not say where it starts
            else:
                self._start_over_or_truncate(followed, int(data.log_start_offset))
            return None
        if error is not ErrorCode.none:
            if error in (ErrorCode.fenced_leader_epoch, ErrorCode.not_leader_or_follower):
                log.debug("%s: leader %d says %s", plog.name, self.leader_id, error.name)
            else:
                log.info("%s: leader %d answered %s", plog.name, self.leader_id, error.name)
            # Kafka's delayed partitions: until the metadata catches up, asking again at
            # once would only spin; the other partitions go on being fetched.
            self._delay(followed)
            return None
        followed.leader_hw = int(data.high_watermark)
        followed.leader_start = int(data.log_start_offset)
        records = data.records
        if not records:
            return None
        try:
            result = plog.append_as_follower(records)
        except OutOfSpace as exc:
            log.warning("%s: cannot copy from the leader: %s", plog.name, exc)
            return None
        except (LogOffline, KafkaError) as exc:
            log.warning("%s: cannot copy from the leader: %s", plog.name, exc)
            followed.truncated = False
            return None
        self.host.appended(plog)
        quota = followed.partition.follower_throttle
        if quota is not None:
            quota.record(len(records))
        if plog.config.durable:
            return self.host.durable(plog, result.last_offset, follower=True)
        return None


def _held(followed: _Followed) -> bool:
    """Left out of this fetch by the follower throttle (Kafka's shouldFollowerThrottle):
    the partition is throttled, this replica is outside the ISR and the rate is over."""
    partition = followed.partition
    quota = partition.follower_throttle
    return quota is not None and partition.local_id not in partition.isr and quota.exceeded()
