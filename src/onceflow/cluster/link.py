"""ClusterLink: one broker's session with ZooKeeper, its registration, and the watches that
keep its MetadataCache current.

Brokers learn every change from ZooKeeper's watches rather than from the controller's
LeaderAndIsr and UpdateMetadata requests (the other design Kafka's ZooKeeper era allowed):
the znodes are the single source of truth, every write to them is fenced (controller epoch,
compare-and-set), and ZooKeeper delivers a session's watch events in order. Kazoo runs the
callbacks on its own thread; each one only reads ZooKeeper and hands a change to the event
loop, where the cache is updated and the broker is told.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from onceflow.cluster.metadata import MetadataCache, TopicMetadata, VersionedState
from onceflow.cluster.zk_store import ZkMetadataStore
from onceflow.cluster.znodes import (
    BROKER_IDS,
    CONTROLLER,
    ELECT_LEADERS,
    SHUTTING_DOWN,
    TOPICS,
    BrokerRegistration,
    CorruptZnode,
    ElectionRequest,
    PartitionState,
    TopicAssignment,
    decode_controller,
    decode_topic_config,
    partition_state_path,
    topic_config_path,
    topic_path,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MetadataChange:
    """What changed: "brokers", "controller", "topic" (assignment, configs or deletion),
    "configs" (a topic's config overrides alone), "partition" (a partition's state),
    "elections" (ElectLeaders requests for the controller) or "session" (lost, then
    renewed)."""

    kind: str
    topic: str = ""
    partition: int = -1


Listener = Callable[[MetadataChange], None]


class ClusterLink:
    def __init__(
        self,
        store: ZkMetadataStore,
        registration: BrokerRegistration,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.store = store
        self.registration = registration
        self.cache = MetadataCache()
        self.listeners: list[Listener] = []
        self.session_lost = False
        self._loop = loop
        self._lock = threading.Lock()
        self._topic_generation: dict[str, int] = {}  # watches of an older generation end
        self._watched_partitions: set[tuple[str, int, int]] = set()
        self._watched_configs: set[tuple[str, int]] = set()
        self._closed = False
        self._tasks: set[asyncio.Task[None]] = set()

    # ---- lifecycle (blocking: run in a thread) ---------------------------------------

    def start(self, timeout_s: float) -> None:
        self.store.start(timeout_s)
        self.store.register_broker(self.registration)
        self.store.on_session(self._session_changed)
        self.store.watch_children(BROKER_IDS, self._brokers_changed)
        self.store.watch_children(SHUTTING_DOWN, self._shutting_down_changed)
        self.store.watch_data(CONTROLLER, self._controller_changed)
        self.store.watch_children(TOPICS, self._topics_changed)
        self.store.watch_children(ELECT_LEADERS, self._elections_changed)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.store.close()

    # ---- kazoo's thread --------------------------------------------------------------

    def _post(self, apply: Callable[[], MetadataChange | None]) -> None:
        if not self._closed:
            self._loop.call_soon_threadsafe(self._apply, apply)

    def _session_changed(self, state: str) -> None:
        if state == "lost":
            self._post(lambda: self._mark_session(lost=True))
        elif state == "connected":
            self._post(lambda: self._mark_session(lost=False))

    def _brokers_changed(self, children: list[str]) -> None:
        brokers: dict[int, BrokerRegistration] = {}
        for name in children:
            try:
                found = self.store.read(f"{BROKER_IDS}/{name}")
                if found is not None:
                    brokers[int(name)] = BrokerRegistration.decode(int(name), found[0])
            except (CorruptZnode, ValueError) as exc:
                log.warning("ignoring broker registration %s: %s", name, exc)

        def apply() -> MetadataChange:
            self.cache.brokers = brokers
            return MetadataChange("brokers")

        self._post(apply)

    def _shutting_down_changed(self, children: list[str]) -> None:
        ids = {int(name) for name in children if name.isdigit()}

        def apply() -> MetadataChange:
            self.cache.shutting_down = ids
            return MetadataChange("brokers")

        self._post(apply)

    def _elections_changed(self, children: list[str]) -> None:
        requests: dict[str, ElectionRequest] = {}
        for name in children:
            path = f"{ELECT_LEADERS}/{name}"
            try:
                found = self.store.read(path)
                if found is not None:
                    requests[name] = ElectionRequest.decode(path, found[0])
            except CorruptZnode as exc:
                log.warning("ignoring election request %s: %s", name, exc)

        def apply() -> MetadataChange:
            self.cache.election_requests = requests
            return MetadataChange("elections")

        self._post(apply)

    def _controller_changed(self, raw: bytes | None, version: int) -> bool:
        controller: int | None = None
        if raw is not None:
            try:
                controller = decode_controller(raw)
            except CorruptZnode as exc:
                log.warning("%s", exc)

        def apply() -> MetadataChange:
            self.cache.controller_id = controller
            return MetadataChange("controller")

        self._post(apply)
        return not self._closed

    def _topics_changed(self, children: list[str]) -> None:
        with self._lock:
            new = [name for name in children if name not in self._topic_generation]
            for name in new:
                self._topic_generation[name] = self._topic_generation.get(name, 0) + 1
        for name in new:
            self._watch_topic(name, self._topic_generation[name])

    def _watch_topic(self, topic: str, generation: int) -> None:
        def changed(raw: bytes | None, version: int) -> bool:
            with self._lock:
                if self._closed or self._topic_generation.get(topic) != generation:
                    return False
                if raw is None:
                    del self._topic_generation[topic]
            if raw is None:
                self._post(lambda: self._drop_topic(topic))
                return False
            try:
                decoded = TopicAssignment.decode(topic, raw)
                configs, config_version = self.store.topic_configs(topic)
            except CorruptZnode as exc:
                log.warning("%s", exc)
                return True
            meta = TopicMetadata(
                topic,
                decoded.topic_id,
                decoded.partitions,
                configs,
                config_version,
                decoded.adding,
                decoded.removing,
                version,
            )
            self._post(lambda: self._set_topic(meta))
            for partition in decoded.partitions:
                self._watch_partition(topic, partition, generation)
            self._watch_configs(topic, generation)
            return True

        self.store.watch_data(topic_path(topic), changed)

    def _watch_configs(self, topic: str, generation: int) -> None:
        """A topic's config overrides, changed by AlterConfigs on any broker."""
        with self._lock:
            if (topic, generation) in self._watched_configs:
                return
            self._watched_configs.add((topic, generation))

        def changed(raw: bytes | None, version: int) -> bool:
            with self._lock:
                if self._closed or self._topic_generation.get(topic) != generation:
                    self._watched_configs.discard((topic, generation))
                    return False
            if raw is None:
                return True
            try:
                configs = decode_topic_config(topic, raw)
            except CorruptZnode as exc:
                log.warning("%s", exc)
                return True
            self._post(lambda: self._set_configs(topic, configs, version))
            return True

        self.store.watch_data(topic_config_path(topic), changed)

    def _watch_partition(self, topic: str, partition: int, generation: int) -> None:
        with self._lock:
            key = (topic, partition, generation)
            if key in self._watched_partitions:
                return
            self._watched_partitions.add(key)
        path = partition_state_path(topic, partition)

        def changed(raw: bytes | None, version: int) -> bool:
            with self._lock:
                if self._closed or self._topic_generation.get(topic) != generation:
                    self._watched_partitions.discard(key)
                    return False
            if raw is None:
                return True  # not created yet: the controller is about to
            try:
                state = PartitionState.decode(path, raw)
            except CorruptZnode as exc:
                log.warning("%s", exc)
                return True
            self._post(lambda: self._set_state(topic, partition, VersionedState(state, version)))
            return True

        self.store.watch_data(path, changed)

    # ---- the event loop --------------------------------------------------------------

    async def wait_for(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until `predicate()` holds; False if `timeout_s` passes first. It is checked
        now and again after each change this link applies to the cache, once the listeners
        registered before it (the replica manager, the controller) have reacted, so it may
        read their state too: code on the event loop waits for ZooKeeper's news instead of
        polling. An exception from `predicate` is raised here."""
        if predicate():
            return True
        done: asyncio.Future[bool] = self._loop.create_future()

        def check(_change: MetadataChange) -> None:
            if done.done():
                return
            try:
                if predicate():
                    done.set_result(True)
            except Exception as exc:
                done.set_exception(exc)

        self.listeners.append(check)
        try:
            return await asyncio.wait_for(done, timeout_s)
        except TimeoutError:
            return False
        finally:
            self.listeners.remove(check)

    def _apply(self, apply: Callable[[], MetadataChange | None]) -> None:
        change = apply()
        if change is None:
            return
        for listener in list(self.listeners):
            try:
                listener(change)
            except Exception:
                log.exception("metadata listener failed on %s", change)

    def _mark_session(self, lost: bool) -> MetadataChange | None:
        if lost:
            log.warning("ZooKeeper session lost: this broker is unregistered until it reconnects")
            self.session_lost = True
            return MetadataChange("session")
        if not self.session_lost:
            return None
        self.session_lost = False
        log.info("ZooKeeper session renewed: registering this broker again")
        task = self._loop.create_task(asyncio.to_thread(self._reregister))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return MetadataChange("session")

    def _reregister(self) -> None:
        """Register again after a new session; retried while ZooKeeper is unsteady (a
        broker that stayed unregistered would count as dead for ever)."""
        while not self._closed and not self.session_lost:
            try:
                self.store.reregister_broker(self.registration)
                return
            except Exception as exc:
                log.warning(
                    "registering broker %d again failed: %r; retrying",
                    self.registration.broker_id,
                    exc,
                )
                time.sleep(1.0)

    def _set_topic(self, meta: TopicMetadata) -> MetadataChange:
        known = self.cache.topics.get(meta.name)
        if known is not None and known.topic_id != meta.topic_id:
            # Deleted and made again, the deletion unseen: nothing of the old topic (its
            # partition states' versions, its config version) applies to the new one.
            self.cache.drop_topic(meta.name)
            known = None
        if known is not None and known.config_version > meta.config_version:
            meta = dataclasses.replace(
                meta, configs=known.configs, config_version=known.config_version
            )
        self.cache.topics[meta.name] = meta
        return MetadataChange("topic", meta.name)

    def _set_configs(
        self, topic: str, configs: dict[str, str], version: int
    ) -> MetadataChange | None:
        known = self.cache.topics.get(topic)
        if known is None or known.config_version >= version:
            return None  # gone, or a newer read is applied already
        self.cache.topics[topic] = dataclasses.replace(
            known, configs=configs, config_version=version
        )
        return MetadataChange("configs", topic)

    def _drop_topic(self, topic: str) -> MetadataChange:
        self.cache.drop_topic(topic)
        return MetadataChange("topic", topic)

    def _set_state(self, topic: str, partition: int, state: VersionedState) -> MetadataChange:
        known = self.cache.states.get((topic, partition))
        if known is not None and known.version > state.version:
            return MetadataChange("partition", topic, partition)  # stale read; keep newer
        self.cache.states[(topic, partition)] = state
        return MetadataChange("partition", topic, partition)
