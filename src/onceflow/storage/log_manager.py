"""LogManager: the data directory, its topics, and every partition log in it.

On-disk layout (Kafka's, plus one metadata file because there is no controller):

    <log.dir>/onceflow-topics.json              topics, partition counts, config overrides,
                                                the partitions hosted here
    <log.dir>/recovery-point-offset-checkpoint  flushed offset per partition
    <log.dir>/log-start-offset-checkpoint       log start offset per partition, where it is
                                                past the first segment (DeleteRecords)
    <log.dir>/.kafka_cleanshutdown              present only after a clean shutdown
    <log.dir>/<topic>-<partition>/<20-digit base offset>.log|.index|.timeindex
    <log.dir>/<topic>-<partition>/leader-epoch-checkpoint

A single broker hosts every partition of its topics (`TopicInfo.hosted` is None, and the
topics file has no "hosted" field, as before). A broker of a cluster hosts the replicas
assigned to it: `host_partition` and `drop_partition` keep the hosted set, and `load`
opens only those.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from onceflow.clock import Clock
from onceflow.errors import ErrorCode, KafkaError
from onceflow.storage import offset_checkpoint
from onceflow.storage.disk_space import DiskSpaceGuard
from onceflow.storage.failures import LogOffline, OutOfSpace
from onceflow.storage.fs import FileSystem, is_out_of_space
from onceflow.storage.partition_log import LogConfig, PartitionLog, partition_dir
from onceflow.storage.recovery import open_partition

log = logging.getLogger(__name__)

TOPICS_FILE = "onceflow-topics.json"
RECOVERY_CHECKPOINT = "recovery-point-offset-checkpoint"
CLEAN_SHUTDOWN = ".kafka_cleanshutdown"
DELETE_SUFFIX = "-delete"

ConfigFactory = Callable[[Mapping[str, str]], LogConfig]


@dataclass(slots=True)
class TopicInfo:
    name: str
    partitions: int  # the topic's partition count (not only those hosted here)
    configs: dict[str, str] = field(default_factory=dict)
    topic_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    internal: bool = False
    hosted: set[int] | None = None  # the partitions with a replica here; None: all

    def hosted_partitions(self) -> list[int]:
        if self.hosted is None:
            return list(range(self.partitions))
        return sorted(self.hosted)

    def is_hosted(self, partition: int) -> bool:
        if self.hosted is None:
            return 0 <= partition < self.partitions
        return partition in self.hosted


class LogManager:
    def __init__(
        self,
        fs: FileSystem,
        log_dir: str,
        clock: Clock,
        config_factory: ConfigFactory,
        space: DiskSpaceGuard | None = None,
    ) -> None:
        self.fs = fs
        self.space = space
        # Told when a partition goes offline (the coordinators unload theirs).
        self.offline_listeners: list[Callable[[PartitionLog], None]] = []
        self._checkpoint_failing = False
        self.log_dir = log_dir
        self.clock = clock
        self.config_factory = config_factory
        self.topics: dict[str, TopicInfo] = {}
        self.logs: dict[tuple[str, int], PartitionLog] = {}
        self.clean_start = False
        self.deleted_logs: list[PartitionLog] = []  # their descriptors close after a delay
        # Hosted partitions closed by drop_partition(delete=False): their files stay, and
        # their recovery points stay in the checkpoint, for a later host_partition or start.
        self.closed: dict[tuple[str, int], int] = {}
        # Their log start offsets, where past the first segment (log-start-offset-checkpoint).
        self.closed_starts: dict[tuple[str, int], int] = {}
        self._log_start_failing = False
        self._log_start_held = 0  # > 0: moves are checkpointed once, when the hold ends
        self._log_start_pending = False
        # The partitions the checkpoint file on disk names (read at load, or last written):
        # hosting one of them again must first write it without the old recovery point.
        self._checkpointed: set[tuple[str, int]] = set()

    # ---- startup and shutdown --------------------------------------------------------

    def load(self) -> None:
        fs = self.fs
        fs.makedirs(self.log_dir)
        marker = os.path.join(self.log_dir, CLEAN_SHUTDOWN)
        self.clean_start = fs.exists(marker)
        self.topics = self._read_topics()
        points = self._read_checkpoint()
        starts = self._read_log_starts()
        self._checkpointed = set(points)
        wanted = {f"{t.name}-{p}" for t in self.topics.values() for p in t.hosted_partitions()}
        for name in fs.listdir(self.log_dir):
            path = os.path.join(self.log_dir, name)
            if fs.isdir(path) and name not in wanted and _is_partition_dir(name):
                # A deleted topic whose files outlived the metadata change. Only names of
                # the <topic>-<partition> form: anything else (lost+found at a mount root,
                # an operator's backup) is not ours to delete.
                log.info("removing %s: not a partition of any topic", path)
                fs.rmtree(path)
        for topic in self.topics.values():
            for p in topic.hosted_partitions():
                key = (topic.name, p)
                self._open(topic, p, points.get(key, 0), self.clean_start, starts.get(key, 0))
        if self.clean_start:
            fs.remove(marker)
            fs.fsync_dir(self.log_dir)

    def _open(
        self, topic: TopicInfo, partition: int, point: int, clean: bool, log_start: int = 0
    ) -> PartitionLog:
        plog, stats = open_partition(
            self.fs,
            partition_dir(self.log_dir, topic.name, partition),
            topic.name,
            partition,
            self.config_factory(topic.configs),
            self.clock,
            point,
            clean,
            log_start,
        )
        if stats.segments_scanned and not clean:
            log.info(
                "recovered %s: scanned %d segments, replayed %d batches of producer state",
                plog.name,
                stats.segments_scanned,
                stats.batches_replayed,
            )
        plog.on_roll = self.checkpoint_recovery_points
        plog.on_log_start_moved = self._log_start_moved
        plog.on_offline = self._log_offline
        plog.space = self.space
        self.logs[(topic.name, partition)] = plog
        return plog

    def _log_offline(self, plog: PartitionLog) -> None:
        for listener in self.offline_listeners:
            listener(plog)

    @property
    def offline_logs(self) -> list[PartitionLog]:
        return [plog for plog in self.logs.values() if plog.offline is not None]

    def flush_all(self) -> None:
        """Flush every online log; one that fails goes offline, the others are flushed."""
        for plog in self.logs.values():
            if plog.offline is None:
                with contextlib.suppress(LogOffline):
                    plog.flush()

    def shutdown(self) -> None:
        """Flush, checkpoint, close, and mark the shutdown clean so startup skips scans.

        Not clean if any log is offline or the checkpoint could not be written: the next
        start then recovers from the files, trusting nothing the failure may have left."""
        self.flush_all()
        self.checkpoint_recovery_points()
        unsnapshotted = [plog.name for plog in self.logs.values() if not plog.close()]
        if unsnapshotted:
            log.warning(
                "producer snapshots of %d partitions not written at shutdown (e.g. %s); "
                "the next start replays their logs instead",
                len(unsnapshotted),
                unsnapshotted[0],
            )
        for plog in self.deleted_logs:
            plog.close_retired(force=True)
        offline = self.offline_logs
        if offline or self._checkpoint_failing:
            log.warning(
                "shutdown is not clean (%s): the next start recovers from the log files",
                f"{len(offline)} logs offline" if offline else "the checkpoint failed",
            )
            return
        try:
            self.fs.write_file_atomic(os.path.join(self.log_dir, CLEAN_SHUTDOWN), b"")
        except OSError as exc:
            log.warning("clean-shutdown marker not written (%s): the next start recovers", exc)

    def close_retired(self) -> None:
        """Close descriptors of deleted or replaced segments once their delay passed."""
        for plog in [*self.logs.values(), *self.deleted_logs]:
            plog.close_retired()
        self.deleted_logs = [p for p in self.deleted_logs if p.retired]

    # ---- topics ----------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        partitions: int,
        configs: Mapping[str, str] | None = None,
        internal: bool = False,
    ) -> TopicInfo:
        if name in self.topics:
            raise KafkaError(ErrorCode.topic_already_exists, f"topic '{name}' already exists")
        info = TopicInfo(name, partitions, dict(configs or {}), internal=internal)
        self.config_factory(info.configs)  # reject bad configs before anything is written
        # A recovery point left by an earlier topic of the same name (deleted less than a
        # checkpoint interval ago) says nothing about the new topic's files, yet recovery
        # would skip scanning segments below it. Rewrite the checkpoint without it before
        # the topic exists, so no crash can pair the two.
        if not self.checkpoint_recovery_points():
            raise OutOfSpace(f"cannot create topic '{name}': the checkpoint cannot be written")
        self.topics[name] = info
        try:
            self._write_topics()
            for p in range(partitions):
                self._open(info, p, 0, clean=True)  # new and empty: nothing to recover
            self.fs.fsync_dir(self.log_dir)
        except OSError as exc:
            # Nothing of the topic is left behind: a name in the topics file without its
            # directories (or the reverse) would be repaired at the next start anyway.
            del self.topics[name]
            for p in range(partitions):
                self._discard(name, p)
            raise _metadata_failure(exc, f"create topic '{name}'") from exc
        return info

    def _discard(self, name: str, partition: int) -> None:
        """Take back a partition whose creation failed: close its log, remove its files."""
        opened = self.logs.pop((name, partition), None)
        if opened is not None:
            opened.close()
        self.fs.rmtree(partition_dir(self.log_dir, name, partition))

    def add_partitions(self, name: str, total: int) -> None:
        """Grow a topic hosted whole here (a broker alone) to `total` partitions. The topics
        file names them first; a crash before their directories exist leaves partitions
        the next start creates empty."""
        info = self.topics.get(name)
        if info is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"no topic '{name}'")
        old = info.partitions
        if total <= old:
            raise KafkaError(
                ErrorCode.invalid_partitions,
                f"topic '{name}' has {old} partitions, which is not fewer than {total}",
            )
        info.partitions = total
        try:
            self._write_topics()
            for p in range(old, total):
                self._open(info, p, 0, clean=True)  # new and empty: nothing to recover
            self.fs.fsync_dir(self.log_dir)
        except OSError as exc:
            info.partitions = old
            for p in range(old, total):
                opened = self.logs.pop((name, p), None)
                if opened is not None:
                    opened.close()
                self.fs.rmtree(partition_dir(self.log_dir, name, p))
            raise _metadata_failure(exc, f"add partitions to '{name}'") from exc

    def update_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        """Replace a topic's config overrides (AlterConfigs, or the cluster's new ones) and
        apply them to its open logs: retention, roll, cleanup and append checks read the
        new values from their next use. Bad configs are refused before anything is written;
        the topics file is written before any log changes."""
        info = self.topics.get(name)
        if info is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"no topic '{name}'")
        config = self.config_factory(configs)
        if dict(configs) != info.configs:
            saved, info.configs = info.configs, dict(configs)
            try:
                self._write_topics()
            except OSError as exc:
                info.configs = saved
                raise _metadata_failure(exc, f"update configs of '{name}'") from exc
        self._set_config(info, config)

    def refresh_configs(self) -> None:
        """Re-derive every open log's config: the broker's defaults changed."""
        for info in self.topics.values():
            try:
                config = self.config_factory(info.configs)
            except KafkaError as exc:  # its overrides clash with the new defaults
                log.warning("config of %s not refreshed: %s", info.name, exc.message)
                continue
            self._set_config(info, config)

    def _set_config(self, info: TopicInfo, config: LogConfig) -> None:
        for partition in info.hosted_partitions():
            plog = self.logs.get((info.name, partition))
            if plog is not None:
                plog.config = config

    def delete_topic(self, name: str) -> None:
        info = self.topics.pop(name, None)
        if info is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"no topic '{name}'")
        try:
            self._write_topics()
        except OSError as exc:
            self.topics[name] = info
            raise _metadata_failure(exc, f"delete topic '{name}'") from exc
        for p in info.hosted_partitions():
            plog = self.logs.pop((name, p), None)
            if plog is not None:
                plog.delete()
                self.deleted_logs.append(plog)
            else:  # closed by drop_partition, or never opened
                self.closed.pop((name, p), None)
                self.closed_starts.pop((name, p), None)
                self.fs.rmtree(partition_dir(self.log_dir, name, p))

    # ---- hosting a subset of partitions (a broker of a cluster) ----------------------

    def host_partition(
        self,
        name: str,
        partitions_total: int,
        partition: int,
        configs: Mapping[str, str] | None = None,
        topic_id: str | None = None,
        internal: bool = False,
    ) -> PartitionLog:
        """Open this broker's replica of a partition, creating it if it is new here.

        Idempotent: a partition already open is returned as it is. The topic entry is
        created if needed (with `topic_id`, or a new one, and `internal`); its partition
        count and configs (when given) follow the arguments, though the config of logs
        already open is not changed here. A topic known
        here under another id was deleted and created again while this broker was away:
        its local data is deleted first (as delete_topic does), then the new partition is
        created empty. A partition hosted here but closed is reopened from its files.

        Crash safety as for create_topic: the recovery-point checkpoint is rewritten first
        if it still names this partition, then the topics file names the partition, then
        its directory is made; a crash in between leaves a hosted partition whose missing
        directory the next start creates empty. Leftover files of a partition not hosted
        here are never trusted: they are removed before it is created.
        """
        if partitions_total <= partition or partition < 0:
            raise KafkaError(
                ErrorCode.unknown_topic_or_partition,
                f"partition {partition} of '{name}' is outside its {partitions_total} partitions",
            )
        info = self.topics.get(name)
        if info is not None and topic_id is not None and info.topic_id != topic_id:
            log.warning(
                "topic '%s' here has id %s, the cluster's has id %s: it was deleted and "
                "created again, so the local data of the old topic is deleted",
                name,
                info.topic_id,
                topic_id,
            )
            self.delete_topic(name)
            info = None
        key = (name, partition)
        if info is not None and info.is_hosted(partition):
            self._update_topic(info, partitions_total, configs)
            plog = self.logs.get(key)
            if plog is None:
                start = self.closed_starts.pop(key, 0)
                plog = self._open(info, partition, self.closed.pop(key, 0), False, start)
            return plog
        # Refuse bad configs before anything is written.
        if configs is not None:
            self.config_factory(configs)
        fresh = info is None
        if info is None:
            info = TopicInfo(name, partitions_total, dict(configs or {}), internal=internal)
            info.hosted = set()
            if topic_id is not None:
                info.topic_id = topic_id
        directory = partition_dir(self.log_dir, name, partition)
        if self.fs.isdir(directory):
            log.info("removing %s: left over from a partition not hosted here", directory)
            self.fs.rmtree(directory)
        if key in self._checkpointed and not self.checkpoint_recovery_points():
            raise OutOfSpace(f"cannot host {name}-{partition}: the checkpoint cannot be written")
        saved = (info.partitions, info.configs, _copy(info.hosted))
        self._update_topic(info, partitions_total, configs, write=False)
        if info.hosted is not None:
            info.hosted.add(partition)
        self.topics[name] = info
        try:
            self._write_topics()
            plog = self._open(info, partition, 0, clean=True)  # new and empty
            self.fs.fsync_dir(self.log_dir)
        except OSError as exc:
            if fresh:
                del self.topics[name]
            else:
                info.partitions, info.configs, info.hosted = saved
            self._discard(name, partition)
            raise _metadata_failure(exc, f"host {name}-{partition}") from exc
        return plog

    def drop_partition(self, topic: str, partition: int, delete: bool) -> bool:
        """Stop hosting a partition here; False if it was not hosted.

        With `delete` (the replica moved away, or the topic is gone) the topics file stops
        naming it first, then its files are removed (a crash in between leaves a directory
        the next start removes); the topic entry goes when its last partition does.
        Without, the log is flushed and closed but stays hosted: its files and recovery
        point are kept, and host_partition or the next start opens it again.
        """
        info = self.topics.get(topic)
        if info is None or not info.is_hosted(partition):
            return False
        key = (topic, partition)
        if not delete:
            plog = self.logs.pop(key, None)
            if plog is not None:
                if plog.offline is None:
                    with contextlib.suppress(LogOffline):
                        plog.flush()
                # An offline log's files are recovered from scratch when it is reopened.
                self.closed[key] = plog.recovery_point if plog.offline is None else 0
                if plog.log_start_offset > plog.segments[0].base_offset:
                    self.closed_starts[key] = plog.log_start_offset
                plog.close(delay=True)
                self.deleted_logs.append(plog)
            return True
        hosted = set(info.hosted_partitions())
        hosted.discard(partition)
        saved = info.hosted
        if hosted:
            info.hosted = hosted
        else:
            del self.topics[topic]
        try:
            self._write_topics()
        except OSError as exc:
            info.hosted = saved
            self.topics[topic] = info
            raise _metadata_failure(exc, f"drop {topic}-{partition}") from exc
        plog = self.logs.pop(key, None)
        self.closed.pop(key, None)
        self.closed_starts.pop(key, None)
        if plog is not None:
            plog.delete()
            self.deleted_logs.append(plog)
        else:
            self.fs.rmtree(partition_dir(self.log_dir, topic, partition))
        return True

    def _update_topic(
        self,
        info: TopicInfo,
        partitions_total: int,
        configs: Mapping[str, str] | None,
        *,
        write: bool = True,
    ) -> None:
        """Bring a topic entry's partition count and configs up to date with the cluster's
        view; write the topics file if they changed. (The id and internal flag of a topic
        never change: another id is another topic.)"""
        saved = (info.partitions, info.configs, _copy(info.hosted))
        changed = False
        if partitions_total != info.partitions:
            if info.hosted is None:
                info.hosted = set(range(info.partitions))  # "all" keeps meaning the old ones
            info.partitions = partitions_total
            changed = True
        if configs is not None and dict(configs) != info.configs:
            info.configs = dict(configs)
            changed = True
        if changed and write:
            try:
                self._write_topics()
            except OSError as exc:
                info.partitions, info.configs, info.hosted = saved
                raise _metadata_failure(exc, f"update topic '{info.name}'") from exc

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self.logs.get((topic, partition))

    def __iter__(self) -> Iterator[PartitionLog]:
        return iter(list(self.logs.values()))

    # ---- retention -------------------------------------------------------------------

    def enforce_retention(self) -> int:
        """Delete whole segments past retention.ms or retention.bytes, and those wholly
        below the log start offset; return how many."""
        now = self.clock.now_ms()
        deleted = 0
        for plog in self:
            cfg = plog.config
            if plog.offline is not None:
                continue
            # Whatever the cleanup policy, as Kafka: what DeleteRecords cut off goes.
            deleted += plog.delete_segments_below_start()
            if not cfg.cleanup_delete:
                continue
            count = 0
            if cfg.retention_ms >= 0:
                for segment in plog.segments[:-1]:
                    if now - segment.max_timestamp <= cfg.retention_ms:
                        break
                    count += 1
            if cfg.retention_bytes >= 0:
                excess = plog.size_bytes - cfg.retention_bytes
                by_size = 0
                for segment in plog.segments[:-1]:
                    if excess < segment.size:
                        break
                    excess -= segment.size
                    by_size += 1
                count = max(count, by_size)
            if count:
                removed = plog.delete_oldest_segments(count)
                if removed:
                    log.info(
                        "retention deleted %d segments of %s; log start offset is now %d",
                        removed,
                        plog.name,
                        plog.log_start_offset,
                    )
                deleted += removed
        return deleted

    # ---- metadata files --------------------------------------------------------------

    def _read_topics(self) -> dict[str, TopicInfo]:
        path = os.path.join(self.log_dir, TOPICS_FILE)
        if not self.fs.exists(path):
            return {}
        raw = json.loads(self.fs.read_file(path))
        return {
            name: TopicInfo(
                name,
                int(t["partitions"]),
                {str(k): str(v) for k, v in t.get("configs", {}).items()},
                str(t["id"]),
                bool(t.get("internal", False)),
                {int(p) for p in t["hosted"]} if "hosted" in t else None,
            )
            for name, t in raw["topics"].items()
        }

    def _write_topics(self) -> None:
        body = {
            "version": 1,
            "topics": {t.name: _topic_json(t) for t in self.topics.values()},
        }
        data = json.dumps(body, indent=1, sort_keys=True).encode()
        self.fs.write_file_atomic(os.path.join(self.log_dir, TOPICS_FILE), data)

    def checkpoint_recovery_points(self) -> bool:
        """Kafka's checkpoint format: version, count, then `topic partition offset` lines.
        Returns whether it was written (with the log start offsets' checkpoint)."""
        starts_written = self.checkpoint_log_start_offsets()
        points = {(p.topic, p.partition): p.recovery_point for p in self.logs.values()}
        points.update(self.closed)
        lines = [f"{t} {p} {point}" for (t, p), point in points.items()]
        data = "\n".join(["0", str(len(lines)), *lines]) + "\n"
        try:
            self.fs.write_file_atomic(
                os.path.join(self.log_dir, RECOVERY_CHECKPOINT), data.encode()
            )
            self._checkpointed = set(points)
        except OSError as exc:
            # The old checkpoint stays, and it only claims less: recovery scans more.
            if not self._checkpoint_failing:
                log.warning("recovery-point checkpoint not written (%s); retried later", exc)
            self._checkpoint_failing = True
            return False
        if self._checkpoint_failing:
            log.info("recovery-point checkpoint written again")
        self._checkpoint_failing = False
        return starts_written

    def _log_start_moved(self, plog: PartitionLog) -> None:
        if self._log_start_held:
            self._log_start_pending = True
        else:
            self.checkpoint_log_start_offsets()

    @contextlib.contextmanager
    def log_start_batch(self) -> Iterator[None]:
        """Checkpoint the log start offsets moved inside the block once, at its end (a
        DeleteRecords over many partitions writes the file once, not once each)."""
        self._log_start_held += 1
        try:
            yield
        finally:
            self._log_start_held -= 1
            if not self._log_start_held and self._log_start_pending:
                self._log_start_pending = False
                self.checkpoint_log_start_offsets()

    @property
    def log_start_checkpoint_failing(self) -> bool:
        """The last write of log-start-offset-checkpoint failed: a moved log start offset
        may not survive a restart yet."""
        return self._log_start_failing

    def checkpoint_log_start_offsets(self) -> bool:
        """Write log-start-offset-checkpoint: the log start offsets past the first segment's
        base (the base itself survives on disk as the segment's name). Written whenever one
        moves (DeleteRecords, a follower following its leader, a truncation below it) and
        with every recovery-point checkpoint, so a deleted topic's entry never outlives it
        long enough to meet a new topic of the same name. Returns whether it was written."""
        starts = {
            (p.topic, p.partition): p.log_start_offset
            for p in self.logs.values()
            if p.log_start_offset > p.segments[0].base_offset
        }
        starts.update(self.closed_starts)
        path = os.path.join(self.log_dir, offset_checkpoint.LOG_START_CHECKPOINT)
        try:
            offset_checkpoint.write(self.fs, path, starts)
        except OSError as exc:
            if not self._log_start_failing:
                log.warning("log-start-offset checkpoint not written (%s); retried later", exc)
            self._log_start_failing = True
            return False
        if self._log_start_failing:
            log.info("log-start-offset checkpoint written again")
        self._log_start_failing = False
        return True

    def _read_log_starts(self) -> dict[tuple[str, int], int]:
        path = os.path.join(self.log_dir, offset_checkpoint.LOG_START_CHECKPOINT)
        try:
            return offset_checkpoint.read(self.fs, path)
        except (ValueError, IndexError, UnicodeDecodeError):
            log.error(
                "ignoring an unreadable %s: records deleted with DeleteRecords may be "
                "readable again until it is deleted again",
                path,
            )
            return {}

    def _read_checkpoint(self) -> dict[tuple[str, int], int]:
        path = os.path.join(self.log_dir, RECOVERY_CHECKPOINT)
        if not self.fs.exists(path):
            return {}
        try:
            lines = self.fs.read_file(path).decode().splitlines()
            count = int(lines[1])
            points: dict[tuple[str, int], int] = {}
            for line in lines[2 : 2 + count]:
                topic, partition, offset = line.rsplit(" ", 2)
                points[(topic, int(partition))] = int(offset)
            return points
        except (ValueError, IndexError, UnicodeDecodeError):
            log.warning("ignoring an unreadable %s: recovering every segment", path)
            return {}


def _topic_json(info: TopicInfo) -> dict[str, object]:
    """A topic's entry in the topics file; "hosted" only when it is a subset, so a single
    broker's file stays as it was."""
    body: dict[str, object] = {
        "partitions": info.partitions,
        "configs": info.configs,
        "id": info.topic_id,
        "internal": info.internal,
    }
    if info.hosted is not None:
        body["hosted"] = sorted(info.hosted)
    return body


def _copy(hosted: set[int] | None) -> set[int] | None:
    return None if hosted is None else set(hosted)


def _metadata_failure(exc: OSError, what: str) -> KafkaError:
    if is_out_of_space(exc):
        return OutOfSpace(f"no space left on the log dir to {what}: {exc}")
    return KafkaError(ErrorCode.kafka_storage_error, f"could not {what}: {exc}")


def _is_partition_dir(name: str) -> bool:
    """True for `<topic>-<partition>` names, the only directories the broker creates."""
    topic, dash, partition = name.rpartition("-")
    return bool(topic) and bool(dash) and partition.isdigit()
