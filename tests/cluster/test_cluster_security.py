"""A secured cluster: three brokers that authenticate to each other, ACLs and SCRAM users
every broker sees, and replica fetches refused to a principal without CLUSTER_ACTION.

Each broker has two listeners, both SASL_SSL: INTERNAL, the inter-broker listener, where
only `User:broker` logs in (PLAIN, from the listener's JAAS config), and EXTERNAL for
clients (PLAIN for the admin, SCRAM for users made through the admin API). SASL_SSL rather
than mutual TLS on the inter-broker link because it exercises both layers at once (the
broker's certificate is still checked by every peer), the brokers' principal is a plain
`User:broker` in super.users instead of a certificate subject, and a wrong credential is
a one-line config change rather than a second certificate authority.

Every client here reaches the cluster through EXTERNAL only; a follower's fetch, the
transaction markers and KIP-890's verification go over INTERNAL.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from onceflow.client.blocking import Connection
from onceflow.client.cluster import Cluster as WireCluster
from onceflow.client.errors import ClientError
from onceflow.client.wire import request_entity
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.security.client_config import ClientSecurity
from tests.helpers.broker import free_port
from tests.helpers.certs import Pki, make_pki
from tests.helpers.clients import QUIET_LOGGER, drain, topic_name
from tests.helpers.cluster import Cluster, ClusterBroker
from tests.helpers.wire import fetch_request

T = 30.0
BROKER_SECRET = "broker-secret"
WRONG = "not-the-broker-secret"
ADMIN = ("admin", "admin-secret")
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule required"
FETCH_VERSION = 11  # replica_id in the request; v17, the followers' own: unit tests

R = TypeVar("R")


def _internal_jaas(password: str) -> str:
    """The inter-broker listener's JAAS config: this broker logs in to the others as
    `broker` with `password`, and accepts `broker` with the real secret."""
    return f'{PLAIN_MODULE} username="broker" password="{password}" user_broker="{BROKER_SECRET}";'


def _overrides(pki: Pki) -> dict[str, str]:
    user, password = ADMIN
    return {
        "listener.security.protocol.map": "INTERNAL:SASL_SSL,EXTERNAL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.internal.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": _internal_jaas(BROKER_SECRET),
        "listener.name.external.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.external.plain.sasl.jaas.config": (
            f'{PLAIN_MODULE} user_{user}="{password}";'
        ),
        "ssl.keystore.location": str(pki.broker.keystore),
        "ssl.truststore.location": str(pki.ca),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": f"User:broker;User:{user}",
        "min.insync.replicas": "2",
    }


@dataclass
class Secured:
    cluster: Cluster
    pki: Pki
    internal_ports: dict[int, int]

    def broker(self, broker_id: int) -> ClusterBroker:
        return self.cluster.broker(broker_id)

    # ---- clients -------------------------------------------------------------------------

    def conf(
        self, user: str, password: str, mechanism: str = "SCRAM-SHA-256", **extra: Any
    ) -> dict[str, Any]:
        """confluent-kafka settings for EXTERNAL as `user`."""
        return {
            "bootstrap.servers": self.cluster.bootstrap,  # the EXTERNAL listeners
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(self.pki.ca),
            "sasl.mechanism": mechanism,
            "sasl.username": user,
            "sasl.password": password,
            "logger": QUIET_LOGGER,
            "log_level": 0,
            **extra,
        }

    def admin(self) -> AdminClient:
        return AdminClient(self.conf(*ADMIN, mechanism="PLAIN"))

    def security(self, user: str, password: str, mechanism: str) -> ClientSecurity:
        return ClientSecurity.from_properties(
            {
                "security.protocol": "SASL_SSL",
                "ssl.ca.location": str(self.pki.ca),
                "sasl.mechanism": mechanism,
                "sasl.username": user,
                "sasl.password": password,
            }
        )

    def connect(
        self,
        broker_id: int,
        user: str,
        password: str,
        mechanism: str = "SCRAM-SHA-256",
        *,
        internal: bool = False,
    ) -> Connection:
        """A logged-in wire connection to one broker's EXTERNAL (or INTERNAL) listener."""
        port = self.internal_ports[broker_id] if internal else self.broker(broker_id).port
        return Connection("127.0.0.1", port, 10.0, self.security(user, password, mechanism))

    # ---- the cluster's state, as the admin sees it ---------------------------------------

    def isr(self, topic: str) -> dict[int, list[int]]:
        md = self.admin().list_topics(topic, timeout=T).topics[topic]
        assert md.error is None, md.error
        return {p.id: sorted(p.isrs) for p in md.partitions.values()}

    def leaders(self, topic: str) -> dict[int, int]:
        md = self.admin().list_topics(topic, timeout=T).topics[topic]
        return {p.id: p.leader for p in md.partitions.values()}

    def wait_formed(self) -> None:
        """Until every running broker's metadata lists exactly the running brokers."""

        def formed() -> None:
            wanted = {b.broker_id for b in self.cluster.running()}
            for b in self.cluster.running():
                with WireCluster(
                    b.bootstrap, 5.0, self.security(*ADMIN, mechanism="PLAIN")
                ) as wire:
                    assert set(wire.metadata().brokers) == wanted

        eventually(formed, "the cluster to form")

    def create_topic(
        self,
        partitions: int = 1,
        config: dict[str, str] | None = None,
        assignment: list[list[int]] | None = None,
        name: str | None = None,
    ) -> str:
        """A topic of `partitions` on all three brokers (or on `assignment`), once each
        partition has a leader."""
        name = name or topic_name("sec")
        topic = (
            NewTopic(name, len(assignment), replica_assignment=assignment, config=config or {})
            if assignment
            else NewTopic(name, partitions, 3, config=config or {})
        )
        client = self.admin()  # alive until its future is done
        client.create_topics([topic], request_timeout=T)[name].result(T)

        def led() -> None:
            leaders = self.leaders(name)
            assert len(leaders) == len(assignment or range(partitions))
            assert all(leader > 0 for leader in leaders.values()), leaders

        eventually(led, f"{name} to have a leader for each partition")
        return name

    def add_user(self, user: str, password: str) -> None:
        upserts = [
            UserScramCredentialUpsertion(user, ScramCredentialInfo(m, 4096), password.encode())
            for m in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)
        ]
        client = self.admin()
        for future in client.alter_user_scram_credentials(upserts).values():
            future.result(timeout=T)

    def acls(self, *bindings: AclBinding) -> None:
        client = self.admin()
        for future in client.create_acls(list(bindings)).values():
            future.result(timeout=T)


