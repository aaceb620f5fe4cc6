"""AlterConfigs and IncrementalAlterConfigs through three clients' admin interfaces
(confluent-kafka, kafka-python, aiokafka): the changes take effect on the live logs
(max.message.bytes refuses a bigger batch, retention.ms deletes old segments), survive a
restart, show in DescribeConfigs with their sources, and bad input gets Kafka's codes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource as AioResource
from aiokafka.admin.config_resource import ConfigResourceType as AioType
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KpResource
from kafka.admin import ConfigResourceType as KpType
from kafka.admin import NewTopic as KpNewTopic
from kafka.admin._configs import AlterConfigOp

from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import admin_client, consumer, create_topic, producer, topic_name

T = 20.0
HOUR_MS = 3_600_000


def _incremental(
    name: str, kind: ResourceType = ResourceType.TOPIC, **ops: object
) -> ConfigResource:
    """A resource with `key=(op, value)` entries (dots in keys written as '__')."""
    entries = []
    for key, (op, value) in ops.items():  # type: ignore[misc]
        entries.append(ConfigEntry(key.replace("__", "."), value, incremental_operation=op))
    return ConfigResource(kind, name, incremental_configs=entries)


def _error_of(admin: AdminClient, resource: ConfigResource, *, legacy: bool = False) -> str:
    """The result of altering one resource: 'OK' or librdkafka's error name."""
    call = admin.alter_configs if legacy else admin.incremental_alter_configs
    try:
        with pytest.warns(DeprecationWarning) if legacy else _nothing():
            futures = call([resource], request_timeout=T)
        futures[resource].result(T)
    except KafkaException as exc:
        return str(exc.args[0].name())
    return "OK"


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _described(admin: AdminClient, kind: ResourceType, name: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(kind, name)
    result: dict[str, ConfigEntry] = admin.describe_configs([resource], request_timeout=T)[
        resource
    ].result(T)
    return result


def _low_watermark(bootstrap: str, topic: str) -> int:
    c = consumer(bootstrap)
    try:
        low, _high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=T)
        return int(low)
    finally:
        c.close()


def _segments(broker: BrokerProcess, topic: str) -> int:
    return len(list((Path(broker.data_dir) / f"{topic}-0").glob("*.log")))


def _produce(
    bootstrap: str, topic: str, values: list[bytes], timestamp_ms: int = 0, key: bytes | None = b"k"
) -> list[str]:
    """Produce each value as its own batch; the error name per value ('' when delivered)."""
    p = producer(bootstrap, acks="all", **{"linger.ms": 0})
    outcome: list[str] = []

    def delivered(err: KafkaError | None, _msg: object) -> None:
        outcome.append("" if err is None else str(err.name()))

    for value in values:
        p.produce(topic, value, key, partition=0, timestamp=timestamp_ms, on_delivery=delivered)
        p.flush(T)
    assert len(outcome) == len(values)
    return outcome


