"""The topology seam's contract: a single broker and a one-broker ZooKeeper cluster answer
the broker's questions alike (nodes and their racks, controller, topics and their ids,
partitions and their leaders, topic creation, more partitions, config changes, deletion, the
coordinator of a key, what an acks=all write waits for, elections). Each case runs a Broker in
this process, the ZooKeeper one against a real ZooKeeper server (Debian's package)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from onceflow.broker.broker import Broker
from onceflow.config import load_broker_config
from onceflow.errors import ErrorCode, KafkaError
from onceflow.records.batch import scan_batches
from onceflow.records.builder import build_batch
from tests.helpers.broker import free_port
from tests.helpers.zookeeper import ZooKeeperEnsemble

LISTENER = "PLAINTEXT"


@pytest.fixture(scope="module")
def zk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperEnsemble]:
    ensemble = ZooKeeperEnsemble(tmp_path_factory.mktemp("zk"), 1).start()
    try:
        yield ensemble
    finally:
        ensemble.stop()


@pytest.fixture(params=["standalone", "zookeeper"])
def make_broker(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Broker]:
    """A fresh broker of each kind; the ZooKeeper one in a namespace of its own."""
    port = free_port()
    overrides = {
        "log.dirs": str(tmp_path / "data"),
        "listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "offsets.topic.num.partitions": "2",
        "transaction.state.log.num.partitions": "2",
        "onceflow.fsync.on.ack": "true",
        "broker.rack": "r1",
    }
    if request.param == "zookeeper":
        ensemble: ZooKeeperEnsemble = request.getfixturevalue("zk")
        overrides |= {
            "zookeeper.connect": f"{ensemble.connect}/t{time.monotonic_ns()}",
            "zookeeper.session.timeout.ms": "4000",
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
        }

    def make() -> Broker:
        config, warnings = load_broker_config(None, overrides)
        assert not warnings
        return Broker(config)

    return make


def run(make: Callable[[], Broker], body: Callable[[Broker], Awaitable[None]]) -> None:
    async def main() -> None:
        broker = make()
        await broker.start()
        try:
            await body(broker)
        finally:
            await broker.stop()

    asyncio.run(main())


async def eventually(check: Callable[[], bool], what: str, timeout_s: float = 15.0) -> None:
    """The ZooKeeper topology learns through watches: wait, bounded, for it to see `what`."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"never: {what}"
        await asyncio.sleep(0.05)


def test_one_broker_is_the_whole_cluster(make_broker: Callable[[], Broker]) -> None:
    async def body(broker: Broker) -> None:
        topology = broker.topology
        me = broker.node_id
        port = broker.config.advertised_listener_for(LISTENER).port
        assert topology.nodes(LISTENER) == [(me, "127.0.0.1", port)]
        assert topology.endpoint(me, LISTENER) == ("127.0.0.1", port)
        assert topology.endpoint(me + 1, LISTENER) is None
        assert topology.racks() == {me: "r1"}
        await eventually(lambda: topology.controller_id() == me, "this broker is controller")
        assert topology.alive_brokers() == frozenset({me})
        summary = topology.replication_summary()
        assert summary.under_replicated == 0
        assert summary.active_controller

    run(make_broker, body)


