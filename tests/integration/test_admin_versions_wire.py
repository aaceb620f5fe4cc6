"""The admin APIs at every advertised version, over the wire with kio's schemas (see
test_core_versions_wire.py): CreateTopics 2-7, DeleteTopics 1-6, DescribeConfigs 1-4,
OffsetForLeaderEpoch 2-4 and ListTransactions 0-2, each version's own fields, and bad input
answered with Kafka's error codes."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest
from confluent_kafka import Producer

from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.topic_ids import ZERO_UUID
from tests.helpers.broker import BrokerProcess
from tests.integration.test_core_versions_wire import call, entity, request, versions

TIMEOUT = datetime.timedelta(seconds=5)

RESOURCE_TOPIC = 2
DYNAMIC_TOPIC_CONFIG = 1
DEFAULT_CONFIG = 5


def creatable(version: int, name: str, partitions: int = 2, **configs: str | None) -> Any:
    return entity(
        ApiKey.CREATE_TOPICS,
        version,
        "CreatableTopic",
        name=name,
        num_partitions=partitions,
        replication_factor=-1,
        assignments=(),
        configs=tuple(
            entity(ApiKey.CREATE_TOPICS, version, "CreatableTopicConfig", name=k, value=v)
            for k, v in configs.items()
        ),
    )


def create(broker: BrokerProcess, version: int, *topics: Any, validate_only: bool = False) -> Any:
    req = request(
        ApiKey.CREATE_TOPICS, version, topics=topics, timeout=TIMEOUT, validate_only=validate_only
    )
    return call(broker, req).topics


def metadata_ids(broker: BrokerProcess, *names: str) -> dict[str, tuple[int, uuid.UUID | None]]:
    """Each named topic's Metadata v12 error code and topic id."""
    topics = tuple(
        entity(ApiKey.METADATA, 12, "MetadataRequestTopic", name=n, topic_id=None) for n in names
    )
    response = call(
        broker,
        request(
            ApiKey.METADATA,
            12,
            topics=topics,
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        ),
    )
    return {t.name: (t.error_code, t.topic_id) for t in response.topics}


# ---- CreateTopics ----------------------------------------------------------------------------


@pytest.mark.parametrize("version", versions(ApiKey.CREATE_TOPICS))
def test_create_topics(shared_broker: BrokerProcess, version: int) -> None:
    name = f"wire-create-{version}"
    (result,) = create(shared_broker, version, creatable(version, name, **{"retention.ms": "1234"}))
    assert (result.name, result.error_code) == (name, ErrorCode.none)
    created_id = metadata_ids(shared_broker, name)[name][1]
    assert created_id is not None
    if version >= 5:  # the topic's configs, partition count and replication factor
        assert (result.num_partitions, result.replication_factor) == (2, 1)
        assert result.topic_config_error_code == ErrorCode.none
        configs = {c.name: c for c in result.configs}
        assert configs["retention.ms"].value == "1234"
        assert configs["retention.ms"].config_source == DYNAMIC_TOPIC_CONFIG
        assert configs["cleanup.policy"].value == "delete"
        assert configs["cleanup.policy"].config_source == DEFAULT_CONFIG
        assert list(configs) == sorted(configs)
    if version >= 7:
        assert result.topic_id == created_id


@pytest.mark.parametrize("version", versions(ApiKey.CREATE_TOPICS))
def test_create_topics_validate_only_creates_nothing(
    shared_broker: BrokerProcess, version: int
) -> None:
    name = f"wire-create-validate-{version}"
    (result,) = create(shared_broker, version, creatable(version, name, 3), validate_only=True)
    assert result.error_code == ErrorCode.none
    assert metadata_ids(shared_broker, name)[name][0] == ErrorCode.unknown_topic_or_partition
    if version >= 5:
        assert (result.num_partitions, result.replication_factor) == (3, 1)
        assert result.configs
    if version >= 7:  # as Kafka: an id for the topic that would be made, never stored
        assert result.topic_id not in (None, ZERO_UUID)