@pytest.mark.broker_overrides({"log.retention.check.interval.ms": "200"})
def test_confluent_changes_apply_to_the_live_log_and_survive_a_restart(
    broker: BrokerProcess,
) -> None:
    bs = broker.bootstrap
    admin = admin_client(bs)
    topic = create_topic(bs, partitions=1, config={"segment.bytes": "1024"})
    hour_ago = int(time.time() * 1000) - HOUR_MS
    assert _produce(bs, topic, [b"x" * 400] * 12, timestamp_ms=hour_ago) == [""] * 12
    assert _segments(broker, topic) > 2 and _low_watermark(bs, topic) == 0

    change = _incremental(
        topic,
        retention__ms=(AlterConfigOpType.SET, "60000"),
        max__message__bytes=(AlterConfigOpType.SET, "2000"),
        cleanup__policy=(AlterConfigOpType.APPEND, "compact"),
    )
    assert _error_of(admin, change) == "OK"
    described = _described(admin, ResourceType.TOPIC, topic)
    for key, value in (("retention.ms", "60000"), ("max.message.bytes", "2000")):
        assert described[key].value == value
        assert described[key].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert described["cleanup.policy"].value == "compact,delete"

    # Retention now deletes the old segments (all but the active one).
    deadline = time.monotonic() + T
    while _low_watermark(bs, topic) == 0:
        assert time.monotonic() < deadline, "retention.ms=60000 deleted nothing"
        time.sleep(0.2)
    # A batch above the new max.message.bytes is refused; a small one is not.
    assert _produce(bs, topic, [b"y" * 5000, b"z" * 10]) == ["MSG_SIZE_TOO_LARGE", ""]
    # And the topic compacts now, which takes keyed records only.
    assert _produce(bs, topic, [b"z"], key=None) == ["INVALID_RECORD"]

    # This broker's dynamic default for topics without an override.
    plain = create_topic(bs, partitions=1)
    broker_change = _incremental(
        "0", ResourceType.BROKER, log__retention__ms=(AlterConfigOpType.SET, str(2 * HOUR_MS))
    )
    assert _error_of(admin, broker_change) == "OK"

    broker.restart()
    admin = admin_client(bs)
    described = _described(admin, ResourceType.TOPIC, topic)
    assert described["max.message.bytes"].value == "2000"
    assert described["cleanup.policy"].value == "compact,delete"
    assert _produce(bs, topic, [b"y" * 5000]) == ["MSG_SIZE_TOO_LARGE"]
    retention = _described(admin, ResourceType.TOPIC, plain)["retention.ms"]
    assert retention.value == str(2 * HOUR_MS)
    assert retention.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    own = _described(admin, ResourceType.BROKER, "0")["log.retention.ms"]
    assert (own.value, own.source, own.is_read_only) == (
        str(2 * HOUR_MS),
        ConfigSource.DYNAMIC_BROKER_CONFIG.value,
        False,
    )

    # DELETE goes back to the defaults.
    undo = _incremental(topic, max__message__bytes=(AlterConfigOpType.DELETE, None))
    assert _error_of(admin, undo) == "OK"
    assert _produce(bs, topic, [b"y" * 5000]) == [""]


def test_confluent_bad_input_gets_kafkas_errors(shared_broker: BrokerProcess) -> None:
    bs = shared_broker.bootstrap
    admin = admin_client(bs)
    topic = create_topic(bs, partitions=1, config={"retention.ms": "100000"})
    SET, APPEND = AlterConfigOpType.SET, AlterConfigOpType.APPEND
    cases = [
        (_incremental(topic_name("absent"), retention__ms=(SET, "1")), "UNKNOWN_TOPIC_OR_PART"),
        (_incremental(topic, retention__ms=(SET, "soon")), "INVALID_CONFIG"),
        (_incremental(topic, no__such__key=(SET, "1")), "INVALID_CONFIG"),
        (_incremental(topic, retention__ms=(APPEND, "5")), "INVALID_CONFIG"),
        (_incremental("0", ResourceType.BROKER, num__partitions=(SET, "3")), "INVALID_REQUEST"),
    ]
    for resource, code in cases:
        assert _error_of(admin, resource) == code, resource
    absent = topic_name("absent")
    legacy = [
        (
            ConfigResource(ResourceType.TOPIC, absent, {"retention.ms": "1"}),
            "UNKNOWN_TOPIC_OR_PART",
        ),
        (ConfigResource(ResourceType.TOPIC, topic, {"retention.ms": "soon"}), "INVALID_CONFIG"),
        (ConfigResource(ResourceType.TOPIC, topic, {"no.such.key": "1"}), "INVALID_CONFIG"),
        (ConfigResource(ResourceType.BROKER, "0", {"log.dirs": "/x"}), "INVALID_REQUEST"),
    ]
    for resource, code in legacy:
        assert _error_of(admin, resource, legacy=True) == code, resource
    assert _described(admin, ResourceType.TOPIC, topic)["retention.ms"].value == "100000"
    # validate_only checks and changes nothing; the legacy API replaces every override.
    check = _incremental(topic, segment__bytes=(SET, "4096"))
    admin.incremental_alter_configs([check], validate_only=True)[check].result(T)
    assert _described(admin, ResourceType.TOPIC, topic)["segment.bytes"].is_default
    replace = ConfigResource(ResourceType.TOPIC, topic, {"segment.bytes": "4096"})
    assert _error_of(admin, replace, legacy=True) == "OK"
    described = _described(admin, ResourceType.TOPIC, topic)
    assert described["segment.bytes"].value == "4096"
    assert described["retention.ms"].is_default


@pytest.fixture
def kp_admin(shared_broker: BrokerProcess) -> Iterator[KafkaAdminClient]:
    a = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap, request_timeout_ms=20_000)
    try:
        yield a
    finally:
        a.close()


