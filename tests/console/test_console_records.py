"""The record browser's follow mode in a real headless Chromium against a real broker:
read_committed, a transaction's records appear once it commits, without any user action;
read_uncommitted, before; the table keeps at most 500 rows; following is the default from
the end and a choice from an offset. And its JSON endpoint, paging through a partition."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from tests.console.console_process import ConsoleProcess
from tests.console.kafka_setup import OP_TIMEOUT_S, produce_plain
from tests.console.pages import page_text, status, wait_until
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import create_topic, topic_name
from tests.helpers.txn import confluent_txn_producer

Shot = Callable[[Any, str], Path]
REFRESH_MS = 300  # ?refresh=: the page polls this often (2 s by default)
KEEP_ROWS = 500


def texts(driver: Any, css: str) -> list[str]:
    """The text of every element at `css`, read in one go: the page re-renders its offsets
    line at every poll, and a row-by-row read through WebDriver could find it replaced."""
    found = driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]), e => e.innerText.trim())",
        css,
    )
    return [str(t) for t in found]


def shown_offsets(driver: Any) -> list[int]:
    return [int(o) for o in texts(driver, "#records tbody tr td:first-child")]


def offsets_line(driver: Any) -> dict[str, str]:
    """The earliest offset, LSO and high watermark the page shows above the records."""
    line = texts(driver, "#offsets .earliest b, #offsets .lso b, #offsets .hwm b")
    return dict(zip(("earliest", "lso", "hwm"), line, strict=False))


def rows_are(expected: list[int]) -> Callable[[Any], bool]:
    return lambda d: shown_offsets(d) == expected


def follow_box(driver: Any) -> Any:
    return driver.find_element(By.CSS_SELECTOR, "form.records input[name=follow]")


def load(driver: Any, **fields: str) -> None:
    """Set the record form's selects and inputs as given, then press Load."""
    form = driver.find_element(By.CSS_SELECTOR, "form.records")
    for name, value in fields.items():
        field = form.find_element(By.NAME, name)
        if field.tag_name == "select":
            Select(field).select_by_value(value)
        else:
            field.clear()
            field.send_keys(value)
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()


def test_follow_shows_a_transaction_once_it_commits_and_before_read_uncommitted(
    txn_broker: BrokerProcess, console: ConsoleProcess, browser: Any, screenshot: Shot
) -> None:
    bootstrap = txn_broker.bootstrap
    topic = create_topic(bootstrap, topic_name("console-follow"))
    browser.get(console.url(f"?refresh={REFRESH_MS}#/records/{topic}/0"))
    # From a topic's link: read_committed, from the end, following.
    wait_until(browser, lambda d: "following from offset 0" in page_text(d), "following")
    form = browser.find_element(By.CSS_SELECTOR, "form.records")
    assert Select(form.find_element(By.NAME, "isolation")).first_selected_option.text == (
        "read_committed"
    )
    assert Select(form.find_element(By.NAME, "from")).first_selected_option.text.startswith(
        "the end"
    )
    assert follow_box(browser).is_selected()

    producer = confluent_txn_producer(bootstrap, f"console-follow-{uuid.uuid4().hex[:8]}")
    producer.init_transactions(OP_TIMEOUT_S)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, json.dumps({"n": i}).encode(), key=f"k{i}".encode(), partition=0)
    assert producer.flush(OP_TIMEOUT_S) == 0

    # The page has polled since the records were written (it shows the high watermark they
    # moved), and in that same answer they are not there: they are above the LSO.
    wait_until(
        browser,
        lambda d: offsets_line(d) == {"earliest": "0", "lso": "0", "hwm": "3"},
        "the high watermark at 3 and the LSO held at 0",
    )
    assert shown_offsets(browser) == []
    held = texts(browser, "#offsets .held")
    assert held and held[0].startswith("3 offsets above the LSO"), held
    assert "No records yet" in texts(browser, "#records")[0]
    screenshot(browser, "records-follow-open-transaction")

    producer.commit_transaction(OP_TIMEOUT_S)
    wait_until(browser, rows_are([0, 1, 2]), "the committed records, without any user action")
    assert texts(browser, "#records tbody tr td:nth-child(3)") == ["k0", "k1", "k2"]
    wait_until(browser, lambda d: offsets_line(d)["lso"] == "4", "the LSO past the marker")
    assert not texts(browser, "#offsets .held")
    assert "null" not in texts(browser, "#offsets")[0]

    produce_plain(bootstrap, topic, 0, [b"plain"])  # offset 4, after the commit marker at 3
    wait_until(browser, rows_are([0, 1, 2, 4]), "the plain record after the commit")
    assert texts(browser, 'tr[data-offset="4"] td:nth-child(4)') == ["plain"]
    assert status(browser) == "ok"
    screenshot(browser, "records-follow")

    # read_uncommitted, from the end and following: a transaction's records appear while
    # it is open, shaded as above the LSO, and unshaded once it commits.
    load(browser, isolation="read_uncommitted")
    wait_until(browser, rows_are([0, 1, 2, 4]), "the records read_uncommitted")
    assert follow_box(browser).is_selected()
    producer.begin_transaction()
    producer.produce(topic, b"open-1", partition=0)
    producer.produce(topic, b"open-2", partition=0)
    assert producer.flush(OP_TIMEOUT_S) == 0
    wait_until(browser, rows_are([0, 1, 2, 4, 5, 6]), "the open transaction's records")
    assert texts(browser, "#records tr.above-lso td:first-child") == ["5", "6"]
    assert offsets_line(browser) == {"earliest": "0", "lso": "5", "hwm": "7"}
    screenshot(browser, "records-follow-read-uncommitted")

    producer.commit_transaction(OP_TIMEOUT_S)
    wait_until(browser, lambda d: offsets_line(d)["lso"] == "8", "the LSO after the commit")
    wait_until(browser, lambda d: not texts(d, "#records tr.above-lso"), "no row above the LSO")
    assert shown_offsets(browser) == [0, 1, 2, 4, 5, 6]

    # read_committed again, it shows the second transaction too, now committed.
    load(browser, isolation="read_committed")
    wait_until(browser, rows_are([0, 1, 2, 4, 5, 6]), "both transactions read_committed")


