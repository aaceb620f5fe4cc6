"""ApiVersions at every version on a real in-process Broker: the advertised ranges, Kafka's
INVALID_REQUEST for a malformed client software name (v3+), and the feature levels (KIP-584)
as Kafka 4.x lists them (no zero-minimum feature below v4, no level-0 finalized feature)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.unit.test_handler_authorization import Harness, run

from onceflow.broker.handlers.api_versions import unsupported_version_response
from onceflow.errors import ErrorCode
from onceflow.protocol import api_versions
from onceflow.protocol.api_versions import ADVERTISED_VERSIONS, SUPPORTED_VERSIONS, ApiKey
from onceflow.protocol.codec import encode_body
from onceflow.protocol.onceflow_apis import CLIENT_SOFTWARE_NAME, OWN_API_KEYS

API = ApiKey.API_VERSIONS
VERSIONS = range(SUPPORTED_VERSIONS[API][0], SUPPORTED_VERSIONS[API][1] + 1)
SOFTWARE = {"client_software_name": "confluent-kafka-python", "client_software_version": "2.16.1"}


def test_kafka_4_1s_range() -> None:
    assert SUPPORTED_VERSIONS[API] == (0, 4)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_version_lists_every_api(tmp_path: Path, version: int) -> None:
    """Every Kafka API to every client; Onceflow's own only to Onceflow's clients (v3+)."""
    kafka_apis = {k: v for k, v in ADVERTISED_VERSIONS.items() if k not in OWN_API_KEYS}

    async def body(h: Harness) -> None:
        response = await h.call(API, version, **SOFTWARE)
        assert response.error_code == ErrorCode.none
        listed = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        assert listed == kafka_apis
        if version >= 3:
            ours = {"client_software_name": CLIENT_SOFTWARE_NAME, "client_software_version": "1"}
            response = await h.call(API, version, **ours)
            listed = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
            assert listed == ADVERTISED_VERSIONS

    run(tmp_path, body)


@pytest.mark.parametrize("version", [3, 4])
@pytest.mark.parametrize(
    ("name", "software_version"),
    [("", "1.0"), ("kafka-python", ""), ("-leading-dash", "1"), ("app", "1.0 beta"), ("a_b", "1")],
)
def test_a_malformed_software_name_or_version_is_invalid_request(
    tmp_path: Path, version: int, name: str, software_version: str
) -> None:
    async def body(h: Harness) -> None:
        response = await h.call(
            API, version, client_software_name=name, client_software_version=software_version
        )
        assert response.error_code == ErrorCode.invalid_request
        assert response.api_keys == ()

    run(tmp_path, body)


@pytest.mark.parametrize(("name", "software_version"), [("a", "1"), ("sarama", "1.43.2-dev.x")])
def test_kafkas_pattern_accepts(tmp_path: Path, name: str, software_version: str) -> None:
    async def body(h: Harness) -> None:
        response = await h.call(
            API, 3, client_software_name=name, client_software_version=software_version
        )
        assert response.error_code == ErrorCode.none

    run(tmp_path, body)


def test_features_today_lead_no_client_into_tv2(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        v4 = await h.call(API, 4, **SOFTWARE)
        supported = {f.name: (f.min_version, f.max_version) for f in v4.supported_features}
        assert supported == {"group.version": (0, 1), "transaction.version": (0, 2)}
        # Level 0 is never listed as finalized: the Java producer sees no transaction.version
        # (TV2 off) and librdkafka reads no features at all. group.version 1 is KIP-848.
        finalized = [
            (f.name, f.min_version_level, f.max_version_level) for f in v4.finalized_features
        ]
        assert finalized == [("group.version", 1, 1)]
        assert v4.finalized_features_epoch == 1
        # Below v4 a feature whose minimum is 0 is left out (KAFKA-17492).
        v3 = await h.call(API, 3, **SOFTWARE)
        assert v3.supported_features == ()
        assert v3.finalized_features_epoch == 1

    run(tmp_path, body)


def test_features_above_level_0_are_listed_as_kafka_lists_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(api_versions, "SUPPORTED_FEATURES", {"a.version": (1, 3), "b": (0, 2)})
    from onceflow.broker.handlers import api_versions as handler

    monkeypatch.setattr(handler, "SUPPORTED_FEATURES", api_versions.SUPPORTED_FEATURES)

    async def body(h: Harness) -> None:
        v4 = await h.call(API, 4, **SOFTWARE)
        assert [(f.name, f.min_version, f.max_version) for f in v4.supported_features] == [
            ("a.version", 1, 3),
            ("b", 0, 2),
        ]
        v3 = await h.call(API, 3, **SOFTWARE)
        assert [f.name for f in v3.supported_features] == ["a.version"]

    run(tmp_path, body)


@pytest.mark.parametrize("level", [1, 2])
def test_the_configured_transaction_version_is_finalized_with_a_higher_epoch(
    tmp_path: Path, level: int
) -> None:
    """onceflow.transaction.version is the finalized level of transaction.version; the
    epoch rises with it, so a client that saw level 0 takes the new level."""

    async def body(h: Harness) -> None:
        v4 = await h.call(API, 4, **SOFTWARE)
        finalized = [
            (f.name, f.min_version_level, f.max_version_level) for f in v4.finalized_features
        ]
        assert finalized == [("group.version", 1, 1), ("transaction.version", level, level)]
        assert v4.finalized_features_epoch > 1
        for old in (0, 1, 2):  # no features before v3 (kafka-python, aiokafka ask v0-v2)
            assert (await h.call(API, old)).error_code == ErrorCode.none

    run(tmp_path, body, onceflow_transaction_version=level)


def test_an_unknown_version_is_answered_at_v0_with_apiversions_own_range() -> None:
    """KIP-511, as Kafka's getErrorResponse: only ApiVersions' entry, so the client retries
    at the highest version both speak."""
    response = unsupported_version_response()
    assert response.error_code == ErrorCode.unsupported_version
    assert [(k.api_key, k.min_version, k.max_version) for k in response.api_keys] == [(API, 0, 4)]
    encode_body(response)


def test_produce_is_listed_from_v0_but_served_from_v3() -> None:
    """As Kafka 4.x (KAFKA-18659): older librdkafka compresses only if it sees Produce v0-2
    listed; the versions themselves are still refused."""
    from onceflow.protocol.api_versions import is_supported

    assert ADVERTISED_VERSIONS[ApiKey.PRODUCE] == (0, SUPPORTED_VERSIONS[ApiKey.PRODUCE][1])
    assert not any(is_supported(ApiKey.PRODUCE, v) for v in (0, 1, 2))
    assert is_supported(ApiKey.PRODUCE, 3)
