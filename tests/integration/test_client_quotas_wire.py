"""DescribeClientQuotas and AlterClientQuotas on the wire against a broker process: Kafka's
answers to good and bad entries and filters at both versions, validate_only, removal, the
quotas surviving a restart, a throttled produce answered with throttle_time_ms and its
connection muted, and the CLUSTER ACLs Kafka checks."""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from kio.schema.describe_client_quotas.v0 import request as describe_v0
from kio.schema.metadata.v12 import request as metadata_v12

from onceflow.client.cluster import Cluster
from onceflow.client.errors import KafkaApiError
from onceflow.client.quota_admin import (
    MATCH_ANY,
    MATCH_DEFAULT,
    MATCH_EXACT,
    alter_client_quotas,
    describe_client_quotas,
)
from onceflow.client.wire import request_entity
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import build, request_type
from onceflow.records.builder import build_batch
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import create_topic, topic_name
from tests.helpers.secure import (
    ADMIN,
    SecureBroker,
    add_scram_user,
    admin,
    allow,
    start_secure_broker,
)
from tests.helpers.wire import RawConnection, produce_request, request_frame

ALICE_APP = (("user", "alice"), ("client-id", "app"))
DEFAULT_CLIENT = (("client-id", None),)
ALICE = (("user", "alice"),)
RAW_CLIENT = (("client-id", "raw-test"),)  # the client id RawConnection sends
Entity = tuple[tuple[str, str | None], ...]


@pytest.fixture
def cluster(broker: BrokerProcess) -> Iterator[Cluster]:
    with Cluster(broker.bootstrap, 20.0) as opened:
        yield opened


def _batch(value: bytes) -> bytes:
    return build_batch([(None, value, [])], timestamp_ms=int(time.time() * 1000))


def _codes(results: dict[Entity, KafkaApiError | None]) -> dict[Entity, str | None]:
    return {entity: (None if e is None else e.name) for entity, e in results.items()}


def test_alter_then_describe_with_every_filter(cluster: Cluster) -> None:
    conn = cluster.bootstrap
    assert describe_client_quotas(conn, []) == {}
    results = alter_client_quotas(
        conn,
        {
            ALICE_APP: {"producer_byte_rate": 1024, "request_percentage": 50.5},
            DEFAULT_CLIENT: {"consumer_byte_rate": 2048},
            ALICE: {"controller_mutation_rate": 10},
            (("user", "bob"),): {"producer_byte_rate": 10.5},  # a Long, not a fraction
            (("user", "carol"),): {"no_such_quota": 1},
            (("topic", "t"),): {"producer_byte_rate": 1},
            (("user", "a"), ("user", "b")): {"producer_byte_rate": 1},
            (("user", "dave"),): {"producer_byte_rate": -5},
        },
    )
    assert _codes(results) == {
        ALICE_APP: None,
        DEFAULT_CLIENT: None,
        ALICE: None,
        (("user", "bob"),): "INVALID_REQUEST",
        (("user", "carol"),): "INVALID_REQUEST",
        (("topic", "t"),): "INVALID_REQUEST",
        (("user", "a"), ("user", "b")): "INVALID_REQUEST",
        (("user", "dave"),): "INVALID_REQUEST",
    }
    everything = describe_client_quotas(conn, [])
    assert everything == {
        ALICE_APP: {"producer_byte_rate": 1024.0, "request_percentage": 50.5},
        DEFAULT_CLIENT: {"consumer_byte_rate": 2048.0},
        ALICE: {"controller_mutation_rate": 10.0},
    }
    alice = [("user", MATCH_EXACT, "alice")]
    assert set(describe_client_quotas(conn, alice)) == {ALICE_APP, ALICE}
    assert set(describe_client_quotas(conn, alice, strict=True)) == {ALICE}
    assert set(describe_client_quotas(conn, [("client-id", MATCH_DEFAULT, None)])) == {
        DEFAULT_CLIENT
    }
    assert set(describe_client_quotas(conn, [("client-id", MATCH_ANY, None)])) == {
        ALICE_APP,
        DEFAULT_CLIENT,
    }
    for bad in ([("user", MATCH_ANY, None)] * 2, [("user", 9, None)], [("", MATCH_ANY, None)]):
        with pytest.raises(KafkaApiError) as caught:
            describe_client_quotas(conn, bad)
        assert caught.value.code == ErrorCode.invalid_request


