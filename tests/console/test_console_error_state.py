"""The console against a broker that goes away shows its error state, and recovers when
the broker comes back on the same address (the record browser's follow mode included)."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from tests.console.conftest import start_console
from tests.console.console_process import ConsoleProcess
from tests.console.kafka_setup import produce_plain
from tests.console.pages import status, texts, wait_until
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import create_topic, topic_name


@pytest.fixture
def lone_console(broker: BrokerProcess, tmp_path: Path) -> Iterator[ConsoleProcess]:
    yield from start_console(broker.bootstrap, tmp_path)


def test_error_state_while_the_broker_is_away(
    broker: BrokerProcess,
    lone_console: ConsoleProcess,
    browser: Any,
    screenshot: Callable[[Any, str], Path],
) -> None:
    topic = create_topic(broker.bootstrap, topic_name("console-away"))
    row = f'tr[data-topic="{topic}"]'
    for page in ("#/topics", "#/transactions"):
        browser.get(lone_console.url(page))
        wait_until(browser, lambda d: status(d) == "ok", f"{page} live")
        assert not browser.find_element(By.ID, "error").is_displayed()
    browser.get(lone_console.url("#/topics"))
    wait_until(browser, lambda d: texts(d, row), f"{topic} listed")

    assert broker.stop() == 0
    wait_until(browser, lambda d: status(d) == "error", "the error state")
    banner = browser.find_element(By.ID, "error")
    assert banner.is_displayed()
    assert banner.text.startswith("Cannot reach the cluster:"), banner.text
    assert "Traceback" not in browser.find_element(By.TAG_NAME, "body").text
    screenshot(browser, "error-state")
    browser.get(lone_console.url("#/transactions"))  # the wire-client pages too
    wait_until(browser, lambda d: status(d) == "error", "the error state on #/transactions")

    broker.start()
    wait_until(browser, lambda d: status(d) == "ok", "recovery on #/transactions")
    browser.get(lone_console.url("#/topics"))
    wait_until(browser, lambda d: texts(d, row) and status(d) == "ok", "recovery on #/topics")
    assert not browser.find_element(By.ID, "error").is_displayed()
    screenshot(browser, "recovered")


def test_following_records_survive_the_broker_going_away(
    broker: BrokerProcess,
    lone_console: ConsoleProcess,
    browser: Any,
    screenshot: Callable[[Any, str], Path],
) -> None:
    """The record browser's follow mode keeps its rows, greyed under the banner, while the
    broker is away, and goes on from the last record it showed when it is back."""
    topic = create_topic(broker.bootstrap, topic_name("console-away-records"))
    produce_plain(broker.bootstrap, topic, 0, [b"before"])
    browser.get(lone_console.url(f"?refresh=500#/records/{topic}/0"))
    rows = "#records tbody tr td:first-child"
    wait_until(browser, lambda d: texts(d, rows) == ["0"] and status(d) == "ok", "record 0")

    assert broker.stop() == 0
    wait_until(browser, lambda d: status(d) == "error", "the error state")
    assert browser.find_element(By.ID, "error").is_displayed()
    assert "stale" in str(browser.find_element(By.ID, "content").get_attribute("class"))
    assert texts(browser, rows) == ["0"]
    screenshot(browser, "records-error-state")

    broker.start()
    produce_plain(broker.bootstrap, topic, 0, [b"after"])
    wait_until(
        browser,
        lambda d: texts(d, rows) == ["0", "1"] and status(d) == "ok",
        "record 1 after the recovery",
    )
    assert not browser.find_element(By.ID, "error").is_displayed()
    assert "stale" not in str(browser.find_element(By.ID, "content").get_attribute("class"))


def _get(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def test_a_frozen_broker_blocks_no_other_request(
    broker: BrokerProcess, lone_console: ConsoleProcess
) -> None:
    """Kafka calls run in threads with a timeout: while one waits on a frozen (SIGSTOPped)
    broker, the server still answers, and the stuck call ends as a JSON error."""
    answers: dict[str, tuple[int, dict[str, Any]]] = {}
    broker.pause()
    try:
        stuck = {
            page: threading.Thread(
                target=lambda p=page: answers.__setitem__(p, _get(lone_console.url(f"api/{p}")))
            )
            for page in ("transactions", "overview")
        }
        for thread in stuck.values():
            thread.start()
        assert _get(lone_console.url("api/health"))[0] == 200
        assert all(thread.is_alive() for thread in stuck.values()), answers
        for thread in stuck.values():
            thread.join(60)
    finally:
        broker.resume()
    for page in ("transactions", "overview"):
        status_code, body = answers[page]
        assert status_code == 503 and body["error"], (page, body)
    assert _get(lone_console.url("api/transactions"))[0] == 200
