"""The core APIs at every advertised version, over the wire: each request is built with kio's
schema of that version, sent by a raw client, and the answer decoded with kio's response
schema of the same version (flexible versions and their tagged fields included).
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from kio.index import load_payload_module
from kio.static.constants import EntityType

from onceflow.protocol.api_versions import ADVERTISED_VERSIONS, SUPPORTED_VERSIONS, ApiKey
from onceflow.protocol.codec import build, request_type
from onceflow.protocol.onceflow_apis import OWN_API_KEYS
from tests.helpers.broker import BrokerProcess
from tests.helpers.wire import RawConnection

TIMEOUT = datetime.timedelta(seconds=5)


def versions(api: int) -> range:
    lo, hi = SUPPORTED_VERSIONS[api]
    return range(lo, hi + 1)


def request(api: int, version: int, /, **fields: Any) -> Any:
    return build(request_type(api, version), **fields)


def entity(api: int, version: int, name: str, /, **fields: Any) -> Any:
    return build(getattr(load_payload_module(api, version, EntityType.request), name), **fields)


def call(broker: BrokerProcess, req: Any) -> Any:
    with RawConnection(broker.bootstrap) as conn:
        return conn.call(req)


# ---- ApiVersions ---------------------------------------------------------------------------


@pytest.mark.parametrize("version", versions(ApiKey.API_VERSIONS))
def test_api_versions(shared_broker: BrokerProcess, version: int) -> None:
    response = call(
        shared_broker,
        request(
            ApiKey.API_VERSIONS,
            version,
            client_software_name="raw-test",
            client_software_version="1.0",
        ),
    )
    assert response.error_code == 0
    listed = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    # Onceflow's own APIs are listed only to Onceflow's clients (test_api_versions_handler).
    assert listed == {k: v for k, v in ADVERTISED_VERSIONS.items() if k not in OWN_API_KEYS}
    if version >= 4:
        assert {f.name for f in response.supported_features} == {
            "group.version",
            "transaction.version",
        }
    if version >= 3:
        finalized = {(f.name, f.max_version_level) for f in response.finalized_features}
        assert finalized == {("group.version", 1)}


def test_api_versions_above_the_range_answers_v0_with_its_own_range(
    shared_broker: BrokerProcess,
) -> None:
    top = SUPPORTED_VERSIONS[ApiKey.API_VERSIONS][1]
    req = request(ApiKey.API_VERSIONS, 0)
    with RawConnection(shared_broker.bootstrap) as conn:
        correlation = conn.send_request(req, api_version=top + 1)
        response = conn.read_response(ApiKey.API_VERSIONS, 0, correlation)
    assert response.error_code == 35  # UNSUPPORTED_VERSION
    assert [(k.api_key, k.max_version) for k in response.api_keys] == [(18, top)]


# ---- Metadata ------------------------------------------------------------------------------


@pytest.mark.parametrize("version", versions(ApiKey.METADATA))
def test_metadata(shared_broker: BrokerProcess, version: int) -> None:
    name = f"wire-metadata-{version}"
    topics = (entity(ApiKey.METADATA, version, "MetadataRequestTopic", name=name, topic_id=None),)
    response = call(
        shared_broker,
        request(
            ApiKey.METADATA,
            version,
            topics=topics,
            allow_auto_topic_creation=True,
            include_cluster_authorized_operations=True,
            include_topic_authorized_operations=True,
        ),
    )
    (described,) = response.topics
    assert (described.name, described.error_code, len(described.partitions)) == (name, 0, 1)
    assert len(response.brokers) == 1
    if version >= 8:
        assert described.topic_authorized_operations != -(2**31)
    if version < 12:
        return
    # v12+: the same topic by its id.
    by_id = (
        entity(
            ApiKey.METADATA, version, "MetadataRequestTopic", name=None, topic_id=described.topic_id
        ),
    )
    again = call(
        shared_broker,
        request(
            ApiKey.METADATA,
            version,
            topics=by_id,
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        ),
    )
    assert [(t.name, t.topic_id, t.error_code) for t in again.topics] == [
        (name, described.topic_id, 0)
    ]


# ---- FindCoordinator -----------------------------------------------------------------------


@pytest.mark.parametrize("version", versions(ApiKey.FIND_COORDINATOR))
def test_find_coordinator(shared_broker: BrokerProcess, version: int) -> None:
    port = int(shared_broker.bootstrap.rsplit(":", 1)[1])
    if version < 4:
        req = request(ApiKey.FIND_COORDINATOR, version, key="wire-group", key_type=0)
        response = call(shared_broker, req)
        assert (response.error_code, response.node_id, response.port) == (0, 0, port)
        return
    req = request(
        ApiKey.FIND_COORDINATOR,
        version,
        key_type=1,
        coordinator_keys=("wire-txn-a", "wire-txn-b"),
    )
    response = call(shared_broker, req)
    assert [(c.key, c.error_code, c.port) for c in response.coordinators] == [
        ("wire-txn-a", 0, port),
        ("wire-txn-b", 0, port),
    ]


# ---- ListOffsets ---------------------------------------------------------------------------


@pytest.mark.parametrize("version", versions(ApiKey.LIST_OFFSETS))
def test_list_offsets(shared_broker: BrokerProcess, version: int) -> None:
    name = f"wire-list-offsets-{version}"
    topic = (entity(ApiKey.METADATA, 4, "MetadataRequestTopic", name=name),)
    call(shared_broker, request(ApiKey.METADATA, 4, topics=topic, allow_auto_topic_creation=True))
    # The newest special timestamp this version knows (-1, then -3 from v7, -4 from v8...).
    newest = {7: -3, 8: -4}.get(version, -5 if version >= 9 else -1)
    partitions = (
        entity(
            ApiKey.LIST_OFFSETS,
            version,
            "ListOffsetsPartition",
            partition_index=0,
            current_leader_epoch=-1,
            timestamp=newest,
        ),
    )
    req = request(
        ApiKey.LIST_OFFSETS,
        version,
        replica_id=-1,
        isolation_level=1,
        topics=(
            entity(
                ApiKey.LIST_OFFSETS, version, "ListOffsetsTopic", name=name, partitions=partitions
            ),
        ),
        timeout=TIMEOUT,
    )
    (answer,) = call(shared_broker, req).topics[0].partitions
    expected_offset = {-1: 0, -3: -1, -4: 0, -5: -1}[newest]  # an empty log
    assert (answer.error_code, answer.offset, answer.timestamp) == (0, expected_offset, -1)


# ---- DescribeCluster -----------------------------------------------------------------------


@pytest.mark.parametrize("version", versions(ApiKey.DESCRIBE_CLUSTER))
def test_describe_cluster(shared_broker: BrokerProcess, version: int) -> None:
    req = request(
        ApiKey.DESCRIBE_CLUSTER,
        version,
        include_cluster_authorized_operations=True,
        endpoint_type=1,
        include_fenced_brokers=True,
    )
    response = call(shared_broker, req)
    assert response.error_code == 0
    (node,) = response.brokers
    assert (node.broker_id, response.controller_id) == (0, 0)
    if version >= 2:
        assert node.is_fenced is False