def test_validate_only_writes_nothing_and_removal_empties_an_entity(cluster: Cluster) -> None:
    conn = cluster.bootstrap
    checked = alter_client_quotas(conn, {ALICE: {"producer_byte_rate": 1}}, validate_only=True)
    assert _codes(checked) == {ALICE: None}
    refused = alter_client_quotas(conn, {ALICE: {"bogus": 1}}, validate_only=True)
    assert _codes(refused) == {ALICE: "INVALID_REQUEST"}
    assert describe_client_quotas(conn, []) == {}
    alter_client_quotas(conn, {ALICE: {"producer_byte_rate": 1, "consumer_byte_rate": 2}})
    alter_client_quotas(conn, {ALICE: {"producer_byte_rate": None}})
    assert describe_client_quotas(conn, []) == {ALICE: {"consumer_byte_rate": 2.0}}
    alter_client_quotas(conn, {ALICE: {"consumer_byte_rate": None}})
    assert describe_client_quotas(conn, []) == {}


def test_version_0_is_served(broker: BrokerProcess, cluster: Cluster) -> None:
    alter_client_quotas(cluster.bootstrap, {DEFAULT_CLIENT: {"producer_byte_rate": 4096}})
    with RawConnection(broker.bootstrap) as raw:
        response = raw.call(describe_v0.DescribeClientQuotasRequest(components=(), strict=False))
    assert response.error_code == ErrorCode.none
    [entry] = response.entries
    assert [(e.entity_type, e.entity_name) for e in entry.entity] == [("client-id", None)]
    assert [(v.key, v.value) for v in entry.values] == [("producer_byte_rate", 4096.0)]


def test_quotas_survive_a_restart(broker: BrokerProcess) -> None:
    with Cluster(broker.bootstrap, 20.0) as cluster:
        alter_client_quotas(cluster.bootstrap, {ALICE_APP: {"producer_byte_rate": 777}})
    broker.restart(kill=True)
    with Cluster(broker.bootstrap, 20.0) as cluster:
        assert describe_client_quotas(cluster.bootstrap, []) == {
            ALICE_APP: {"producer_byte_rate": 777.0}
        }


@pytest.mark.broker_overrides({"quota.window.num": "3"})
def test_a_throttled_produce_is_answered_then_its_connection_muted(
    broker: BrokerProcess, cluster: Cluster
) -> None:
    """ANONYMOUS with client id raw-test at 10 kB/s: a 40 kB produce, 20 kB/s over the
    2 s the rate is measured on (3 windows), earns about 2 s, answered at once; a request
    sent right after it is read only once that has passed. Another client is served
    meanwhile."""
    topic = topic_name()
    create_topic(broker.bootstrap, topic, 1)
    quota = {(("user", "ANONYMOUS"), ("client-id", "raw-test")): {"producer_byte_rate": 10_000}}
    assert _codes(alter_client_quotas(cluster.bootstrap, quota)) == {next(iter(quota)): None}
    batch = _batch(b"x" * 40_000)
    with RawConnection(broker.bootstrap) as raw:
        first = raw.call(produce_request(topic, {0: batch}))
        throttle_ms = first.throttle_time.total_seconds() * 1000
        assert first.responses[0].partition_responses[0].error_code == ErrorCode.none
        assert throttle_ms > 1000
        sent = time.monotonic()
        correlation = raw.send_request(produce_request(topic, {0: _batch(b"y")}))
        # Meanwhile another client id is not throttled.
        with Cluster(broker.bootstrap, 20.0) as other:
            assert describe_client_quotas(other.bootstrap, []) == quota
        second = raw.read_response(0, 8, correlation)
        waited_ms = (time.monotonic() - sent) * 1000
    assert second.responses[0].partition_responses[0].error_code == ErrorCode.none
    assert waited_ms >= throttle_ms * 0.5  # loose: the mute itself is the feature


