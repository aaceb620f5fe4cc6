"""ACLs as Kafka enforces them, seen by real clients over SASL_SSL with SCRAM: a principal
without WRITE on a topic cannot produce; without READ on a group cannot commit offsets;
without WRITE on a transactional id cannot begin, produce in or commit a transaction, nor
abort someone else's with the hanging-transaction tools; PREFIXED and DENY rules; Metadata
shows only what a principal may describe; every denial is in the audit log."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from onceflow.client.blocking import Connection
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import build, request_type
from onceflow.security.client_config import ClientSecurity
from tests.helpers.clients import QUIET_LOGGER
from tests.helpers.secure import SecureBroker, add_scram_user, allow, start_secure_broker

TIMEOUT_S = 30.0
ALICE = ("alice", "alice-secret")
BOB = ("bob", "bob-secret")
TOPIC = "orders"  # alice's; bob may only read it
BOB_TOPIC = "bob-notes"


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    broker = start_secure_broker(tmp_path_factory.mktemp("acls"))
    try:
        add_scram_user(broker, *ALICE)
        add_scram_user(broker, *BOB)
        allow(broker, "User:alice", "TOPIC", TOPIC, ("ALL",))
        allow(broker, "User:alice", "GROUP", "alice-", ("READ",), "PREFIXED")
        allow(broker, "User:alice", "TRANSACTIONAL_ID", "alice-", ("WRITE",), "PREFIXED")
        allow(broker, "User:bob", "TOPIC", TOPIC, ("READ",))  # READ implies DESCRIBE
        allow(broker, "User:bob", "TOPIC", "bob-", ("ALL",), "PREFIXED")
        allow(broker, "User:bob", "GROUP", "bob-", ("READ",), "PREFIXED")
        # Everyone reads the public- topics, except that bob may not read public-secret.
        allow(broker, "User:*", "TOPIC", "public-", ("READ",), "PREFIXED")
        allow(broker, "User:bob", "TOPIC", "public-secret", ("READ",), permission="DENY")
        for topic in (TOPIC, BOB_TOPIC, "public-news", "public-secret"):
            _admin_produce(broker, topic, b"seed")
        yield broker
    finally:
        broker.process.stop()
        errors = broker.process.internal_errors()
        assert not errors, "\n".join(errors[:3])


def _admin_produce(broker: SecureBroker, topic: str, value: bytes) -> None:
    from tests.helpers.secure import ADMIN

    producer = Producer(
        {**broker.confluent("SASL_SSL", *ADMIN, mechanism="PLAIN"), "logger": QUIET_LOGGER}
    )
    producer.produce(topic, value)
    assert producer.flush(TIMEOUT_S) == 0


def _conf(secure: SecureBroker, who: tuple[str, str]) -> dict[str, Any]:
    return {**secure.confluent("SASL_SSL", *who), "logger": QUIET_LOGGER}


def _delivery_error(conf: dict[str, Any], topic: str) -> KafkaError | None:
    reports: list[KafkaError | None] = []
    producer = Producer({**conf, "message.timeout.ms": 10_000})
    producer.produce(topic, b"x", on_delivery=lambda err, _msg: reports.append(err))
    producer.flush(TIMEOUT_S)
    assert reports, "no delivery report"
    return reports[0]


def _read(conf: dict[str, Any], topic: str, group: str) -> KafkaError | list[bytes]:
    """The values a consumer in `group` reads from `topic`, or the error it gets."""
    consumer = Consumer(
        {**conf, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False}
    )
    try:
        consumer.subscribe([topic])
        for _ in range(150):
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                return msg.error()  # type: ignore[no-any-return]
            consumer.commit(message=msg, asynchronous=False)
            return [msg.value()]
        raise AssertionError("neither a record nor an error")
    except KafkaException as exc:
        return exc.args[0]  # type: ignore[no-any-return]
    finally:
        consumer.close()


def test_without_write_on_a_topic_a_principal_cannot_produce(secure: SecureBroker) -> None:
    error = _delivery_error(_conf(secure, BOB), TOPIC)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, error
    assert _delivery_error(_conf(secure, ALICE), TOPIC) is None
    assert _delivery_error(_conf(secure, BOB), BOB_TOPIC) is None  # bob's prefix
    assert secure.logged("Principal = User:bob is Denied operation = WRITE")


def test_kafka_python_sees_the_same_denial(secure: SecureBroker) -> None:
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    producer = KafkaProducer(**secure.kafka_python("SASL_SSL", *BOB), max_block_ms=10_000)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send(TOPIC, b"x").get(timeout=TIMEOUT_S)
    finally:
        producer.close(timeout=5)


def test_without_read_on_a_group_a_principal_cannot_consume_in_it(secure: SecureBroker) -> None:
    # bob may read the topic, but not in alice's group.
    denied = _read(_conf(secure, BOB), TOPIC, "alice-group")
    assert isinstance(denied, KafkaError), denied
    assert denied.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    assert _read(_conf(secure, BOB), TOPIC, "bob-group") == [b"seed"]


def test_without_read_on_a_group_offsets_cannot_be_committed(secure: SecureBroker) -> None:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import GroupAuthorizationFailedError
    from kafka.structs import OffsetAndMetadata

    def commit(group: str) -> None:
        consumer = KafkaConsumer(**secure.kafka_python("SASL_SSL", *BOB), group_id=group)
        try:
            offsets = {TopicPartition(TOPIC, 0): OffsetAndMetadata(1, "", -1)}
            consumer.commit(offsets)
        finally:
            consumer.close(autocommit=False)

    with pytest.raises(GroupAuthorizationFailedError):
        commit("alice-offsets")
    commit("bob-offsets")  # his own group: fine


def test_prefixed_allow_and_deny_rules(secure: SecureBroker) -> None:
    assert _read(_conf(secure, ALICE), "public-secret", "alice-public") == [b"seed"]
    assert _read(_conf(secure, BOB), "public-news", "bob-public") == [b"seed"]
    denied = _read(_conf(secure, BOB), "public-secret", "bob-secret")
    assert isinstance(denied, KafkaError)
    assert denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_metadata_lists_only_the_topics_a_principal_may_describe(secure: SecureBroker) -> None:
    def topics(conf: dict[str, Any]) -> set[str]:
        listed = AdminClient(conf).list_topics(timeout=TIMEOUT_S).topics
        return {name for name in listed if not name.startswith("__")}

    # bob's DENY is of READ: he may still describe public-secret, as in Kafka.
    assert topics(_conf(secure, BOB)) == {TOPIC, BOB_TOPIC, "public-news", "public-secret"}
    assert topics(_conf(secure, ALICE)) == {TOPIC, "public-news", "public-secret"}
    anonymous = {"bootstrap.servers": secure.bootstrap("PLAINTEXT"), "logger": QUIET_LOGGER}
    assert topics(anonymous) == {"public-news", "public-secret"}  # User:* covers ANONYMOUS


def test_without_write_on_a_transactional_id_no_transaction_can_begin(secure: SecureBroker) -> None:
    producer = Producer({**_conf(secure, BOB), "transactional.id": "alice-copier"})
    with pytest.raises(KafkaException) as caught:
        producer.init_transactions(TIMEOUT_S)
    assert caught.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def nested_request(api_key: int, version: int, name: str) -> Any:
    from kio.index import load_payload_module
    from kio.static.constants import EntityType

    return getattr(load_payload_module(api_key, version, EntityType.request), name)


def _wire(secure: SecureBroker, who: tuple[str, str]) -> Connection:
    security = ClientSecurity.from_properties(
        {
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(secure.pki.ca),
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": who[0],
            "sasl.password": who[1],
        }
    )
    return Connection("127.0.0.1", secure.ports["SASL_SSL"], security=security)


def test_nobody_else_can_produce_in_or_commit_a_transaction(secure: SecureBroker) -> None:
    """alice's transaction is open; bob, knowing her transactional id, producer id and
    epoch, tries to add a partition to it and to commit it: both refused."""
    txn_id = f"alice-{uuid.uuid4().hex[:6]}"
    producer = Producer({**_conf(secure, ALICE), "transactional.id": txn_id})
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(TOPIC, b"alice's, uncommitted")
    producer.flush(TIMEOUT_S)
    with closing(_wire(secure, ALICE)) as mine:
        (state,) = mine.call(
            ApiKey.DESCRIBE_TRANSACTIONS, transactional_ids=(txn_id,)
        ).transaction_states
    pid, epoch = state.producer_id, state.producer_epoch
    with closing(_wire(secure, BOB)) as conn:
        add = conn.call_at(
            ApiKey.ADD_PARTITIONS_TO_TXN,
            3,
            build(
                request_type(ApiKey.ADD_PARTITIONS_TO_TXN, 3),
                v3_and_below_transactional_id=txn_id,
                v3_and_below_producer_id=pid,
                v3_and_below_producer_epoch=epoch,
                v3_and_below_topics=(
                    build(
                        nested_request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, "AddPartitionsToTxnTopic"),
                        name=TOPIC,
                        partitions=(0,),
                    ),
                ),
            ),
        )
        end = conn.call_at(
            ApiKey.END_TXN,
            3,
            build(
                request_type(ApiKey.END_TXN, 3),
                transactional_id=txn_id,
                producer_id=pid,
                producer_epoch=epoch,
                committed=True,
            ),
        )
    assert end.error_code == ErrorCode.transactional_id_authorization_failed
    codes = {
        p.partition_error_code
        for t in add.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }
    assert codes == {ErrorCode.transactional_id_authorization_failed}
    # alice's transaction is untouched: she aborts it herself.
    producer.abort_transaction(TIMEOUT_S)


def _cli(
    secure: SecureBroker, who: tuple[str, str], tmp: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    config = tmp / f"{who[0]}.properties"
    config.write_text(
        "security.protocol=SASL_SSL\n"
        f"ssl.truststore.location={secure.pki.ca}\n"
        "ssl.truststore.type=PEM\n"
        "sasl.mechanism=SCRAM-SHA-256\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{who[0]}" password="{who[1]}";\n'
    )
    command = [sys.executable, "-m", "onceflow.cli.main", "transactions", *args]
    command += ["--bootstrap-server", secure.bootstrap("SASL_SSL"), "--command-config", str(config)]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def test_nobody_else_can_abort_a_transaction_with_the_hanging_tools(
    secure: SecureBroker, tmp_path: Path
) -> None:
    """bob may read alice's topic and so find her open transaction, but aborting it writes
    markers, which takes CLUSTER_ACTION: refused. The operator (a super user) can."""
    txn_id = f"alice-{uuid.uuid4().hex[:6]}"
    producer = Producer({**_conf(secure, ALICE), "transactional.id": txn_id})
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(TOPIC, b"open")
    producer.flush(TIMEOUT_S)
    with closing(_wire(secure, ALICE)) as conn:
        (state,) = conn.call(
            ApiKey.DESCRIBE_TRANSACTIONS, transactional_ids=(txn_id,)
        ).transaction_states
    pid, epoch = state.producer_id, state.producer_epoch
    abort = ["abort", "--topic", TOPIC, "--partition", "0", "--producer-id", str(pid)]
    abort += ["--producer-epoch", str(epoch), "--coordinator-epoch", "0"]
    denied = _cli(secure, BOB, tmp_path, *abort)
    assert denied.returncode != 0
    assert "CLUSTER_AUTHORIZATION_FAILED" in denied.stdout + denied.stderr
    with closing(_wire(secure, ALICE)) as conn:
        (after,) = conn.call(
            ApiKey.DESCRIBE_TRANSACTIONS, transactional_ids=(txn_id,)
        ).transaction_states
    assert after.transaction_state == "Ongoing"
    producer.abort_transaction(TIMEOUT_S)


def test_the_consumer_group_protocol_needs_read_on_the_group(secure: SecureBroker) -> None:
    """ConsumerGroupHeartbeat (KIP-848) is authorized as JoinGroup is: READ on the group."""
    conf = {**_conf(secure, BOB), "group.protocol": "consumer"}
    denied = _read(conf, TOPIC, "alice-kip848")
    assert isinstance(denied, KafkaError), denied
    assert "Group authorization failed" in denied.str(), denied
    assert _read(conf, TOPIC, "bob-kip848") == [b"seed"]
