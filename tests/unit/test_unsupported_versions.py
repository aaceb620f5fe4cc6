"""A request at a version the broker does not serve is named once per client id, API and
version (at WARNING, with the client, its address, the API, the version and the range
served), later ones at DEBUG, and what is remembered stays bounded."""

from __future__ import annotations

import logging

import pytest
from tests.helpers.wire import request_frame

from onceflow.broker.unsupported_versions import Reporter, api_name, client_id
from onceflow.protocol.codec import RequestHeader

OFFSET_COMMIT, PRODUCE, METADATA = 8, 0, 3
LOGGER = "onceflow.broker.unsupported_versions"


def frame(api_key: int, version: int, client: str) -> bytes:
    return request_frame(api_key, version, 1, b"\x00" * 8, flexible=False, client_id=client)[4:]


def send(reporter: Reporter, api_key: int, version: int, client: str) -> None:
    reporter.report(
        frame(api_key, version, client), RequestHeader(api_key, version, 1, None), "10.0.0.1:5000"
    )


def lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == level]


def test_one_warning_per_client_api_and_version(caplog: pytest.LogCaptureFixture) -> None:
    reporter = Reporter()
    with caplog.at_level(logging.DEBUG, LOGGER):
        send(reporter, OFFSET_COMMIT, 1, "old-sarama")
        send(reporter, OFFSET_COMMIT, 1, "old-sarama")
        send(reporter, OFFSET_COMMIT, 1, "old-sarama")
        send(reporter, OFFSET_COMMIT, 1, "other-app")
        send(reporter, OFFSET_COMMIT, 0, "old-sarama")
        send(reporter, PRODUCE, 2, "old-sarama")
    warnings = lines(caplog, logging.WARNING)
    assert len(warnings) == 4
    assert len(lines(caplog, logging.DEBUG)) == 2
    first = warnings[0]
    assert "'old-sarama'" in first and "10.0.0.1:5000" in first
    assert "OffsetCommit v1" in first and "minimum v2" in first
    assert "closing the connection" in first
    assert "'other-app'" in warnings[1]
    assert "OffsetCommit v0" in warnings[2]
    assert "Produce v2" in warnings[3] and "minimum v3" in warnings[3]


def test_above_the_maximum_and_an_unknown_api_are_named_too(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reporter = Reporter()
    with caplog.at_level(logging.WARNING, LOGGER):
        send(reporter, METADATA, 99, "future")
        send(reporter, 999, 0, "future")
    above, unknown = lines(caplog, logging.WARNING)
    assert "Metadata v99" in above and "above the maximum" in above
    assert "API key 999 v0" in unknown and "does not serve" in unknown


def test_what_is_remembered_is_bounded(caplog: pytest.LogCaptureFixture) -> None:
    reporter = Reporter(capacity=3)
    with caplog.at_level(logging.WARNING, LOGGER):
        for i in range(10):
            send(reporter, OFFSET_COMMIT, 1, f"client-{i}")
        assert len(reporter._named) == 3
        send(reporter, OFFSET_COMMIT, 1, "client-9")  # still remembered: no new warning
        send(reporter, OFFSET_COMMIT, 1, "client-0")  # forgotten long ago: named again
    assert len(lines(caplog, logging.WARNING)) == 11


def test_a_recent_client_is_kept_over_older_ones(caplog: pytest.LogCaptureFixture) -> None:
    reporter = Reporter(capacity=2)
    with caplog.at_level(logging.WARNING, LOGGER):
        send(reporter, OFFSET_COMMIT, 1, "busy")
        send(reporter, OFFSET_COMMIT, 1, "a")
        send(reporter, OFFSET_COMMIT, 1, "busy")  # seen again: the most recent now
        send(reporter, OFFSET_COMMIT, 1, "b")  # evicts "a", not "busy"
        send(reporter, OFFSET_COMMIT, 1, "busy")
    assert len(lines(caplog, logging.WARNING)) == 3


def test_client_ids_are_read_from_any_header_and_cut() -> None:
    assert client_id(frame(OFFSET_COMMIT, 1, "sarama")) == "sarama"
    null = b"\x00\x08\x00\x01\x00\x00\x00\x01\xff\xff"  # a null client id
    assert client_id(null) == ""
    assert client_id(b"\x00\x08\x00\x01") == ""  # too short to hold one
    assert client_id(frame(OFFSET_COMMIT, 1, "x" * 5000)) == "x" * 200
    assert client_id(frame(OFFSET_COMMIT, 1, "é\n")) == "é\n"  # logged with %r: one line


def test_api_names_are_kafkas() -> None:
    assert api_name(8) == "OffsetCommit"
    assert api_name(18) == "ApiVersions"
    assert api_name(22) == "InitProducerId"
    assert api_name(4) == "API key 4"