def test_cluster_acls_guard_both_apis(tmp_path: Path) -> None:
    """Anonymous on PLAINTEXT: without ACLs both are CLUSTER_AUTHORIZATION_FAILED; with
    DESCRIBE_CONFIGS on the cluster it may describe and still not alter."""
    secure = start_secure_broker(tmp_path)
    try:
        with Cluster(secure.bootstrap("PLAINTEXT"), 20.0) as cluster:
            conn = cluster.bootstrap
            with pytest.raises(KafkaApiError) as caught:
                describe_client_quotas(conn, [])
            assert caught.value.code == ErrorCode.cluster_authorization_failed
            denied = alter_client_quotas(conn, {ALICE: {"producer_byte_rate": 1}, ALICE_APP: {}})
            assert _codes(denied) == {
                ALICE: "CLUSTER_AUTHORIZATION_FAILED",
                ALICE_APP: "CLUSTER_AUTHORIZATION_FAILED",
            }
            allow(secure, "User:ANONYMOUS", "BROKER", "kafka-cluster", ("DESCRIBE_CONFIGS",))
            assert describe_client_quotas(conn, []) == {}
            still = alter_client_quotas(conn, {ALICE: {"producer_byte_rate": 1}})
            assert _codes(still) == {ALICE: "CLUSTER_AUTHORIZATION_FAILED"}
            allow(secure, "User:ANONYMOUS", "BROKER", "kafka-cluster", ("ALTER_CONFIGS",))
            assert _codes(alter_client_quotas(conn, {ALICE: {"producer_byte_rate": 1}})) == {
                ALICE: None
            }
            assert describe_client_quotas(conn, []) == {ALICE: {"producer_byte_rate": 1.0}}
            # 3 x 10 kB over the 10 s measured: alice's third goes over 2 kB/s.
            alter_client_quotas(conn, {ALICE: {"producer_byte_rate": 2000}})
        _user_quota_binds_the_authenticated_user(secure)
    finally:
        secure.process.close()


def _user_quota_binds_the_authenticated_user(secure: SecureBroker) -> None:
    """A quota of user alice (2 kB/s, set above) binds alice's SASL connections, whatever
    their client id, and not the admin's."""
    add_scram_user(secure, "alice", "alice-secret")
    topic = topic_name()
    admin_conf = secure.confluent("SASL_PLAINTEXT", *ADMIN, mechanism="PLAIN")
    client = admin(secure)  # kept alive until its future is done
    client.create_topics([NewTopic(topic, 1, 1)])[topic].result(20)
    allow(secure, "User:alice", "TOPIC", topic, ("WRITE", "DESCRIBE"))
    heard: dict[str, list[float]] = {"alice": [], "admin": []}
    for who, conf in (
        ("alice", secure.confluent("SASL_PLAINTEXT", "alice", "alice-secret")),
        ("admin", admin_conf),
    ):
        producer = Producer(
            {
                **conf,
                "client.id": f"any-{who}",
                "throttle_cb": lambda event, who=who: heard[who].append(event.throttle_time),
            }
        )
        for _ in range(3):
            producer.produce(topic, b"z" * 10_000)
            assert producer.flush(20) == 0
        producer.poll(0)
    assert any(t > 0 for t in heard["alice"]), heard
    assert not any(t > 0 for t in heard["admin"]), heard


@pytest.mark.broker_overrides({"quota.window.num": "3"})
def test_request_percentage_throttles_at_most_one_window(
    broker: BrokerProcess, cluster: Cluster
) -> None:
    """0.01 % of a thread is 0.1 ms of handler time a second: a few Metadata requests
    exceed it, and the throttle is bounded at one window (1 s), as Kafka bounds it."""
    quota = {RAW_CLIENT: {"request_percentage": 0.01}}
    assert _codes(alter_client_quotas(cluster.bootstrap, quota)) == {RAW_CLIENT: None}
    throttles = []
    with RawConnection(broker.bootstrap) as raw:
        for _ in range(200):
            response = raw.call(metadata_v12.MetadataRequest(
                topics=None, allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            ))  # fmt: skip
            throttles.append(response.throttle_time.total_seconds() * 1000)
            if throttles[-1] > 0:
                break
    assert throttles[-1] > 0, "200 Metadata requests were never throttled"
    assert throttles[-1] <= 1000


