"""FindCoordinator at every version on a real in-process Broker: one key (v0-3) or a batch
(v4+), DESCRIBE on each group or transactional id, share-group keys (v6) answered as a
Kafka without a share coordinator answers them, and unknown key types."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.unit.test_handler_authorization import (
    CLUSTER_DENIED,
    GROUP_DENIED,
    TXN_DENIED,
    Harness,
    cluster,
    run,
)

from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import SUPPORTED_VERSIONS, ApiKey
from onceflow.security.acl import AclOperation, ResourceType

API = ApiKey.FIND_COORDINATOR
VERSIONS = range(SUPPORTED_VERSIONS[API][0], SUPPORTED_VERSIONS[API][1] + 1)
GROUP, TXN, SHARE = 0, 1, 2
Answer = tuple[str, int, int]  # key, error, node id


def answers(version: int, response: Any, keys: tuple[str, ...]) -> list[Answer]:
    if version < 4:
        assert len(keys) == 1
        return [(keys[0], response.error_code, response.node_id)]
    return [(c.key, c.error_code, c.node_id) for c in response.coordinators]


async def find(h: Harness, version: int, key_type: int, *keys: str) -> list[Answer]:
    if version < 4:
        response = await h.call(API, version, key=keys[0], key_type=key_type)
    else:
        response = await h.call(API, version, key_type=key_type, coordinator_keys=keys)
    if version >= 1:
        assert response.throttle_time.total_seconds() == 0
    return answers(version, response, keys)


def test_kafka_4_1s_range() -> None:
    assert SUPPORTED_VERSIONS[API] == (0, 6)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_version_finds_groups_and_transactional_ids(tmp_path: Path, version: int) -> None:
    async def body(h: Harness) -> None:
        h.acl.grant((AclOperation.DESCRIBE, ResourceType.GROUP, "g"))
        h.acl.grant((AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, "t"))
        node = h.broker.node_id
        assert await find(h, version, GROUP, "g") == [("g", 0, node)]
        assert await find(h, version, GROUP, "h") == [("h", GROUP_DENIED, -1)]
        if version >= 1:  # v0 has no key type: groups only
            assert await find(h, version, TXN, "t") == [("t", 0, node)]
            assert await find(h, version, TXN, "u") == [("u", TXN_DENIED, -1)]

    run(tmp_path, body)


@pytest.mark.parametrize("version", [4, 5, 6])
def test_a_batch_answers_each_key(tmp_path: Path, version: int) -> None:
    async def body(h: Harness) -> None:
        h.acl.grant((AclOperation.DESCRIBE, ResourceType.GROUP, "g"))
        h.acl.grant((AclOperation.DESCRIBE, ResourceType.GROUP, "k"))
        node = h.broker.node_id
        got = await find(h, version, GROUP, "g", "h", "k", "g")
        assert got == [("g", 0, node), ("h", GROUP_DENIED, -1), ("k", 0, node), ("g", 0, node)]
        response = await h.call(API, version, key_type=GROUP, coordinator_keys=())
        assert response.coordinators == ()
        # Host and port are the listener's for a found key, Kafka's no-node for the others.
        response = await h.call(API, version, key_type=GROUP, coordinator_keys=("g", "h"))
        found, refused = response.coordinators
        assert found.host and found.port > 0 and found.error_message is None
        assert (refused.host, refused.port) == ("", -1)

    run(tmp_path, body)


@pytest.mark.parametrize("version", VERSIONS[1:])
def test_an_unknown_key_type_fails_every_key(tmp_path: Path, version: int) -> None:
    async def body(h: Harness) -> None:
        h.use(None)
        keys = ("a",) if version < 4 else ("a", "b")
        got = await find(h, version, 7, *keys)
        assert got == [(k, ErrorCode.invalid_request, -1) for k in keys]

    run(tmp_path, body)


@pytest.mark.parametrize("version", VERSIONS[1:])
def test_share_keys(tmp_path: Path, version: int) -> None:
    """Before v6 INVALID_REQUEST; at v6 CLUSTER_ACTION first (its refusal fails every key),
    then INVALID_REQUEST: there is no share coordinator."""

    async def body(h: Harness) -> None:
        keys = ("grp:AAAAAAAAAAAAAAAAAAAAAA:0",) if version < 4 else ("s:x:0", "s:y:1")
        if version >= 6:
            got = await find(h, version, SHARE, *keys)
            assert got == [(k, CLUSTER_DENIED, -1) for k in keys]
            assert h.acl.calls.count(cluster(AclOperation.CLUSTER_ACTION)) == 1
            h.acl.grant(cluster(AclOperation.CLUSTER_ACTION))
        got = await find(h, version, SHARE, *keys)
        assert got == [(k, ErrorCode.invalid_request, -1) for k in keys]
        if version < 6:
            assert cluster(AclOperation.CLUSTER_ACTION) not in h.acl.calls

    run(tmp_path, body)


@pytest.mark.parametrize("version", [1, 3])
def test_a_single_key_error_carries_kafkas_message(tmp_path: Path, version: int) -> None:
    async def body(h: Harness) -> None:
        response = await h.call(API, version, key="h", key_type=GROUP)
        assert response.error_code == GROUP_DENIED
        assert response.error_message == "Group authorization failed."
        assert (response.host, response.port) == ("", -1)

    run(tmp_path, body)
