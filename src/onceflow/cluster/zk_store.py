"""The cluster's metadata in ZooKeeper, through kazoo: Kafka's ZooKeeper-era design.

Consensus is ZooKeeper's, never ours: a broker is alive while its ephemeral znode exists,
the controller is whoever created the ephemeral `/controller`, and every change a
controller makes to partition state is a compare-and-set on the znode's version together
with a check that `/controller_epoch` is still the version it wrote when it was elected
(Kafka's `checkControllerAndUpdate`). A controller that was paused and lost its session
therefore cannot write: its check fails and it learns it is fenced.

Errors are few and named: ZooKeeperUnavailable (cannot connect in time), DuplicateBroker,
TopicExists, StaleVersion (lost a compare-and-set) and ControllerFenced.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError
from kazoo.handlers.threading import KazooTimeoutError

from onceflow.cluster.znodes import (
    BROKER_IDS,
    CONTROLLER,
    CONTROLLER_EPOCH,
    PERSISTENT_PATHS,
    PRODUCER_ID_BLOCK,
    TOPICS,
    BrokerRegistration,
    PartitionState,
    ProducerIdBlock,
    broker_path,
    decode_assignment,
    decode_controller,
    decode_epoch,
    encode_assignment,
    encode_controller,
    partition_state_path,
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


class StaleVersion(MetadataStoreError):
    """A compare-and-set lost: someone changed the znode since it was read."""


class ControllerFenced(StaleVersion):
    """A newer controller was elected since this one: it may not write any more."""


@dataclass(frozen=True, slots=True)
class Election:
    """A won controller election: the new epoch, and the znode version that fences it."""

    epoch: int
    epoch_version: int


class ZkMetadataStore:
    def __init__(self, connect: str, session_timeout_ms: int = 18_000) -> None:
        self.connect = connect
        self._zk = KazooClient(hosts=connect, timeout=session_timeout_ms / 1000)

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
        """End the session: this broker's ephemeral znodes go at once."""
        with contextlib.suppress(Exception):
            self._zk.stop()
        self._zk.close()

    # ---- brokers ---------------------------------------------------------------------

    def register_broker(self, registration: BrokerRegistration) -> None:
        try:
            self._zk.create(
                broker_path(registration.broker_id), registration.encode(), ephemeral=True
            )
        except NodeExistsError as exc:
            raise DuplicateBroker(
                f"broker.id {registration.broker_id} is already registered in ZooKeeper at "
                f"{self.connect}: another broker runs with the same id"
            ) from exc

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

    def create_topic(
        self,
        topic: str,
        topic_id: str,
        assignment: dict[int, list[int]],
        states: dict[int, PartitionState],
        election: Election,
    ) -> None:
        """The assignment and every partition's first state, all or nothing, and only while
        this controller is not fenced."""
        txn = self._zk.transaction()
        txn.check(CONTROLLER_EPOCH, election.epoch_version)
        txn.create(topic_path(topic), encode_assignment(topic_id, assignment))
        txn.create(f"{topic_path(topic)}/partitions")
        for partition, state in sorted(states.items()):
            txn.create(f"{topic_path(topic)}/partitions/{partition}")
            txn.create(partition_state_path(topic, partition), state.encode())
        index, error = _failure(txn.commit())
        if index == 0:
            raise ControllerFenced(f"controller epoch {election.epoch} is no longer current")
        if index == 1 and isinstance(error, NodeExistsError):
            raise TopicExists(f"topic '{topic}' already exists")
        if error is not None:
            raise MetadataStoreError(f"creating topic '{topic}' failed: {error!r}")

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