def test_bad_quota_requests_get_errors_or_a_closed_connection(
    broker: BrokerProcess, cluster: Cluster
) -> None:
    empty = alter_client_quotas(
        cluster.bootstrap, {(("client-id", ""),): {"producer_byte_rate": 1}}
    )
    assert _codes(empty) == {(("client-id", ""),): "INVALID_REQUEST"}
    with pytest.raises(KafkaApiError) as caught:
        describe_client_quotas(cluster.bootstrap, [("topic", MATCH_ANY, None)])
    assert caught.value.code == ErrorCode.unsupported_version
    with RawConnection(broker.bootstrap) as raw:
        # DescribeClientQuotas v1 with a null components array (compact length 0).
        raw.send_bytes(request_frame(48, 1, 1, b"\x00\x00\x00", flexible=True))
        assert raw.closed_by_peer()
    assert describe_client_quotas(cluster.bootstrap, []) == {}  # the broker serves on


@pytest.mark.broker_overrides({"quota.window.num": "3"})
def test_a_client_from_before_kip_219_gets_its_throttled_response_late(
    broker: BrokerProcess, cluster: Cluster
) -> None:
    """Produce v5 does not pause for throttle_time_ms itself, so Kafka sends the
    throttled response only once the throttle time has passed; v8 gets it at once."""
    topic = topic_name()
    create_topic(broker.bootstrap, topic, 1)
    quota = {RAW_CLIENT: {"producer_byte_rate": 10_000}}
    assert _codes(alter_client_quotas(cluster.bootstrap, quota)) == {RAW_CLIENT: None}
    with RawConnection(broker.bootstrap) as raw:
        sent = time.monotonic()
        correlation = raw.send_request(produce_request(topic, {0: _batch(b"x" * 40_000)}), 5)
        response = raw.read_response(0, 5, correlation)
        waited_ms = (time.monotonic() - sent) * 1000
    throttle_ms = response.throttle_time.total_seconds() * 1000
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.none
    assert throttle_ms > 1000
    assert waited_ms >= throttle_ms * 0.5  # loose: the hold itself is the feature


def _create_topics_request(version: int, names: list[str], partitions: int) -> Any:
    topics = tuple(
        request_entity(
            ApiKey.CREATE_TOPICS,
            version,
            "CreatableTopic",
            name=name,
            num_partitions=partitions,
            replication_factor=1,
            assignments=(),
            configs=(),
        )
        for name in names
    )
    return build(
        request_type(ApiKey.CREATE_TOPICS, version),
        topics=topics,
        timeout=datetime.timedelta(seconds=10),
        validate_only=False,
    )


@pytest.mark.broker_overrides({"quota.window.num": "3"})
def test_controller_mutation_rate_refuses_strict_and_throttles_permissive(
    broker: BrokerProcess, cluster: Cluster
) -> None:
    """1 partition a second with a burst of 3 (3 windows of 1 s): of three 2-partition
    topics in a CreateTopics v7 the first two are created (the second takes the bucket
    below zero) and the third is THROTTLING_QUOTA_EXCEEDED; a v5 request (before KIP-599's
    strict mode) creates all its topics and is only throttled. Another client is not."""
    quota = {RAW_CLIENT: {"controller_mutation_rate": 1}}
    assert _codes(alter_client_quotas(cluster.bootstrap, quota)) == {RAW_CLIENT: None}
    strict = [topic_name() for _ in range(3)]
    with RawConnection(broker.bootstrap) as raw:
        response = raw.call(_create_topics_request(7, strict, 2))
    codes = [ErrorCode(t.error_code) for t in response.topics]
    assert codes == [ErrorCode.none, ErrorCode.none, ErrorCode.throttling_quota_exceeded]
    assert response.throttle_time.total_seconds() > 0
    permissive = [topic_name() for _ in range(2)]
    with RawConnection(broker.bootstrap) as raw:
        response = raw.call(_create_topics_request(5, permissive, 2))
    assert [ErrorCode(t.error_code) for t in response.topics] == [ErrorCode.none] * 2
    assert response.throttle_time.total_seconds() > 1
    create_topic(broker.bootstrap, topic_name(), 4)  # confluent-kafka's own client id
    assert broker.internal_errors() == []