def acl(
    principal: str,
    resource: ResourceType,
    name: str,
    operation: AclOperation,
    permission: AclPermissionType = AclPermissionType.ALLOW,
    pattern: ResourcePatternType = ResourcePatternType.LITERAL,
) -> AclBinding:
    return AclBinding(resource, name, pattern, principal, "*", operation, permission)


def eventually(check: Callable[[], R], what: str, timeout: float = T) -> R:
    """`check()`'s result once it stops failing (AssertionError or a client error): a
    change written through one broker reaches the others through their ZooKeeper watches."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return check()
        except (AssertionError, ClientError) as exc:
            if time.monotonic() > deadline:
                raise AssertionError(f"waited {timeout:.0f} s for {what}: {exc}") from exc
        time.sleep(0.1)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    root = tmp_path_factory.mktemp("secured")
    pki = make_pki(root / "pki")
    cluster = Cluster(root, 3, overrides=_overrides(pki))
    taken = {b.port for b in cluster.brokers} | {s.client_port for s in cluster.zookeeper.servers}
    internal: dict[int, int] = {}
    for b in cluster.brokers:
        port = free_port()
        while port in taken:
            port = free_port()
        taken.add(port)
        internal[b.broker_id] = port
        # The process port (what BrokerProcess waits for and names) is EXTERNAL.
        b.overrides["listeners"] = f"INTERNAL://127.0.0.1:{port},EXTERNAL://127.0.0.1:{b.port}"
    cluster.start(wait_formed=False)  # Cluster's own wait speaks PLAINTEXT
    try:
        secured = Secured(cluster, pki, internal)
        secured.wait_formed()
        yield secured
    finally:
        cluster.finish()


# ---- replication over the secured link ----------------------------------------------------


def test_replication_and_transactions_go_over_the_authenticated_link(secured: Secured) -> None:
    # min.insync.replicas=3: an acks=all write is acknowledged only once both followers
    # fetched it, over INTERNAL, as User:broker.
    topic = secured.create_topic(3, {"min.insync.replicas": "3"})
    assert sorted(secured.leaders(topic).values()) == [1, 2, 3], "one partition led by each"
    p = Producer(secured.conf(*ADMIN, mechanism="PLAIN", acks="all", **{"linger.ms": 5}))
    failures: list[KafkaError] = []
    for i in range(30):
        p.produce(
            topic,
            value=f"plain-{i}".encode(),
            partition=i % 3,
            on_delivery=lambda err, _msg: failures.append(err) if err else None,
        )
    assert p.flush(T) == 0
    assert not failures, failures

    # A transaction over the three partitions: the coordinator's markers go to the two
    # other leaders over INTERNAL, and each leader verifies the writes with the coordinator
    # (KIP-890) there too. One aborted, one committed.
    txn = Producer(
        secured.conf(*ADMIN, mechanism="PLAIN", **{"transactional.id": topic_name("txn")})
    )
    txn.init_transactions(T)
    for outcome in ("aborted", "committed"):
        txn.begin_transaction()
        for i in range(6):
            txn.produce(topic, value=f"{outcome}-{i}".encode(), partition=i % 3)
        if outcome == "aborted":
            txn.abort_transaction(T)
        else:
            txn.commit_transaction(T)

    c = Consumer(
        secured.conf(
            *ADMIN,
            mechanism="PLAIN",
            **{
                "group.id": topic_name("g"),
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            },
        )
    )
    try:
        c.assign([TopicPartition(topic, i, 0) for i in range(3)])
        values: list[bytes] = []
        deadline = time.monotonic() + T
        while len(values) < 36 and time.monotonic() < deadline:
            values += [m.value() for m in drain(c, 0.5)]
    finally:
        c.close()
    expected = [f"plain-{i}" for i in range(30)] + [f"committed-{i}" for i in range(6)]
    assert sorted(v.decode() for v in values) == sorted(expected)
    assert secured.isr(topic) == {i: [1, 2, 3] for i in range(3)}
    assert all(isr == [1, 2, 3] for isr in secured.isr("__transaction_state").values())


# ---- ACLs and SCRAM credentials, one copy for the whole cluster ---------------------------


def _topic_errors(conn: Connection, topics: list[str]) -> dict[str, int]:
    """Each named topic's error in a Metadata answer (TOPIC_AUTHORIZATION_FAILED where the
    principal may not DESCRIBE it)."""
    version = conn.version_for(ApiKey.METADATA)
    response = conn.call(
        ApiKey.METADATA,
        topics=tuple(
            request_entity(
                ApiKey.METADATA, version, "MetadataRequestTopic", topic_id=None, name=name
            )
            for name in topics
        ),
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    return {t.name: int(t.error_code) for t in response.topics}


def _produce_each_partition(
    secured: Secured, user: tuple[str, str], topic: str, partitions: int
) -> dict[int, str]:
    """One record to each partition, so to each partition's leader, with a producer of
    its own (librdkafka fails a topic's queued records on one broker's refusal); the
    error name per partition, "" where it was written."""
    outcome: dict[int, str] = {}

    def delivered(err: KafkaError | None, msg: Any) -> None:
        outcome[msg.partition()] = err.name() if err is not None else ""

    for i in range(partitions):
        p = Producer(secured.conf(*user, acks="all"))
        p.produce(topic, value=b"v", partition=i, on_delivery=delivered)
        assert p.flush(T) == 0
    return outcome


def test_acls_and_users_made_through_one_broker_hold_on_every_broker_and_after_a_restart(
    secured: Secured,
) -> None:
    base = topic_name("acl")
    topic = secured.create_topic(3, name=f"{base}-open")
    closed = secured.create_topic(3, name=f"{base}-closed")
    for name in (topic, closed):
        assert sorted(secured.leaders(name).values()) == [1, 2, 3], "one partition on each"
    alice = ("alice", "alice-secret")
    secured.add_user(*alice)
    # WRITE and DESCRIBE on every topic of the prefix, but a DENY of WRITE on one of them
    # (DENY wins), all in one CreateAcls: every broker gets the whole set at once.
    prefixed = ResourcePatternType.PREFIXED
    secured.acls(
        acl("User:alice", ResourceType.TOPIC, base, AclOperation.WRITE, pattern=prefixed),
        acl("User:alice", ResourceType.TOPIC, base, AclOperation.DESCRIBE, pattern=prefixed),
        acl("User:alice", ResourceType.TOPIC, closed, AclOperation.WRITE, AclPermissionType.DENY),
    )

    def alice_sees_both(broker_id: int) -> None:
        with contextlib.closing(secured.connect(broker_id, *alice)) as conn:
            errors = _topic_errors(conn, [topic, closed])
        assert errors == {topic: ErrorCode.none, closed: ErrorCode.none}, errors

    for broker_id in (1, 2, 3):  # her login and her ACLs, on each broker
        eventually(lambda b=broker_id: alice_sees_both(b), f"alice's ACLs on broker {broker_id}")
    assert _produce_each_partition(secured, alice, topic, 3) == {0: "", 1: "", 2: ""}
    refused = "TOPIC_AUTHORIZATION_FAILED"
    assert _produce_each_partition(secured, alice, closed, 3) == {
        0: refused,
        1: refused,
        2: refused,
    }

    # A user and an ACL made while a broker is down are there when it comes back, and what
    # it had before is still there: it reads them from ZooKeeper before it serves.
    secured.broker(2).stop()
    bob = ("bob", "bob-secret")
    try:
        secured.add_user(*bob)
        secured.acls(acl("User:bob", ResourceType.TOPIC, topic, AclOperation.DESCRIBE))
    finally:
        secured.broker(2).start()
    # The credentials are read before it serves: the login needs no waiting. Topics come
    # from its ZooKeeper watches, so an authorized topic may need a moment to be known.
    with contextlib.closing(secured.connect(2, *bob, mechanism="SCRAM-SHA-512")) as conn:
        eventually(
            lambda: _assert_equal(
                _topic_errors(conn, [topic, closed]),
                {topic: ErrorCode.none, closed: ErrorCode.topic_authorization_failed},
            ),
            "bob's ACL on the restarted broker",
        )
    eventually(lambda: alice_sees_both(2), "alice's ACLs on the restarted broker")
    secured.wait_formed()


# ---- a replica fetch needs CLUSTER_ACTION --------------------------------------------------


def _fetch(conn: Connection, topic: str, replica: int, offset: int) -> tuple[int, bytes]:
    """Fetch v11 of partition 0 from `offset`, as follower `replica` (-1: as a consumer):
    the partition's error code and record bytes."""
    request = fetch_request(topic, {0: (offset, -1)}, replica_id=replica)
    part = conn.call_at(ApiKey.FETCH, FETCH_VERSION, request).responses[0].partitions[0]
    return int(part.error_code), bytes(part.records or b"")