@pytest.mark.parametrize("validate_only", [False, True])
@pytest.mark.parametrize("version", versions(ApiKey.CREATE_TOPICS))
def test_create_topics_bad_input(
    shared_broker: BrokerProcess, version: int, validate_only: bool
) -> None:
    """Every check holds whether the topics are made or only validated."""
    existing = f"wire-create-existing-{version}"
    create(shared_broker, version, creatable(version, existing))
    twice = f"wire-create-twice-{version}-{validate_only}"
    results = create(
        shared_broker,
        version,
        creatable(version, f"wire-create-badconfig-{version}", **{"retention.ms": "soon"}),
        creatable(version, f"wire-create-unknownconfig-{version}", **{"no.such.key": "1"}),
        creatable(version, f"wire-create-nullconfig-{version}", **{"retention.ms": None}),
        creatable(version, existing),
        creatable(version, f"wire-create-zero-{version}", 0),
        creatable(version, "bad/name"),
        creatable(version, twice),
        creatable(version, twice),
        validate_only=validate_only,
    )
    codes = [(r.name, r.error_code) for r in results]
    assert codes == [
        (f"wire-create-badconfig-{version}", ErrorCode.invalid_config),
        (f"wire-create-unknownconfig-{version}", ErrorCode.invalid_config),
        (f"wire-create-nullconfig-{version}", ErrorCode.invalid_config),
        (existing, ErrorCode.topic_already_exists),
        (f"wire-create-zero-{version}", ErrorCode.invalid_partitions),
        ("bad/name", ErrorCode.invalid_topic_exception),
        (twice, ErrorCode.none),
        (twice, ErrorCode.invalid_request),
    ]
    if version >= 5:  # a failed topic has no configs, partitions or replication factor
        failed = results[0]
        assert (failed.num_partitions, failed.replication_factor, failed.configs) == (-1, -1, ())
    if version >= 7:
        assert results[3].topic_id in (None, ZERO_UUID)


# ---- DeleteTopics ----------------------------------------------------------------------------


def delete_request(version: int, *refs: tuple[str | None, uuid.UUID | None]) -> Any:
    if version < 6:
        return request(
            ApiKey.DELETE_TOPICS, version, topic_names=tuple(n for n, _ in refs), timeout=TIMEOUT
        )
    states = tuple(
        entity(ApiKey.DELETE_TOPICS, version, "DeleteTopicState", name=n, topic_id=i)
        for n, i in refs
    )
    return request(ApiKey.DELETE_TOPICS, version, topics=states, timeout=TIMEOUT)


def make_topic(broker: BrokerProcess, name: str) -> uuid.UUID:
    (result,) = create(broker, 7, creatable(7, name, 1))
    assert result.error_code == ErrorCode.none
    return result.topic_id  # type: ignore[no-any-return]


@pytest.mark.parametrize("version", versions(ApiKey.DELETE_TOPICS))
def test_delete_topics_by_name(shared_broker: BrokerProcess, version: int) -> None:
    name = f"wire-delete-{version}"
    topic_id = make_topic(shared_broker, name)
    missing = f"wire-delete-missing-{version}"
    response = call(shared_broker, delete_request(version, (name, None), (missing, None)))
    by_name = {r.name: r for r in response.responses}
    assert by_name[name].error_code == ErrorCode.none
    assert by_name[missing].error_code == ErrorCode.unknown_topic_or_partition
    assert metadata_ids(shared_broker, name)[name][0] == ErrorCode.unknown_topic_or_partition
    if version >= 6:  # answers by name carry the deleted topic's id
        assert by_name[name].topic_id == topic_id


@pytest.mark.parametrize("version", versions(ApiKey.DELETE_TOPICS))
def test_delete_topics_repeated_name_is_answered_once(
    shared_broker: BrokerProcess, version: int
) -> None:
    name = f"wire-delete-twice-{version}"
    make_topic(shared_broker, name)
    response = call(shared_broker, delete_request(version, (name, None), (name, None)))
    assert [(r.name, r.error_code) for r in response.responses] == [
        (name, ErrorCode.invalid_request)
    ]
    assert metadata_ids(shared_broker, name)[name][0] == ErrorCode.none  # nothing deleted


