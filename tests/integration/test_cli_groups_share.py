"""`onceflow groups` (kafka-consumer-groups.sh) shows share groups beside consumer groups:
listed with their type (Share) and state, described (members and assignment, start offset
and lag, state), reset (to a time by --by-duration: the offset ListOffsets finds for it)
and deleted, as `onceflow share-groups` (kafka-share-groups.sh) does."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

from confluent_kafka import Consumer, Producer

from tests.helpers.broker import BrokerProcess
from tests.helpers.share import create_topic, poll_values, set_group_configs, share_consumer

HOUR_MS = 3_600_000
ONCEFLOW = (sys.executable, "-m", "onceflow.cli.main")


def _groups(broker: BrokerProcess, *args: str) -> str:
    proc = subprocess.run(
        [*ONCEFLOW, "groups", "--bootstrap-server", broker.bootstrap, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.strip()]


def test_groups_lists_describes_resets_and_deletes_share_groups(broker: BrokerProcess) -> None:
    topic, group = f"t-{uuid.uuid4().hex[:6]}", f"share-{uuid.uuid4().hex[:6]}"
    classic = f"classic-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic)
    now = int(time.time() * 1000)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):  # five three hours old, five just now
        p.produce(topic, str(i).encode(), partition=0, timestamp=now - 3 * HOUR_MS * (i < 5))
    assert p.flush(30) == 0
    set_group_configs(broker.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": classic})
    c.subscribe([topic])
    c.poll(5.0)
    c.close()
    sc = share_consumer(broker.bootstrap, group, topic)
    got: list[bytes] = []
    poll_values([sc], lambda: len(got) == 10, on_message=lambda _, m: got.append(m.value()))
    sc.commit_sync()

    assert {group, classic} <= set(_groups(broker, "--list").split())
    listed = {row[0]: row[1:] for row in _rows(_groups(broker, "--list", "--type", "--state"))}
    assert listed[group] == ["Share", "Stable"]
    assert listed[classic][0] == "Classic"
    only_share = {row[0] for row in _rows(_groups(broker, "--list", "--type", "share"))[1:]}
    assert group in only_share and classic not in only_share
    members = _rows(_groups(broker, "--describe", "--group", group, "--members"))
    assert members[0][:2] == ["GROUP", "CONSUMER-ID"]
    assert members[1][0] == group and members[1][-1] == f"{topic}:0"
    sc.close()
    offsets = _rows(_groups(broker, "--describe", "--group", group))
    assert offsets[0] == ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"]
    assert offsets[1] == [group, topic, "0", "10", "0"]
    assert "Empty" in _groups(broker, "--describe", "--group", group, "--state")

    plan = _groups(
        broker, "--reset-offsets", "--group", group, "--topic", topic, "--by-duration", "PT1H"
    )
    assert _rows(plan)[1] == [group, topic, "0", "5"]  # shown only: no --execute
    assert _rows(_groups(broker, "--describe", "--group", group))[1][3] == "10"
    _groups(
        broker,
        "--reset-offsets",
        "--group",
        group,
        "--topic",
        f"{topic}:0",
        "--by-duration",
        "PT1H",
        "--execute",
    )
    assert _rows(_groups(broker, "--describe", "--group", group))[1] == [
        group,
        topic,
        "0",
        "5",
        "5",
    ]
    again = share_consumer(broker.bootstrap, group, topic)
    redelivered: list[bytes] = []
    poll_values(
        [again],
        lambda: len(redelivered) == 5,
        on_message=lambda _, m: redelivered.append(m.value()),
    )
    again.close()
    assert sorted(redelivered) == [str(i).encode() for i in range(5, 10)]

    assert "successful" in _groups(broker, "--delete", "--group", group)
    assert group not in _groups(broker, "--list").split()
    assert classic in _groups(broker, "--list").split()
