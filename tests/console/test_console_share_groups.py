"""The console's groups page shows share groups (KIP-932): their state, members, start
offsets and lag, in a real browser against a real broker."""

from __future__ import annotations

import uuid
from typing import Any

from confluent_kafka import AcknowledgeType

from tests.console.console_process import ConsoleProcess
from tests.console.kafka_setup import produce_plain
from tests.console.pages import text_is, texts, wait_until
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import create_topic, topic_name
from tests.helpers.share import poll_values, set_group_configs, share_consumer

Shot = Any


def test_groups_page_shows_a_share_group(
    txn_broker: BrokerProcess, console: ConsoleProcess, browser: Any, screenshot: Shot
) -> None:
    bootstrap = txn_broker.bootstrap
    topic = create_topic(bootstrap, topic_name("console-share"), partitions=1)
    produce_plain(bootstrap, topic, 0, [f"job-{i}".encode() for i in range(10)])
    group = f"console-share-{uuid.uuid4().hex[:8]}"
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest"})
    c = share_consumer(
        bootstrap, group, topic, **{"share.acknowledgement.mode": "explicit", "client.id": "worker"}
    )
    try:
        taken: list[Any] = []
        poll_values([c], lambda: len(taken) >= 10, on_message=lambda _, m: taken.append(m))
        for m in taken[:4]:
            c.acknowledge(m, AcknowledgeType.ACCEPT)
        for m in taken[4:]:
            c.acknowledge(m, AcknowledgeType.RELEASE)
        c.commit_sync()
        browser.get(console.url("#/groups"))
        section = f'div.share-group[data-group="{group}"]'
        wait_until(
            browser,
            text_is(f'{section} tr[data-topic="{topic}"][data-partition="0"] td.lag', "6"),
            "a share-partition lag of 6",
        )
        heading = texts(browser, f"{section} h3")[0]
        assert "share" in heading and "Stable" in heading and heading.endswith("total lag 6")
        members = texts(browser, f"{section} table:first-of-type tbody tr")
        assert len(members) == 1 and "worker" in members[0] and f"{topic}-0" in members[0]
        screenshot(browser, "share-groups")
    finally:
        c.close()