def test_delete_topics_v6_by_topic_id(shared_broker: BrokerProcess) -> None:
    name = "wire-delete-by-id"
    topic_id = make_topic(shared_broker, name)
    unknown = uuid.uuid4()
    response = call(shared_broker, delete_request(6, (None, topic_id), (None, unknown)))
    by_id = {r.topic_id: r for r in response.responses}
    assert (by_id[topic_id].name, by_id[topic_id].error_code) == (name, ErrorCode.none)
    assert (by_id[unknown].name, by_id[unknown].error_code) == (None, ErrorCode.unknown_topic_id)
    assert metadata_ids(shared_broker, name)[name][0] == ErrorCode.unknown_topic_or_partition
    # The same name made again is a new topic with a new id; the old id is gone.
    new_id = make_topic(shared_broker, name)
    assert new_id != topic_id
    (again,) = call(shared_broker, delete_request(6, (None, topic_id))).responses
    assert again.error_code == ErrorCode.unknown_topic_id


def test_delete_topics_v6_bad_entries(shared_broker: BrokerProcess) -> None:
    name = "wire-delete-bad-entries"
    topic_id = make_topic(shared_broker, name)
    other = "wire-delete-bad-entries-other"
    other_id = make_topic(shared_broker, other)
    response = call(
        shared_broker,
        delete_request(
            6,
            (name, topic_id),  # both a name and an id
            (None, None),  # neither
            (None, other_id),
            (None, other_id),  # the same id twice
        ),
    )
    assert [(r.name, r.topic_id, r.error_code) for r in response.responses] == [
        (name, topic_id, ErrorCode.invalid_request),
        (None, None, ErrorCode.invalid_request),  # kio reads the zero id as None
        (None, other_id, ErrorCode.invalid_request),
    ]
    remaining = metadata_ids(shared_broker, name, other)
    assert {n: code for n, (code, _) in remaining.items()} == {name: 0, other: 0}


def test_delete_topics_v6_a_topic_by_name_and_by_id_is_refused_and_kept(
    shared_broker: BrokerProcess,
) -> None:
    """Kafka's controller: a name that maps to an id also given is INVALID_REQUEST, and the
    topic is not deleted by either entry."""
    name = "wire-delete-name-and-id"
    topic_id = make_topic(shared_broker, name)
    response = call(shared_broker, delete_request(6, (name, None), (None, topic_id)))
    assert [r.error_code for r in response.responses] == [ErrorCode.invalid_request] * 2
    assert metadata_ids(shared_broker, name)[name][0] == ErrorCode.none


@pytest.mark.broker_overrides({"delete.topic.enable": "false"})
def test_delete_topics_when_deletion_is_off(broker: BrokerProcess) -> None:
    name = "wire-delete-disabled"
    make_topic(broker, name)
    for version in versions(ApiKey.DELETE_TOPICS):
        (result,) = call(broker, delete_request(version, (name, None))).responses
        # Kafka's controller: INVALID_REQUEST before v3, which brought TOPIC_DELETION_DISABLED.
        expected = ErrorCode.invalid_request if version < 3 else ErrorCode.topic_deletion_disabled
        assert (result.name, result.error_code) == (name, expected), version
    assert metadata_ids(broker, name)[name][0] == ErrorCode.none


# ---- DescribeConfigs -------------------------------------------------------------------------


@pytest.mark.parametrize("version", versions(ApiKey.DESCRIBE_CONFIGS))
def test_describe_configs(shared_broker: BrokerProcess, version: int) -> None:
    name = f"wire-describe-configs-{version}"
    make_topic(shared_broker, name)

    def resource(topic: str) -> Any:
        return entity(
            ApiKey.DESCRIBE_CONFIGS,
            version,
            "DescribeConfigsResource",
            resource_type=RESOURCE_TOPIC,
            resource_name=topic,
            configuration_keys=("retention.ms", "cleanup.policy"),
        )

    response = call(
        shared_broker,
        request(
            ApiKey.DESCRIBE_CONFIGS,
            version,
            resources=(resource(name), resource("wire-describe-configs-missing")),
            include_synonyms=True,
            include_documentation=True,
        ),
    )
    found, missing = response.results
    assert found.error_code == ErrorCode.none
    assert sorted(c.name for c in found.configs) == ["cleanup.policy", "retention.ms"]
    retention = next(c for c in found.configs if c.name == "retention.ms")
    assert retention.synonyms  # v1+
    if version >= 3:  # documentation and the value's type (LONG)
        assert retention.documentation
        assert retention.config_type == 5
    assert missing.error_code == ErrorCode.unknown_topic_or_partition