def test_topics_are_created_grown_configured_and_deleted_alike(
    make_broker: Callable[[], Broker],
) -> None:
    async def body(broker: Broker) -> None:
        topology = broker.topology
        me = broker.node_id
        created = await broker.create_topic("orders", 2, {"retention.ms": "60000"})
        assert (created.partitions, created.replication_factor) == (2, 1)
        info = topology.topic("orders")
        assert info is not None and info.topic_id == str(created.topic_id)
        assert (info.partitions, info.configs["retention.ms"], info.internal) == (2, "60000", False)
        # An internal topic exists from the start alone, from first use on a cluster.
        await eventually(
            lambda: broker.coordinator_node(0, "a-group", LISTENER) is not None,
            "the internal topic",
        )
        names = topology.topic_names()
        assert names[0] == "orders" and names.index("orders") < names.index("__consumer_offsets")
        for partition in range(2):
            assert topology.has_partition("orders", partition)
            view = topology.partition_view("orders", partition)
            assert (view.error, view.leader, view.replicas, view.isr, view.offline) == (
                ErrorCode.none,
                me,
                (me,),
                (me,),
                (),
            )
            await eventually(
                lambda p=partition: (
                    topology.replica(topology.leader_log("orders", p)) is None
                    or topology.leads(topology.leader_log("orders", p))
                ),
                "leading the new partition",
            )
            assert topology.leads(topology.leader_log("orders", partition))
        assert not topology.has_partition("orders", 2)
        with pytest.raises(KafkaError) as missing:
            topology.leader_log("nothing", 0)
        assert missing.value.code is ErrorCode.unknown_topic_or_partition

        with pytest.raises(KafkaError) as too_many:
            await broker.create_topic("wide", 1, replication_factor=2)
        assert too_many.value.code is ErrorCode.invalid_replication_factor
        with pytest.raises(KafkaError) as fewer:
            await broker.create_partitions("orders", 1, None, validate_only=False)
        assert fewer.value.code is ErrorCode.invalid_partitions

        await broker.create_partitions("orders", 3, None, validate_only=False)
        await eventually(lambda: topology.partition_view("orders", 2).leader == me, "new leader")
        assert topology.topic("orders").partitions == 3  # type: ignore[union-attr]

        await broker.alter_topic_configs(
            "orders", lambda current: {**current, "retention.ms": "120000"}, validate_only=False
        )
        assert topology.topic("orders").configs["retention.ms"] == "120000"  # type: ignore[union-attr]
        with pytest.raises(KafkaError) as bad:
            await broker.alter_topic_configs(
                "orders", lambda current: {"retention.ms": "soon"}, validate_only=False
            )
        assert bad.value.code is ErrorCode.invalid_config

        await broker.delete_topic("orders")
        await eventually(lambda: topology.topic("orders") is None, "the topic gone")
        assert not topology.has_partition("orders", 0)

    run(make_broker, body)


def test_coordinators_and_acknowledgements(make_broker: Callable[[], Broker]) -> None:
    async def body(broker: Broker) -> None:
        me = broker.node_id
        port = broker.config.advertised_listener_for(LISTENER).port

        def coordinator() -> tuple[int, str, int] | None:
            return broker.coordinator_node(0, "a-group", LISTENER)

        # A first lookup on a cluster creates the internal topic and waits for its leader,
        # so it is answered at once (alone, the topic was made at start).
        assert await broker.find_coordinator(0, "a-group", LISTENER) == (me, "127.0.0.1", port)
        assert coordinator() == (me, "127.0.0.1", port)
        assert await broker.find_coordinator(1, "a-txn", LISTENER) == (me, "127.0.0.1", port)
        await eventually(lambda: broker.coordinator_available(1, "a-txn"), "its load done")

        await broker.create_topic("acks", 1)
        await eventually(lambda: broker.topology.partition_view("acks", 0).leader == me, "leader")
        await eventually(
            lambda: broker.topology.leads(broker.topology.leader_log("acks", 0)), "leading"
        )
        plog = broker.topology.log_for_produce("acks", 0)
        batch = build_batch([(b"k", b"v", ())], timestamp_ms=int(time.time() * 1000))
        scanned, _ = scan_batches(batch)
        result = plog.append_batches(batch, [b.header for b in scanned], from_client=False)
        broker.writes.appended(plog)
        wait = broker.writes.acknowledgement(plog, result.last_offset, -1, 5000)
        assert wait is not None  # durable: the fsync (and the high watermark, replicated)
        await asyncio.wait_for(wait, 10)
        assert plog.high_watermark == result.last_offset + 1
        assert broker.writes.acknowledgement(plog, result.last_offset, 1, 5000) is None

    run(make_broker, body)


