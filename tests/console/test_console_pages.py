"""The console in a real headless Chromium against a real broker: the transactions page
(with the topic, producers and records pages of the same open transaction), the hanging
page and its abort button, and the consumer groups page's lag."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import Select

from onceflow.cli.main import main
from tests.console.console_process import ConsoleProcess
from tests.console.kafka_setup import MINUTE_MS, OP_TIMEOUT_S, produce_plain
from tests.console.pages import text_is, texts, wait_until
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import QUIET_LOGGER, consumer, create_topic, topic_name
from tests.helpers.txn import HANGING_PRODUCER_ID, end_offset, produce_hanging_transaction

Shot = Callable[[Any, str], Path]


def test_transactions_page_lists_an_open_transaction(
    txn_broker: BrokerProcess, console: ConsoleProcess, browser: Any, screenshot: Shot
) -> None:
    bootstrap = txn_broker.bootstrap
    topic = create_topic(bootstrap, topic_name("console-txn"), partitions=2)
    txn_id = f"console-app-{uuid.uuid4().hex[:8]}"
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "transaction.timeout.ms": 120_000,
            "logger": QUIET_LOGGER,
            "log_level": 0,
        }
    )
    producer.init_transactions(OP_TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(topic, b'{"account": "acct-1", "amount": 10}', key=b"acct-1", partition=0)
    producer.produce(topic, b'{"account": "acct-2", "amount": 20}', key=b"acct-2", partition=1)
    assert producer.flush(OP_TIMEOUT_S) == 0
    try:
        browser.get(console.url("#/transactions"))
        row = f'tr[data-txn-id="{txn_id}"]'
        wait_until(browser, text_is(f"{row} td.state", "Ongoing"), f"{txn_id} as Ongoing")
        wait_until(
            browser,
            text_is(f"{row} td.partitions", f"{topic}-0, {topic}-1"),
            f"the partitions of {txn_id}",
        )
        producer_id = texts(browser, f"{row} td:nth-child(3)")[0]
        assert int(producer_id) >= 0
        screenshot(browser, "transactions")

        # The open transaction holds each partition's LSO back by its one record.
        browser.get(console.url(f"#/topic/{topic}"))
        for partition in (0, 1):
            wait_until(
                browser,
                text_is(f'tr[data-partition="{partition}"] td.lso-lag', "1"),
                f"an LSO lag of 1 on partition {partition}",
            )
        screenshot(browser, "topic")

        browser.get(console.url(f"#/producers/{topic}/0"))
        wait_until(
            browser,
            text_is(f'tr[data-producer-id="{producer_id}"] td:last-child', "0"),
            f"producer {producer_id} with a transaction open from offset 0",
        )
        screenshot(browser, "producers")

        # read_committed sees nothing yet; read_uncommitted sees the record, as JSON.
        browser.get(console.url(f"#/records/{topic}/0"))
        wait_until(browser, lambda d: "No records yet" in texts(d, "#records")[0], "no records")
        form = browser.find_element(By.CSS_SELECTOR, "form.records")
        Select(form.find_element(By.NAME, "isolation")).select_by_value("read_uncommitted")
        Select(form.find_element(By.NAME, "format")).select_by_value("json")
        form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        value = wait_until(
            browser, lambda d: texts(d, 'tr[data-offset="0"] td:nth-child(4)'), "record 0"
        )
        assert value[0] == '{\n  "account": "acct-1",\n  "amount": 10\n}'
        screenshot(browser, "records")
    finally:
        producer.commit_transaction(OP_TIMEOUT_S)

    browser.get(console.url("#/transactions"))
    wait_until(
        browser,
        lambda d: texts(d, f"{row} td.state") in (["PrepareCommit"], ["CompleteCommit"]),
        f"{txn_id} committed",
    )


def test_hanging_page_finds_and_aborts_a_hanging_transaction(
    txn_broker: BrokerProcess,
    console: ConsoleProcess,
    browser: Any,
    screenshot: Shot,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bootstrap = txn_broker.bootstrap
    topic = create_topic(bootstrap, topic_name("console-hang"))
    produce_hanging_transaction(bootstrap, topic, age_ms=20 * MINUTE_MS)
    produce_plain(bootstrap, topic, 0, [b"later-1", b"later-2", b"later-3"])
    assert end_offset(bootstrap, topic, 0, committed=True) == 0  # stuck at the hanging one
    assert end_offset(bootstrap, topic, 0, committed=False) == 5

    browser.get(console.url("#/hanging"))
    row = f'tr[data-topic="{topic}"]'
    cells = wait_until(browser, lambda d: texts(d, f"{row} td")[:6], f"{topic} as hanging")
    assert cells == [topic, "0", str(HANGING_PRODUCER_ID), "0", "-1", "0"]
    screenshot(browser, "hanging")

    # Dismissed: nothing happens.
    browser.find_element(By.CSS_SELECTOR, f"{row} button.abort").click()
    alert = wait_until(browser, expected_conditions.alert_is_present(), "a confirmation")
    assert f"producer {HANGING_PRODUCER_ID}" in alert.text
    alert.dismiss()
    assert end_offset(bootstrap, topic, 0, committed=True) == 0

    # Accepted: the ABORT marker is written and the LSO reaches the end.
    browser.find_element(By.CSS_SELECTOR, f"{row} button.abort").click()
    alert = wait_until(browser, expected_conditions.alert_is_present(), "a confirmation")
    alert.accept()
    wait_until(
        browser,
        lambda d: "Aborted the transaction of producer" in (texts(d, "#notice") or [""])[0],
        "the abort's result",
    )
    wait_until(browser, lambda d: not texts(d, row), f"{topic} gone from the hanging page")
    screenshot(browser, "hanging-aborted")

    assert end_offset(bootstrap, topic, 0, committed=True) == 6
    assert end_offset(bootstrap, topic, 0, committed=False) == 6
    # `onceflow transactions find-hanging` over the whole cluster agrees: nothing hangs.
    capsys.readouterr()
    assert main(["transactions", "find-hanging", "--bootstrap-server", bootstrap]) == 0
    assert capsys.readouterr().out.strip() == "No hanging transactions found."


def test_groups_page_shows_lag_per_partition(
    txn_broker: BrokerProcess, console: ConsoleProcess, browser: Any, screenshot: Shot
) -> None:
    bootstrap = txn_broker.bootstrap
    topic = create_topic(bootstrap, topic_name("console-lag"), partitions=2)
    produce_plain(bootstrap, topic, 0, [f"p0-{i}".encode() for i in range(10)])
    produce_plain(bootstrap, topic, 1, [f"p1-{i}".encode() for i in range(6)])
    group = f"console-group-{uuid.uuid4().hex[:8]}"
    member = consumer(bootstrap, group, **{"client.id": "lag-checker"})
    try:
        member.subscribe([topic])
        deadline = time.monotonic() + OP_TIMEOUT_S
        while not member.assignment() and time.monotonic() < deadline:
            member.poll(0.2)
        assert len(member.assignment()) == 2, "the consumer never got its partitions"
        member.commit(
            offsets=[TopicPartition(topic, 0, 4), TopicPartition(topic, 1, 1)], asynchronous=False
        )

        browser.get(console.url("#/groups"))
        section = f'div[data-group="{group}"]'
        for partition, lag in ((0, "6"), (1, "5")):
            wait_until(
                browser,
                text_is(
                    f'{section} tr[data-topic="{topic}"][data-partition="{partition}"] td.lag', lag
                ),
                f"a lag of {lag} on {topic}-{partition}",
            )
        heading = texts(browser, f"{section} h3")[0]
        assert heading.endswith("total lag 11"), heading
        assert "Stable" in heading, heading
        members = texts(browser, f"{section} table:first-of-type tbody tr")
        assert len(members) == 1 and "lag-checker" in members[0], members
        assert f"{topic}-0, {topic}-1" in members[0], members
        screenshot(browser, "groups")
    finally:
        member.close()


def test_transactions_page_marks_a_two_phase_commit_transaction(
    txn_broker: BrokerProcess, console: ConsoleProcess, browser: Any, screenshot: Shot
) -> None:
    """A prepared two-phase commit transaction (KIP-939) has no timeout: the page says so
    and shows its age, so an operator can find a forgotten one holding the LSO."""
    from tests.helpers.txn_wire import Producer as WireProducer
    from tests.helpers.txn_wire import (
        add_partitions,
        end_txn,
        find_coordinator,
        init_2pc,
        produce,
        txn_batch,
    )
    from tests.helpers.wire import RawConnection

    topic = create_topic(txn_broker.bootstrap, topic_name("console-2pc"), partitions=1)
    txn_id = f"console-2pc-{uuid.uuid4().hex[:8]}"
    with RawConnection(txn_broker.bootstrap) as conn:
        find_coordinator(conn, txn_id)
        answer = init_2pc(conn, txn_id)
        assert answer.error_code == 0
        p = WireProducer(txn_id, int(answer.producer_id), int(answer.producer_epoch))
        assert add_partitions(conn, p, topic, (0,)) == {0}
        assert produce(conn, p, topic, txn_batch(p, 0, b"prepared"), 11).error_code == 0
        try:
            browser.get(console.url("#/transactions"))
            row = f'tr[data-txn-id="{txn_id}"]'
            wait_until(
                browser,
                text_is(f"{row} td.state", "Ongoing (two-phase commit)"),
                f"{txn_id} marked as two-phase commit",
            )
            assert texts(browser, f"{row} td:last-child") == ["none (2PC)"]
            assert "two-phase" in (
                browser.find_element(By.CSS_SELECTOR, row).get_attribute("class") or ""
            )
            screenshot(browser, "transactions-2pc")
        finally:
            assert end_txn(conn, p, False).error_code == 0
