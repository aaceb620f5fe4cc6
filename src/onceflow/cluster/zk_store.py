"""The cluster's metadata in ZooKeeper, through kazoo: Kafka's ZooKeeper-era design.

Consensus is ZooKeeper's, never ours: a broker is alive while its ephemeral znode exists,
the controller is whoever created the ephemeral `/controller`, and every change a
controller makes to partition state is a compare-and-set on the znode's version together
with a check that `/controller_epoch` is still the version it wrote when it was elected
(Kafka's `checkControllerAndUpdate`). A controller that was paused and lost its session
therefore cannot write: its check fails and it learns it is fenced.

Errors are few and named: ZooKeeperUnavailable (cannot connect in time), DuplicateBroker,
TopicExists, NoSuchTopic, StaleVersion (lost a compare-and-set) and ControllerFenced.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch
from kazoo.retry import KazooRetry

from onceflow.cluster.znodes import (
    BROKER_IDS,
    CLUSTER_ID,
    CONTROLLER,
    CONTROLLER_EPOCH,
    ELECT_LEADERS,
    PERSISTENT_PATHS,
    PRODUCER_ID_BLOCK,
    TOPICS,
    BrokerRegistration,
    ElectionRequest,
    PartitionState,
    ProducerIdBlock,
    broker_path,
    decode_assignment,
    decode_cluster_id,
    decode_controller,
    decode_epoch,
    decode_topic_config,
    encode_assignment,
    encode_cluster_id,
    encode_controller,
    encode_topic_config,
    left_by_earlier_run,
    partition_state_path,
    shutting_down_path,
    topic_config_path,
    topic_path,
)

log = logging.getLogger(__name__)


class MetadataStoreError(Exception):
    """A cluster-metadata operation that did not happen; the message says why."""


class ZooKeeperUnavailable(MetadataStoreError):
    pass


class DuplicateBroker(MetadataStoreError):
    pass


class TopicExists(MetadataStoreError):
    pass


class NoSuchTopic(MetadataStoreError):
    pass


class StaleVersion(MetadataStoreError):
    """A compare-and-set lost: someone changed the znode since it was read."""


class ControllerFenced(StaleVersion):
    """A newer controller was elected since this one: it may not write any more."""


@dataclass(frozen=True, slots=True)
class Election:
    """A won controller election: the new epoch, and the znode version that fences it."""

    epoch: int
    epoch_version: int


def registration_wait_s(session_timeout_ms: int) -> float:
    """How long a restarted broker waits for its earlier run's registration to go. The old
    session expires at most its timeout after its last heartbeat, rounded up by the server
    to its next tick; a tick is at most half a session (ZooKeeper grants no session shorter
    than two ticks), and the deletion then takes a moment to reach this broker."""
    return session_timeout_ms * 1.5 / 1000 + 2.0


class ZkMetadataStore:
    def __init__(self, connect: str, session_timeout_ms: int = 18_000) -> None:
        self.connect = connect
        self.session_timeout_ms = session_timeout_ms
        self._closing = threading.Event()
        self._waiters: set[threading.Event] = set()  # woken by close()
        # Reconnect promptly after an outage (kazoo's default backs off up to an hour, which
        # would leave a broker unregistered long after ZooKeeper is back).
        retry = KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0)
        self._zk = KazooClient(
            hosts=connect, timeout=session_timeout_ms / 1000, connection_retry=retry
        )

    def start(self, timeout_s: float = 10.0) -> None:
        try:
            self._zk.start(timeout=timeout_s)
        except KazooTimeoutError as exc:
            self._zk.close()
            raise ZooKeeperUnavailable(
                f"cannot connect to ZooKeeper at {self.connect} within {timeout_s:g} s "
                "(zookeeper.connect)"
            ) from exc
        for path in PERSISTENT_PATHS:
            self._zk.ensure_path(path)

    def close(self) -> None:
        """End the session: this broker's ephemeral znodes go at once. A registration
        waiting for an earlier run's session gives up."""
        self._closing.set()
        for waiter in list(self._waiters):
            waiter.set()
        with contextlib.suppress(Exception):
            self._zk.stop()
        self._zk.close()

    # ---- watches (callbacks run on kazoo's thread) -----------------------------------

    def on_session(self, callback: Callable[[str], None]) -> None:
        """`callback("lost" | "suspended" | "connected")` at each change of the session.
        After "lost" the ephemeral znodes are gone; kazoo reconnects with a new session."""
        names = {KazooState.LOST: "lost", KazooState.SUSPENDED: "suspended"}

        def listener(state: str) -> None:
            callback(names.get(state, "connected"))

        self._zk.add_listener(listener)

    def watch_children(self, path: str, callback: Callable[[list[str]], None]) -> None:
        """`callback(children)` now and at every change, for as long as the session lives
        or is renewed (kazoo re-arms the watch)."""
        ChildrenWatch(self._zk, path, callback)

    def watch_data(self, path: str, callback: Callable[[bytes | None, int], bool]) -> None:
        """`callback(data, version)` now and at every change; data None when the znode
        does not exist (version -1). The watch ends when the callback returns False."""

        def relay(data: bytes | None, stat: object) -> bool:
            version = int(getattr(stat, "version", -1)) if data is not None else -1
            return callback(data, version)

        DataWatch(self._zk, path, relay)

    def read(self, path: str) -> tuple[bytes, int] | None:
        """A znode's data and version; None when it does not exist."""
        try:
            raw, stat = self._zk.get(path)
        except NoNodeError:
            return None
        return bytes(raw), int(stat.version)

    def update(self, path: str, change: Callable[[bytes | None], bytes]) -> tuple[bytes, int]:
        """Replace a znode's data with `change(current)` (None: absent) atomically: on a
        concurrent change by another broker, read again and retry. Returns what was
        written and its znode version. Blocking: call it from a thread."""
        while True:
            current = self.read(path)
            data = change(None if current is None else current[0])
            try:
                if current is None:
                    self._zk.create(path, data, makepath=True)
                    return data, 0
                stat = self._zk.set(path, data, version=current[1])
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue
            return data, int(stat.version)

    def children(self, path: str) -> list[str]:
        """A znode's children, sorted; none when it does not exist."""
        try:
            return sorted(self._zk.get_children(path))
        except NoNodeError:
            return []

    def update_notified(
        self, path: str, change: Callable[[bytes | None], bytes], prefix: str, notice: bytes
    ) -> tuple[bytes, int]:
        """`update`, with a sequential notification `prefix<10 digits>` created in the same
        transaction: whoever watches the notifications never misses a change that was
        written, even if this broker dies right after (Kafka writes the two apart)."""
        self._zk.ensure_path(path.rsplit("/", 1)[0])
        while True:
            current = self.read(path)
            data = change(None if current is None else current[0])
            txn = self._zk.transaction()
            if current is None:
                txn.create(path, data)
            else:
                txn.set_data(path, data, version=current[1])
            txn.create(prefix, notice, sequence=True)
            results = txn.commit()
            _, error = _failure(results)
            if error is None:
                return data, 0 if current is None else int(results[0].version)
            if not isinstance(error, (BadVersionError, NodeExistsError, NoNodeError)):
                raise MetadataStoreError(f"{path}: {error!r}")

    def delete(self, path: str) -> None:
        """Delete a childless znode; gone already is fine."""
        with contextlib.suppress(NoNodeError):
            self._zk.delete(path)

    def topic_configs(self, topic: str) -> tuple[dict[str, str], int]:
        """A topic's config overrides and their znode version (-1: none written)."""
        found = self.read(topic_config_path(topic))
        if found is None:
            return {}, -1
        return decode_topic_config(topic, found[0]), found[1]

    def update_topic_configs(
        self, topic: str, change: Callable[[dict[str, str]], dict[str, str]], write: bool
    ) -> int:
        """Replace a topic's overrides with `change(current)` (which raises to refuse them)
        by compare-and-set, retried on a concurrent change; return the new znode version.
        Without `write`, only check. NoSuchTopic after `change` when the topic does not
        exist (Kafka validates configs before it looks the topic up)."""
        path = topic_config_path(topic)
        while True:
            found = self.read(path)
            configs = change({} if found is None else decode_topic_config(topic, found[0]))
            if self._zk.exists(topic_path(topic)) is None:
                raise NoSuchTopic(f"no topic '{topic}'")
            if not write:
                return -1 if found is None else found[1]
            txn = self._zk.transaction()
            txn.check(topic_path(topic), -1)  # any version: the topic still exists
            if found is None:
                txn.create(path, encode_topic_config(configs))
            else:
                txn.set_data(path, encode_topic_config(configs), version=found[1])
            results = txn.commit()
            index, error = _failure(results)
            if error is None:
                return 0 if found is None else int(results[1].version)
            if index == 0:
                raise NoSuchTopic(f"no topic '{topic}'")
            if not isinstance(error, (BadVersionError, NodeExistsError, NoNodeError)):
                raise MetadataStoreError(f"configs of '{topic}': {error!r}")

    def reregister_broker(self, registration: BrokerRegistration) -> None:
        """After a lost session: the ephemeral registration again (it may still be there
        for a moment if the old session's expiry has not been processed)."""
        with contextlib.suppress(NoNodeError):
            self._zk.delete(broker_path(registration.broker_id))
        self._zk.create(broker_path(registration.broker_id), registration.encode(), ephemeral=True)

    def enter_controlled_shutdown(self, broker_id: int) -> None:
        """Ask the controller to move leadership off this broker (an ephemeral znode, so a
        broker that dies instead is not excluded for ever)."""
        with contextlib.suppress(NodeExistsError):
            self._zk.create(shutting_down_path(broker_id), b"", ephemeral=True)

    def request_election(self, request: ElectionRequest) -> str:
        """Hand an ElectLeaders request to the controller; its znode's name. Ephemeral: a
        broker that dies with one pending takes it away (its client retries elsewhere)."""
        path = self._zk.create(
            f"{ELECT_LEADERS}/request-", request.encode(), ephemeral=True, sequence=True
        )
        return str(path).rsplit("/", 1)[-1]

    def finish_election(self, name: str) -> None:
        """The controller has acted on the request `name`."""
        with contextlib.suppress(NoNodeError):
            self._zk.delete(f"{ELECT_LEADERS}/{name}")

    def cluster_id(self, proposed: str) -> str:
        """The cluster's id: `proposed` if this is the first broker ever, else the one made
        by the first broker (Kafka's /cluster/id)."""
        try:
            self._zk.create(CLUSTER_ID, encode_cluster_id(proposed), makepath=True)
            return proposed
        except NodeExistsError:
            raw, _ = self._zk.get(CLUSTER_ID)
            return decode_cluster_id(raw)

    # ---- brokers ---------------------------------------------------------------------

    def register_broker(
        self, registration: BrokerRegistration, *, wait_s: float | None = None
    ) -> None:
        """Create this broker's ephemeral registration; DuplicateBroker if a live broker
        holds its id. Blocking: call it from a thread.

        A registration with this broker's own address is its earlier run's, left by a
        kill -9 or crash until ZooKeeper expires that session (`left_by_earlier_run`):
        rather than make the operator wait that out by hand, log one line and watch the
        znode until it goes, up to `wait_s` (by default `registration_wait_s` of the
        session timeout)."""
        path = broker_path(registration.broker_id)
        deadline: float | None = None
        while True:
            with contextlib.suppress(NodeExistsError):
                self._zk.create(path, registration.encode(), ephemeral=True)
                return
            changed = threading.Event()
            try:
                held, stat = self._zk.get(path, watch=lambda _event, woken=changed: woken.set())
            except NoNodeError:
                continue  # expired between the two calls: register now
            session = self._zk.client_id
            if session is not None and stat.ephemeralOwner == session[0]:
                return  # this session's own (a create whose answer was lost)
            if not left_by_earlier_run(bytes(held), registration):
                raise DuplicateBroker(self._duplicate_message(registration.broker_id))
            if deadline is None:
                limit = registration_wait_s(self.session_timeout_ms) if wait_s is None else wait_s
                deadline = time.monotonic() + limit
                log.warning(
                    "broker.id %d is still registered in ZooKeeper with this broker's address "
                    "%s:%d, by an earlier run whose session 0x%x has not expired yet; waiting "
                    "up to %.1f s for it to expire",
                    registration.broker_id,
                    registration.host,
                    registration.port,
                    stat.ephemeralOwner,
                    limit,
                )
            self._waiters.add(changed)
            try:
                if not self._closing.is_set():
                    changed.wait(max(deadline - time.monotonic(), 0.0))
            finally:
                self._waiters.discard(changed)
            if self._closing.is_set():
                raise MetadataStoreError(
                    f"broker.id {registration.broker_id}: closed while waiting for an earlier "
                    "run's registration to expire"
                )
            if not changed.is_set():
                raise DuplicateBroker(
                    f"{self._duplicate_message(registration.broker_id)} (its registration, "
                    f"with this broker's address {registration.host}:{registration.port}, "
                    "outlived the longest an earlier run's session could take to expire)"
                )

    def _duplicate_message(self, broker_id: int) -> str:
        return (
            f"broker.id {broker_id} is already registered in ZooKeeper at "
            f"{self.connect}: another broker runs with the same id"
        )

    def live_brokers(self) -> dict[int, BrokerRegistration]:
        brokers = {}
        for name in self._zk.get_children(BROKER_IDS):
            with contextlib.suppress(NoNodeError):  # it just went away
                raw, _ = self._zk.get(f"{BROKER_IDS}/{name}")
                brokers[int(name)] = BrokerRegistration.decode(int(name), raw)
        return brokers

    # ---- the controller --------------------------------------------------------------

    def controller(self) -> int | None:
        try:
            raw, _ = self._zk.get(CONTROLLER)
        except NoNodeError:
            return None
        return decode_controller(raw)

    def controller_epoch(self) -> tuple[int, int]:
        """(epoch, znode version); (0, -1) before the first election."""
        try:
            raw, stat = self._zk.get(CONTROLLER_EPOCH)
        except NoNodeError:
            return 0, -1
        return decode_epoch(raw), stat.version

    def try_elect(self, broker_id: int, timestamp_ms: int) -> Election | None:
        """Become the controller if there is none; None if another broker is.

        Creating `/controller` and bumping `/controller_epoch` is one ZooKeeper
        transaction, so two brokers can never both win the same epoch."""
        with contextlib.suppress(NodeExistsError):
            self._zk.create(CONTROLLER_EPOCH, b"0")
        epoch, version = self.controller_epoch()
        txn = self._zk.transaction()
        txn.create(CONTROLLER, encode_controller(broker_id, timestamp_ms), ephemeral=True)
        txn.set_data(CONTROLLER_EPOCH, str(epoch + 1).encode(), version=version)
        results = txn.commit()
        if _failure(results)[1] is not None:
            return None
        return Election(epoch + 1, results[1].version)

    # ---- topics and partition state --------------------------------------------------

    def topics(self) -> list[str]:
        return sorted(self._zk.get_children(TOPICS))

    def create_topic_assignment(
        self,
        topic: str,
        topic_id: str,
        assignment: dict[int, list[int]],
        configs: dict[str, str],
    ) -> None:
        """What any broker writes to create a topic (Kafka's admin path): the assignment and
        the config overrides, in one transaction. The controller then elects leaders."""
        config_exists = self._zk.exists(topic_config_path(topic)) is not None
        txn = self._zk.transaction()
        txn.create(topic_path(topic), encode_assignment(topic_id, assignment))
        if config_exists:  # left by a deleted topic of the same name
            txn.set_data(topic_config_path(topic), encode_topic_config(configs))
        else:
            txn.create(topic_config_path(topic), encode_topic_config(configs))
        index, error = _failure(txn.commit())
        if index == 0 and isinstance(error, NodeExistsError):
            raise TopicExists(f"topic '{topic}' already exists")
        if error is not None:
            raise MetadataStoreError(f"creating topic '{topic}' failed: {error!r}")

    def create_partition_states(
        self, topic: str, states: dict[int, PartitionState], election: Election
    ) -> None:
        """The first state of new partitions, written by the controller while not fenced."""
        txn = self._zk.transaction()
        txn.check(CONTROLLER_EPOCH, election.epoch_version)
        if self._zk.exists(f"{topic_path(topic)}/partitions") is None:
            txn.create(f"{topic_path(topic)}/partitions")
        for partition, state in sorted(states.items()):
            if self._zk.exists(f"{topic_path(topic)}/partitions/{partition}") is None:
                txn.create(f"{topic_path(topic)}/partitions/{partition}")
            txn.create(partition_state_path(topic, partition), state.encode())
        index, error = _failure(txn.commit())
        if index == 0:
            raise ControllerFenced(f"controller epoch {election.epoch} is no longer current")
        if isinstance(error, NodeExistsError):
            raise StaleVersion(f"{topic}: a partition state exists already")
        if error is not None:
            raise MetadataStoreError(f"states of '{topic}': {error!r}")

    def add_partitions(
        self, topic: str, assignment: dict[int, list[int]], expected: dict[int, list[int]]
    ) -> None:
        """Grow a topic's assignment (CreatePartitions): a compare-and-set against the
        assignment the caller read, so two concurrent requests cannot both add."""
        try:
            raw, stat = self._zk.get(topic_path(topic))
        except NoNodeError as exc:
            raise MetadataStoreError(f"no topic '{topic}'") from exc
        topic_id, current = decode_assignment(topic, raw)
        if current != expected:
            raise StaleVersion(f"the partitions of '{topic}' changed meanwhile")
        try:
            self._zk.set(
                topic_path(topic), encode_assignment(topic_id, assignment), version=stat.version
            )
        except BadVersionError as exc:
            raise StaleVersion(f"the partitions of '{topic}' changed meanwhile") from exc

    def delete_topic(self, topic: str) -> None:
        """Remove the topic's znodes; every broker's watch then drops its replicas."""
        try:
            self._zk.delete(topic_path(topic), recursive=True)
        except NoNodeError as exc:
            raise MetadataStoreError(f"no topic '{topic}'") from exc
        with contextlib.suppress(NoNodeError):
            self._zk.delete(topic_config_path(topic))

    def topic_assignment(self, topic: str) -> tuple[str, dict[int, list[int]]] | None:
        try:
            raw, _ = self._zk.get(topic_path(topic))
        except NoNodeError:
            return None
        return decode_assignment(topic, raw)

    def partition_state(self, topic: str, partition: int) -> tuple[PartitionState, int] | None:
        """The state and its znode version (for the next compare-and-set)."""
        path = partition_state_path(topic, partition)
        try:
            raw, stat = self._zk.get(path)
        except NoNodeError:
            return None
        return PartitionState.decode(path, raw), stat.version

    def update_partition_state(
        self,
        topic: str,
        partition: int,
        state: PartitionState,
        expected_version: int,
        election: Election,
    ) -> int:
        """Compare-and-set one partition's state; return its new znode version."""
        txn = self._zk.transaction()
        txn.check(CONTROLLER_EPOCH, election.epoch_version)
        txn.set_data(partition_state_path(topic, partition), state.encode(), expected_version)
        results = txn.commit()
        index, error = _failure(results)
        if index == 0:
            raise ControllerFenced(f"controller epoch {election.epoch} is no longer current")
        if isinstance(error, BadVersionError):
            raise StaleVersion(
                f"{topic}-{partition}: state changed since version {expected_version}"
            )
        if error is not None:
            raise MetadataStoreError(f"{topic}-{partition}: {error!r}")
        return int(results[1].version)

    def update_partition_states(
        self,
        changes: list[tuple[str, int, PartitionState, int]],
        election: Election,
    ) -> bool:
        """Many compare-and-sets (topic, partition, state, expected version) in one
        ZooKeeper transaction with the controller check: all or none. False when one of
        them lost (the caller falls back to one at a time)."""
        txn = self._zk.transaction()
        txn.check(CONTROLLER_EPOCH, election.epoch_version)
        for topic, partition, state, version in changes:
            txn.set_data(partition_state_path(topic, partition), state.encode(), version)
        index, error = _failure(txn.commit())
        if index == 0:
            raise ControllerFenced(f"controller epoch {election.epoch} is no longer current")
        if error is None:
            return True
        if isinstance(error, (BadVersionError, NoNodeError)):
            return False
        raise MetadataStoreError(f"partition states: {error!r}")

    def update_isr(
        self, topic: str, partition: int, state: PartitionState, expected_version: int
    ) -> int:
        """A leader's own ISR change (Kafka's ZooKeeper-era leaders wrote it themselves): a
        compare-and-set on the version the leader last saw, so a leader deposed meanwhile
        (the controller wrote a newer state) fails with StaleVersion."""
        try:
            stat = self._zk.set(
                partition_state_path(topic, partition), state.encode(), version=expected_version
            )
        except BadVersionError as exc:
            raise StaleVersion(
                f"{topic}-{partition}: state changed since version {expected_version}"
            ) from exc
        except NoNodeError as exc:
            raise StaleVersion(f"{topic}-{partition}: the partition is gone") from exc
        return int(stat.version)

    # ---- producer ids ----------------------------------------------------------------

    def allocate_producer_ids(self, broker_id: int, block_size: int) -> ProducerIdBlock:
        """The next block of producer ids, unique in the cluster for ever: a
        compare-and-set on `/latest_producer_id_block`, retried while others win."""
        while True:
            try:
                raw, stat = self._zk.get(PRODUCER_ID_BLOCK)
            except NoNodeError:
                block = ProducerIdBlock(broker_id, 0, block_size - 1)
                try:
                    self._zk.create(PRODUCER_ID_BLOCK, block.encode())
                except NodeExistsError:
                    continue
                return block
            last = ProducerIdBlock.decode(raw)
            block = ProducerIdBlock(broker_id, last.end + 1, last.end + block_size)
            try:
                self._zk.set(PRODUCER_ID_BLOCK, block.encode(), version=stat.version)
            except BadVersionError:
                continue
            return block


def _failure(results: list[object]) -> tuple[int, Exception | None]:
    """The operation that failed a ZooKeeper transaction and its error; (-1, None) when it
    succeeded. Every other operation of a failed one reports RolledBackError."""
    for index, result in enumerate(results):
        if isinstance(result, Exception) and not isinstance(result, RolledBackError):
            return index, result
    return -1, None
