"""Shared fixtures: a real broker process per test (`broker`) or per module (`shared_broker`).

A test that needs broker settings of its own marks itself
`@pytest.mark.broker_overrides({"num.partitions": "3"})`, or uses `broker_factory`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.helpers.broker import BrokerProcess

# librdkafka's log callbacks (via tests.helpers.clients.QUIET_LOGGER) stay silent; this keeps
# the other clients' connection chatter out of test output too.
for _name in ("kafka", "aiokafka"):
    logging.getLogger(_name).setLevel(logging.CRITICAL)


# The config of the process that prints the run (None in an xdist worker).
_run_config: pytest.Config | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _run_config
    if not hasattr(config, "workerinput"):
        _run_config = config
    config.addinivalue_line(
        "markers", "broker_overrides(dict): Kafka config keys for the `broker` fixture"
    )
    # kafka-python 3.x loads its schemas with a deprecated importlib.resources call.
    config.addinivalue_line(
        "filterwarnings", "ignore:(open_text|read_text) is deprecated:DeprecationWarning"
    )


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Name each failure as it happens, not only in the summary: a run cut short (a CI time
    limit, a hung worker) still says which tests failed before it stopped."""
    reporter = _run_config and _run_config.pluginmanager.get_plugin("terminalreporter")
    if report.failed and reporter is not None:
        when = report.when if report.when in ("setup", "call", "teardown") else "crashed"
        reporter.write_line(f"\nFAILED {report.nodeid} ({when})")


def _finish(b: BrokerProcess, since: int = 0) -> None:
    """Stop a broker at teardown. A broker that fails to shut down cleanly, or logged an
    internal error (an ERROR line or a traceback) while it ran, fails the test."""
    try:
        if b.running:
            code = b.stop()
            assert code == 0, f"broker exited with {code} on SIGTERM; its log:\n{b.log_tail()}"
    finally:
        b.kill()
    _assert_no_internal_errors(b, since)


def _assert_no_internal_errors(b: BrokerProcess, since: int) -> None:
    errors = b.internal_errors(since)
    assert not errors, "the broker logged internal errors:\n" + "\n---\n".join(errors[:5])


@pytest.fixture
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BrokerProcess]:
    marker = request.node.get_closest_marker("broker_overrides")
    overrides = dict(marker.args[0]) if marker else {}
    b = BrokerProcess(tmp_path / "data", overrides)
    b.start()
    try:
        yield b
    finally:
        _finish(b)


@pytest.fixture(scope="module")
def _shared_broker_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("shared") / "data")
    b.start()
    try:
        yield b
    finally:
        _finish(b, since=_shared_checked_upto.get(id(b), 0))


# How far each shared broker's log was already checked by the tests that used it.
_shared_checked_upto: dict[int, int] = {}


@pytest.fixture
def shared_broker(_shared_broker_process: BrokerProcess) -> Iterator[BrokerProcess]:
    """One broker per module; each test using it fails if the broker logged an internal
    error during that test."""
    b = _shared_broker_process
    if not b.running:  # a test stopped or killed it: bring it back for the next one
        b.start()
    mark = b.log_size()
    yield b
    _assert_no_internal_errors(b, mark)
    _shared_checked_upto[id(b)] = b.log_size()


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    """Start brokers with given overrides; all are stopped at teardown."""
    made: list[BrokerProcess] = []

    def make(overrides: dict[str, str] | None = None, name: str = "data") -> BrokerProcess:
        b = BrokerProcess(tmp_path / f"{name}{len(made)}", overrides)
        made.append(b)
        return b.start()

    yield make
    errors = []
    for b in made:
        try:
            _finish(b)
        except AssertionError as exc:
            errors.append(str(exc))
    assert not errors, "\n".join(errors)