def test_follow_keeps_500_rows_and_is_a_choice_from_an_offset(
    txn_broker: BrokerProcess, console: ConsoleProcess, browser: Any, screenshot: Shot
) -> None:
    bootstrap = txn_broker.bootstrap
    topic = create_topic(bootstrap, topic_name("console-tail"))
    browser.get(console.url(f"?refresh={REFRESH_MS}#/records/{topic}/0"))
    wait_until(browser, lambda d: "following from offset 0" in page_text(d), "following")

    # 600 records in one go: two answers (500 at most each), the oldest 100 rows dropped.
    produce_plain(bootstrap, topic, 0, [f"r{i}".encode() for i in range(600)])
    wait_until(browser, lambda d: (shown_offsets(d) or [0])[-1] == 599, "the last of 600 records")
    assert shown_offsets(browser) == list(range(100, 600))
    assert "500 rows, offsets 100\u2013599" in page_text(browser)

    # From an offset, following is off unless asked for.
    load(browser, offset="590")
    assert Select(browser.find_element(By.NAME, "from")).first_selected_option.text == "offset"
    wait_until(browser, rows_are(list(range(590, 600))), "the records from offset 590")
    assert not follow_box(browser).is_selected()
    assert browser.find_element(By.ID, "status").text.startswith("loaded")
    produce_plain(bootstrap, topic, 0, [b"r600"])
    time.sleep(5 * REFRESH_MS / 1000)
    assert shown_offsets(browser) == list(range(590, 600)), "appended while not following"
    assert "next offset 600" in page_text(browser)

    follow_box(browser).click()
    wait_until(browser, rows_are(list(range(590, 601))), "record 600 once following")
    produce_plain(bootstrap, topic, 0, [b"r601"])
    wait_until(browser, rows_are(list(range(590, 602))), "record 601, following")
    screenshot(browser, "records-follow-from-offset")


def _get(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def test_records_endpoint_pages_through_a_partition(
    txn_broker: BrokerProcess, console: ConsoleProcess
) -> None:
    topic = create_topic(txn_broker.bootstrap, topic_name("console-api"))
    produce_plain(txn_broker.bootstrap, topic, 0, [f"v{i}".encode() for i in range(10)])
    base = console.url(f"api/topics/{topic}/0/records?isolation=read_committed&")
    # A fresh AdminClient's first ListOffsets now and then times out in librdkafka
    # ("Failed to query partition leaders"); the page polls on, and so does this test.
    deadline = time.monotonic() + OP_TIMEOUT_S
    while _get(base)[0] != 200 and time.monotonic() < deadline:
        time.sleep(0.2)

    def offsets(query: str) -> tuple[list[int], int, bool]:
        code, body = _get(base + query)
        assert code == 200, body
        assert (body["earliest"], body["lso"], body["high_watermark"]) == (0, 10, 10), body
        return [r["offset"] for r in body["records"]], body["next"], body["more"]

    assert offsets("from=end&limit=3") == ([7, 8, 9], 10, False)
    assert offsets("limit=4") == ([0, 1, 2, 3], 4, True)  # from the earliest offset
    assert offsets("offset=4&limit=500") == (list(range(4, 10)), 10, False)
    assert offsets("offset=10&limit=500") == ([], 10, False)  # the follow mode's usual poll
    assert _get(base + "from=middle")[0] == 400
    assert _get(base + "offset=-1")[0] == 400