def test_a_replica_fetch_without_cluster_action_is_refused(secured: Secured) -> None:
    topic = secured.create_topic(assignment=[[1, 2, 3]])  # led by broker 1
    p = Producer(secured.conf(*ADMIN, mechanism="PLAIN", acks="all"))
    p.produce(topic, value=b"secret")
    assert p.flush(T) == 0
    mallory = ("mallory", "mallory-secret")
    secured.add_user(*mallory)
    secured.acls(acl("User:mallory", ResourceType.TOPIC, topic, AclOperation.READ))

    def consumer_fetch() -> None:
        with contextlib.closing(secured.connect(1, *mallory)) as conn:
            code, records = _fetch(conn, topic, -1, 0)
        assert (code, bool(records)) == (ErrorCode.none, True), "READ lets her consume"

    eventually(consumer_fetch, "mallory's login and ACL on broker 1")
    mark = secured.broker(1).log_size()
    with contextlib.closing(secured.connect(1, *mallory)) as conn:
        # The same read as follower 2: a follower needs CLUSTER_ACTION on the cluster, and
        # Kafka answers every partition with TOPIC_AUTHORIZATION_FAILED (KafkaApis).
        assert _fetch(conn, topic, 2, 0) == (ErrorCode.topic_authorization_failed, b"")
    denial = "Principal = User:mallory is Denied operation = CLUSTER_ACTION"
    eventually(lambda: _assert_in(denial, secured.broker(1).log[mark:]), "the denial's audit line")
    # The brokers' own principal, on the inter-broker listener, is a follower.
    with contextlib.closing(
        secured.connect(1, "broker", BROKER_SECRET, "PLAIN", internal=True)
    ) as broker_conn:
        assert _fetch(broker_conn, topic, 2, 1)[0] == ErrorCode.none
    assert secured.isr(topic) == {0: [1, 2, 3]}

    # With CLUSTER_ACTION, the same principal's replica fetch is served.
    secured.acls(
        acl("User:mallory", ResourceType.BROKER, "kafka-cluster", AclOperation.CLUSTER_ACTION)
    )

    def replica_fetch() -> None:
        with contextlib.closing(secured.connect(1, *mallory)) as conn:
            assert _fetch(conn, topic, 2, 1)[0] == ErrorCode.none

    eventually(replica_fetch, "CLUSTER_ACTION to reach broker 1")