def test_kafka_python_alters_incrementally_and_wholesale(kp_admin: KafkaAdminClient) -> None:
    topic = topic_name("kp")
    kp_admin.create_topics([KpNewTopic(topic, 1, 1)], timeout_ms=20_000)

    def alter(configs: dict[str, object], incremental: bool = True, name: str = topic) -> str:
        resource = KpResource(KpType.TOPIC, name, configs=configs)
        result = kp_admin.alter_configs([resource], raise_on_unknown=False, incremental=incremental)
        return str(result["topic"][name])

    ops = {
        "retention.ms": (AlterConfigOp.SET, "123456"),
        "cleanup.policy": (AlterConfigOp.APPEND, "compact"),
    }
    assert alter(ops) == "OK"
    assert alter({"cleanup.policy": (AlterConfigOp.SUBTRACT, "delete")}) == "OK"
    described = kp_admin.describe_configs([KpResource(KpType.TOPIC, topic)])["topic"][topic]
    assert described["retention.ms"]["value"] == "123456"
    assert described["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert described["cleanup.policy"]["value"] == "compact"

    assert "UnknownTopicOrPartitionError" in alter({"retention.ms": "1"}, name=topic_name("no"))
    assert "InvalidConfigurationError" in alter({"retention.ms": "soon"})
    assert "InvalidConfigurationError" in alter({"no.such.key": "1"})
    assert "InvalidConfigurationError" in alter({"retention.ms": (AlterConfigOp.APPEND, "1")})
    assert "InvalidConfigurationError" in alter({"retention.ms": "soon"}, incremental=False)

    # The legacy API replaces every override; kafka-python sends the others along.
    assert alter({"segment.bytes": "8192"}, incremental=False) == "OK"
    described = kp_admin.describe_configs([KpResource(KpType.TOPIC, topic)])["topic"][topic]
    assert {key: entry["value"] for key, entry in described.items()} == {
        "segment.bytes": "8192",
        "retention.ms": "123456",
        "cleanup.policy": "compact",
    }

    broker = KpResource(KpType.BROKER, "0", configs={"log.flush.interval.ms": "1000"})
    result = kp_admin.alter_configs([broker], raise_on_unknown=False)
    assert "InvalidRequestError" not in str(result)  # a dynamic key: accepted
    broker = KpResource(
        KpType.BROKER, "0", configs={"log.flush.interval.ms": (AlterConfigOp.DELETE, None)}
    )
    assert str(kp_admin.alter_configs([broker], raise_on_unknown=False)["broker"]["0"]) == "OK"
    broker = KpResource(KpType.BROKER, "0", configs={"listeners": "PLAINTEXT://:1"})
    result = kp_admin.alter_configs([broker], raise_on_unknown=False)
    assert "InvalidRequestError" in str(result["broker"]["0"])


def test_aiokafka_alters_and_gets_kafkas_errors(shared_broker: BrokerProcess) -> None:
    bs = shared_broker.bootstrap
    topic = create_topic(bs, partitions=1)
    absent = topic_name("absent")

    async def main() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bs, request_timeout_ms=20_000)
        await admin.start()
        try:
            ok = AioResource(AioType.TOPIC, topic, configs={"retention.ms": "99999"})
            bad = [
                AioResource(AioType.TOPIC, topic, configs={"retention.ms": "soon"}),
                AioResource(AioType.TOPIC, topic, configs={"no.such.key": "1"}),
                AioResource(AioType.TOPIC, absent, configs={"retention.ms": "1"}),
            ]
            [response] = await admin.alter_configs([ok])
            assert [r[0] for r in response.resources] == [0]
            # One request naming a topic twice: INVALID_REQUEST for both, as Kafka answers.
            [response] = await admin.alter_configs(bad)
            assert [(r[0], r[3]) for r in response.resources] == [
                (42, topic),
                (42, topic),
                (3, absent),  # UNKNOWN_TOPIC_OR_PARTITION
            ]
            for resource in bad[:2]:
                [response] = await admin.alter_configs([resource])
                assert [r[0] for r in response.resources] == [40]  # INVALID_CONFIG
            described = await admin.describe_configs([AioResource(AioType.TOPIC, topic)])
            entries = {e[0]: e[1] for e in described[0].resources[0][4]}
            assert entries["retention.ms"] == "99999"
        finally:
            await admin.close()

    asyncio.run(main())
