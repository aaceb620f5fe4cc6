"""DescribeCluster at every version on a real in-process Broker: the brokers (none fenced,
v2), the controller and cluster id, Kafka's answer to a controller endpoint type (v1+), and
the cluster's authorized operations."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.unit.test_handler_authorization import Harness, cluster, run

from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import SUPPORTED_VERSIONS, ApiKey
from onceflow.security.acl import AclOperation

API = ApiKey.DESCRIBE_CLUSTER
VERSIONS = range(SUPPORTED_VERSIONS[API][0], SUPPORTED_VERSIONS[API][1] + 1)
NO_OPERATIONS = -(2**31)


def test_kafka_4_1s_range() -> None:
    assert SUPPORTED_VERSIONS[API] == (0, 2)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("fenced", [False, True])
def test_every_version_lists_the_brokers(tmp_path: Path, version: int, fenced: bool) -> None:
    async def body(h: Harness) -> None:
        response = await h.call(
            API,
            version,
            include_cluster_authorized_operations=False,
            endpoint_type=1,
            include_fenced_brokers=fenced,
        )
        assert response.error_code == ErrorCode.none and response.error_message is None
        assert response.cluster_id == h.broker.cluster_id
        assert response.controller_id == h.broker.node_id
        assert response.cluster_authorized_operations == NO_OPERATIONS
        (node,) = response.brokers
        assert node.broker_id == h.broker.node_id and node.port > 0 and node.rack is None
        if version >= 1:
            assert response.endpoint_type == 1
        if version >= 2:
            assert node.is_fenced is False

    run(tmp_path, body)


@pytest.mark.parametrize("version", VERSIONS[1:])
@pytest.mark.parametrize(("endpoint", "name"), [(2, "CONTROLLER"), (0, "UNKNOWN"), (9, "UNKNOWN")])
def test_another_endpoint_type_is_unsupported(
    tmp_path: Path, version: int, endpoint: int, name: str
) -> None:
    async def body(h: Harness) -> None:
        h.acl.grant(cluster(AclOperation.DESCRIBE))
        response = await h.call(
            API,
            version,
            include_cluster_authorized_operations=True,
            endpoint_type=endpoint,
            include_fenced_brokers=False,
        )
        assert response.error_code == ErrorCode.unsupported_endpoint_type
        assert response.error_message.endswith(f"an endpoint of type {name}")
        assert (response.endpoint_type, response.cluster_id, response.controller_id) == (1, "", -1)
        assert (response.brokers, response.cluster_authorized_operations) == ((), NO_OPERATIONS)

    run(tmp_path, body)


@pytest.mark.parametrize("version", VERSIONS)
def test_authorized_operations(tmp_path: Path, version: int) -> None:
    async def body(h: Harness) -> None:
        fields = {
            "include_cluster_authorized_operations": True,
            "endpoint_type": 1,
            "include_fenced_brokers": False,
        }
        response = await h.call(API, version, **fields)
        assert response.cluster_authorized_operations == 0
        h.acl.grant(cluster(AclOperation.DESCRIBE), cluster(AclOperation.ALTER))
        response = await h.call(API, version, **fields)
        expected = (1 << AclOperation.DESCRIBE) | (1 << AclOperation.ALTER)
        assert response.cluster_authorized_operations == expected

    run(tmp_path, body)