def _assert_in(needle: str, text: str) -> None:
    assert needle in text, f"{needle!r} not logged"


# ---- wrong inter-broker credentials --------------------------------------------------------


def _failed_logins(log: str) -> int:
    """The leader's audit lines for a refused inter-broker login (only broker 3's is wrong)."""
    return log.count("Failed authentication of User:broker with 127.0.0.1 on listener INTERNAL")


def _held_bytes(broker: ClusterBroker, topic: str) -> int:
    """The size of the broker's copy of partition 0's records."""
    return sum(f.stat().st_size for f in (Path(broker.data_dir) / f"{topic}-0").glob("*.log"))


def test_a_broker_with_wrong_inter_broker_credentials_stays_out_of_the_isr(
    secured: Secured,
) -> None:
    topic = secured.create_topic(assignment=[[1, 2, 3]])  # led by broker 1
    third = secured.broker(3)
    third.stop()  # controlled shutdown takes it out of every ISR
    eventually(lambda: _assert_equal(secured.isr(topic), {0: [1, 2]}), "broker 3 out of the ISR")
    third.overrides["listener.name.internal.plain.sasl.jaas.config"] = _internal_jaas(WRONG)
    try:
        own_mark = third.log_size()
        third.start()
        p = Producer(secured.conf(*ADMIN, mechanism="PLAIN", acks="all"))
        for i in range(10):
            p.produce(topic, value=str(i).encode())
        assert p.flush(T) == 0  # acknowledged by brokers 1 and 2 (min.insync.replicas=2)
        leader_mark = secured.broker(1).log_size()

        def refused_twice() -> None:
            # Two tries after the records were there: with the right password, the first
            # would have copied them and the second rejoined the ISR.
            assert _failed_logins(secured.broker(1).log[leader_mark:]) >= 2
            assert "SASL authentication failed" in third.log[own_mark:]

        eventually(refused_twice, "broker 3's logins to be refused")
        assert secured.isr(topic) == {0: [1, 2]}
        assert _held_bytes(third, topic) == 0
    finally:
        third.stop()
        third.overrides["listener.name.internal.plain.sasl.jaas.config"] = _internal_jaas(
            BROKER_SECRET
        )
        third.start()
    # The same broker with the right password copies the records and rejoins.
    eventually(lambda: _assert_equal(secured.isr(topic), {0: [1, 2, 3]}), "broker 3 to rejoin")
    assert _held_bytes(third, topic) > 0
    secured.wait_formed()
    # The audit lines name the principal and the cause, never a password.
    for broker in secured.cluster.brokers:
        logged = broker.log
        assert not [s for s in (BROKER_SECRET, WRONG, ADMIN[1]) if s in logged], broker


def _assert_equal(got: object, wanted: object) -> None:
    assert got == wanted, f"{got} != {wanted}"