# ---- OffsetForLeaderEpoch --------------------------------------------------------------------


@pytest.mark.parametrize("version", versions(ApiKey.OFFSET_FOR_LEADER_EPOCH))
def test_offset_for_leader_epoch(shared_broker: BrokerProcess, version: int) -> None:
    name = f"wire-leader-epoch-{version}"
    make_topic(shared_broker, name)
    with Producer({"bootstrap.servers": shared_broker.bootstrap}) as producer:
        for i in range(3):
            producer.produce(name, b"x%d" % i, partition=0)
        assert producer.flush(10) == 0

    def partition(index: int, current: int) -> Any:
        return entity(
            ApiKey.OFFSET_FOR_LEADER_EPOCH,
            version,
            "OffsetForLeaderPartition",
            partition=index,
            current_leader_epoch=current,
            leader_epoch=0,
        )

    topics = (
        entity(
            ApiKey.OFFSET_FOR_LEADER_EPOCH,
            version,
            "OffsetForLeaderTopic",
            topic=name,
            partitions=(partition(0, -1), partition(0, 99), partition(7, -1)),
        ),
        entity(
            ApiKey.OFFSET_FOR_LEADER_EPOCH,
            version,
            "OffsetForLeaderTopic",
            topic="wire-leader-epoch-missing",
            partitions=(partition(0, -1),),
        ),
    )
    response = call(
        shared_broker,
        request(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, replica_id=-1, topics=topics),
    )
    answers = [
        (t.topic, p.partition, p.error_code, p.leader_epoch, p.end_offset)
        for t in response.topics
        for p in t.partitions
    ]
    assert answers == [
        (name, 0, ErrorCode.none, 0, 3),
        (name, 0, ErrorCode.unknown_leader_epoch, -1, -1),  # a newer epoch than the leader's
        (name, 7, ErrorCode.unknown_topic_or_partition, -1, -1),
        ("wire-leader-epoch-missing", 0, ErrorCode.unknown_topic_or_partition, -1, -1),
    ]


# ---- ListTransactions ------------------------------------------------------------------------


@pytest.fixture
def open_transactions(shared_broker: BrokerProcess) -> Any:
    """Two transactional producers with a transaction open each, ids `wire-list-{a,b}`."""
    topic = "wire-list-transactions"
    if metadata_ids(shared_broker, topic)[topic][0] != ErrorCode.none:
        make_topic(shared_broker, topic)
    producers = []
    for suffix in ("a", "b"):
        producer = Producer(
            {
                "bootstrap.servers": shared_broker.bootstrap,
                "transactional.id": f"wire-list-{suffix}",
            }
        )
        producer.init_transactions(10)
        producer.begin_transaction()
        producer.produce(topic, b"open")
        assert producer.flush(10) == 0
        producers.append(producer)
    yield
    for producer in producers:
        producer.abort_transaction(10)


@pytest.mark.usefixtures("open_transactions")
@pytest.mark.parametrize("version", versions(ApiKey.LIST_TRANSACTIONS))
def test_list_transactions(shared_broker: BrokerProcess, version: int) -> None:
    def listed(**filters: Any) -> tuple[int, list[str]]:
        response = call(
            shared_broker,
            request(
                ApiKey.LIST_TRANSACTIONS,
                version,
                state_filters=("Ongoing",),
                producer_id_filters=(),
                **filters,
            ),
        )
        ids = [t.transactional_id for t in response.transaction_states]
        return response.error_code, [i for i in ids if i.startswith("wire-list-")]

    assert listed() == (ErrorCode.none, ["wire-list-a", "wire-list-b"])
    if version >= 1:  # KIP-994: only transactions running longer than the duration
        assert listed(duration_filter=0) == (ErrorCode.none, ["wire-list-a", "wire-list-b"])
        assert listed(duration_filter=3_600_000) == (ErrorCode.none, [])
    if version >= 2:  # KIP-1152: ids the pattern matches whole
        assert listed(transactional_id_pattern="wire-list-[b-z]") == (
            ErrorCode.none,
            ["wire-list-b"],
        )
        assert listed(transactional_id_pattern="wire-list") == (ErrorCode.none, [])
        assert listed(transactional_id_pattern="wire-(list") == (
            ErrorCode.invalid_regular_expression,
            [],
        )