def test_the_coordinators_serve_again_after_a_restart(make_broker: Callable[[], Broker]) -> None:
    """A restarted broker that still leads its internal partitions (a cluster of one, or
    the only replica) loads them again: on a cluster its replicas took up their leadership
    while the link filled the cache, before anyone listened, and the transaction
    coordinator never loaded (NOT_COORDINATOR for ever). A coordinator's epoch never goes
    back: a later start serves at the same leader epoch or a higher one."""
    epochs: list[int] = []

    async def body(broker: Broker) -> None:
        coordinator = broker.txn_coordinator
        partition = coordinator.partition_for("a-txn")
        await eventually(
            lambda: (
                broker.coordinator_node(1, "a-txn", LISTENER) is not None
                and coordinator.owns("a-txn")
            ),
            "the transaction log loaded",
        )
        epoch = coordinator.coordinator_epoch_for(partition)
        assert epoch is not None
        epochs.append(epoch)

    run(make_broker, body)
    run(make_broker, body)
    assert epochs[1] >= epochs[0]


def test_alone_the_internal_leader_epoch_grows_at_every_start(tmp_path: Path) -> None:
    """A broker alone has no controller to bump its internal partitions' leader epoch, so it
    keeps a counter in its data dir: markers of a later incarnation carry a higher epoch."""
    config, _ = load_broker_config(None, {"log.dirs": str(tmp_path / "data")})
    epochs: list[int | None] = []

    async def body(broker: Broker) -> None:
        coordinator = broker.txn_coordinator
        epochs.append(coordinator.coordinator_epoch_for(coordinator.partition_for("a-txn")))

    for _ in range(3):
        run(lambda: Broker(config), body)
    assert epochs == [0, 1, 2]


def test_with_one_replica_no_election_is_needed(make_broker: Callable[[], Broker]) -> None:
    async def body(broker: Broker) -> None:
        topology = broker.topology
        await broker.create_topic("votes", 2, {})
        await eventually(lambda: topology.partition_view("votes", 1).leader >= 0, "leaders")
        for kind in (0, 1):  # PREFERRED, UNCLEAN
            asked = [("votes", 0), ("votes", 1), ("votes", 2), ("nothing", 0)]
            results = await topology.elect_leaders(kind, asked, 5000)
            assert [results[tp][0] for tp in asked] == [
                ErrorCode.election_not_needed,
                ErrorCode.election_not_needed,
                ErrorCode.unknown_topic_or_partition,
                ErrorCode.unknown_topic_or_partition,
            ]
            every = await topology.elect_leaders(kind, None, 5000)
            assert ("votes", 1) in every
            assert {code for code, _ in every.values()} == {ErrorCode.election_not_needed}

    run(make_broker, body)


def test_with_one_broker_its_own_replica_is_the_only_target(
    make_broker: Callable[[], Broker],
) -> None:
    async def body(broker: Broker) -> None:
        topology = broker.topology
        me = broker.config.node_id
        await broker.create_topic("moves", 1, {})
        await eventually(lambda: topology.partition_view("moves", 0).leader >= 0, "a leader")
        asked: dict[tuple[str, int], tuple[int, ...] | None] = {
            ("moves", 0): (me,),
            ("moves", 1): (me,),
            ("nothing", 0): (me,),
        }
        results = await topology.alter_partition_reassignments(asked, True)
        assert {tp: code for tp, (code, _) in results.items()} == {
            ("moves", 0): ErrorCode.none,
            ("moves", 1): ErrorCode.unknown_topic_or_partition,
            ("nothing", 0): ErrorCode.unknown_topic_or_partition,
        }
        refused = await topology.alter_partition_reassignments({("moves", 0): None}, True)
        assert refused[("moves", 0)][0] == ErrorCode.no_reassignment_in_progress
        dead = await topology.alter_partition_reassignments({("moves", 0): (me, me + 1)}, True)
        assert dead[("moves", 0)][0] == ErrorCode.invalid_replica_assignment
        assert topology.list_partition_reassignments(None) == {}
        assert topology.partition_view("moves", 0).replicas == (me,)

    run(make_broker, body)
