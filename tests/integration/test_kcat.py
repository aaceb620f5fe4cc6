"""kcat (Debian's package, librdkafka 2.0 inside) against a broker: metadata (-L), produce (-P,
keys, headers, partitions, compression, a transactional producer), read_committed consume (-C)
and balanced consumer groups (-G), each checked through another client.

`make test` installs kcat; a missing kcat fails these tests (set ONCEFLOW_KCAT to another
binary), since a skipped client test would prove nothing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import (
    admin_client,
    consume_until,
    consumer,
    create_topic,
    produce_and_confirm,
    producer,
    topic_name,
)

TIMEOUT_S = 30.0
KCAT = os.environ.get("ONCEFLOW_KCAT") or shutil.which("kcat") or "/usr/bin/kcat"


@pytest.fixture(scope="module")
def kcat() -> str:
    if not os.access(KCAT, os.X_OK):
        pytest.fail(
            f"the kcat tests need kcat ({KCAT}): install Debian's 'kcat' package (`make test` "
            "does so as root; otherwise sudo apt-get install kcat), or set ONCEFLOW_KCAT",
            pytrace=False,
        )
    return KCAT


def run_kcat(kcat: str, broker: BrokerProcess, *args: str, stdin: str = "") -> str:
    """kcat's stdout; a non-zero exit or a hang fails the test with what kcat said."""
    cmd = [kcat, "-b", broker.bootstrap, *args]
    try:
        done = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{cmd} still running after {TIMEOUT_S} s: {exc.stderr!r}") from exc
    assert done.returncode == 0, f"{cmd} exited {done.returncode}: {done.stderr}"
    return done.stdout


def consume_all(kcat: str, broker: BrokerProcess, topic: str, isolation: str) -> list[str]:
    """Every value kcat -C reads from the beginning to the end (for read_committed: the LSO)."""
    out = run_kcat(
        kcat, broker, "-C", "-t", topic, "-o", "beginning", "-e", "-q",
        "-X", f"isolation.level={isolation}", "-f", "%s\n",
    )  # fmt: skip
    return out.splitlines()


def test_metadata_lists_the_broker_and_each_partition(
    kcat: str, shared_broker: BrokerProcess
) -> None:
    topic = create_topic(shared_broker.bootstrap, partitions=3)
    md = json.loads(run_kcat(kcat, shared_broker, "-L", "-J", "-t", topic))
    assert md["brokers"] == [{"id": 0, "name": shared_broker.bootstrap}]
    [entry] = md["topics"]
    assert entry["topic"] == topic and "error" not in entry
    assert [
        (
            p["partition"],
            p["leader"],
            [r["id"] for r in p["replicas"]],
            [r["id"] for r in p["isrs"]],
        )
        for p in entry["partitions"]
    ] == [(i, 0, [0], [0]) for i in range(3)]


# Round trips only: librdkafka before its fix of issue 4956 (Debian's 2.0.2 among them) sends
# gzip, snappy and lz4 batches uncompressed to a broker whose Produce starts above v0 (zstd it
# compresses); Kafka 4.x advertises Produce v0 for that reason (KAFKA-18659).
@pytest.mark.parametrize("codec", ["none", "gzip", "zstd"])
def test_produce_keys_headers_and_partitions(
    kcat: str, shared_broker: BrokerProcess, codec: str
) -> None:
    topic = create_topic(shared_broker.bootstrap, partitions=2)
    lines = "".join(f"k{i}:value-{i}-{'x' * 300}\n" for i in range(20))
    run_kcat(
        kcat, shared_broker, "-P", "-t", topic, "-p", "1", "-K", ":", "-z", codec,
        "-H", "origin=kcat", stdin=lines,
    )  # fmt: skip
    c = consumer(shared_broker.bootstrap)
    try:
        c.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
        got = consume_until(c, lambda ms: len(ms) >= 20, what="kcat's records")
    finally:
        c.close()
    assert [(m.partition(), m.offset(), m.key(), m.value(), m.headers()) for m in got] == [
        (1, i, f"k{i}".encode(), f"value-{i}-{'x' * 300}".encode(), [("origin", b"kcat")])
        for i in range(20)
    ]


def test_read_committed_hides_aborted_and_open_transactions(
    kcat: str, shared_broker: BrokerProcess
) -> None:
    topic = create_topic(shared_broker.bootstrap)
    kcat_txn = ["-P", "-t", topic, "-X", f"transactional.id={topic}-kcat"]
    run_kcat(kcat, shared_broker, *kcat_txn, stdin="c1\nc2\n")  # kcat commits at end of input
    p = producer(
        shared_broker.bootstrap, **{"transactional.id": f"{topic}-py", "enable.idempotence": True}
    )
    p.init_transactions(TIMEOUT_S)
    p.begin_transaction()
    produce_and_confirm(p, topic, [(0, None, b"aborted-%d" % i, None) for i in range(3)])
    p.abort_transaction(TIMEOUT_S)
    run_kcat(kcat, shared_broker, *kcat_txn, stdin="c3\n")
    assert consume_all(kcat, shared_broker, topic, "read_committed") == ["c1", "c2", "c3"]
    assert consume_all(kcat, shared_broker, topic, "read_uncommitted") == [
        "c1", "c2", "aborted-0", "aborted-1", "aborted-2", "c3",
    ]  # fmt: skip

    # An open transaction holds the LSO: neither it nor a later committed record shows yet.
    p.begin_transaction()
    produce_and_confirm(p, topic, [(0, None, b"pending", None)])
    run_kcat(kcat, shared_broker, "-P", "-t", topic, stdin="after\n")
    assert consume_all(kcat, shared_broker, topic, "read_committed") == ["c1", "c2", "c3"]
    p.commit_transaction(TIMEOUT_S)
    assert consume_all(kcat, shared_broker, topic, "read_committed") == [
        "c1", "c2", "c3", "pending", "after",
    ]  # fmt: skip


class GroupMember:
    """One `kcat -G` process; its stdout has one `partition offset value` line per record."""

    def __init__(self, kcat: str, broker: BrokerProcess, group: str, topic: str, out: Path) -> None:
        self.out, self.err = out.with_suffix(".out"), out.with_suffix(".err")
        with self.out.open("w") as stdout, self.err.open("w") as stderr:
            self.proc = subprocess.Popen(
                [kcat, "-b", broker.bootstrap, "-G", group, topic, "-u", "-f", "%p %o %s\n",
                 "-X", "auto.offset.reset=earliest"],
                stdout=stdout, stderr=stderr,
            )  # fmt: skip

    def assigned(self) -> set[int] | None:
        """The partitions of its last rebalance, None before the first."""
        lines = re.findall(r"rebalanced .*: assigned: (.*)", self.err.read_text())
        if not lines:
            return None
        return {int(p) for p in re.findall(r"\[(\d+)\]", lines[-1])}

    def records(self) -> list[tuple[int, int, str]]:
        text = self.out.read_text()
        # Whole lines only: kcat may be writing the last one as it is read.
        rows = [line.split(" ", 2) for line in text[: text.rfind("\n") + 1].splitlines()]
        return [(int(p), int(o), v) for p, o, v in rows]

    def stop(self) -> None:
        """SIGTERM: kcat closes its consumer, which commits the offsets it consumed."""
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(TIMEOUT_S) == 0, self.err.read_text()


def wait_for(what: str, check: Any, members: list[GroupMember]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not check():
        if time.monotonic() > deadline:
            logs = "\n".join(m.err.read_text() for m in members)
            raise AssertionError(f"no {what} after {TIMEOUT_S} s; kcat said:\n{logs}")
        time.sleep(0.1)


@pytest.fixture
def members(tmp_path: Path) -> Iterator[list[GroupMember]]:
    started: list[GroupMember] = []
    yield started
    for m in started:
        if m.proc.poll() is None:
            m.proc.kill()
            m.proc.wait()


def test_balanced_consumers_share_the_partitions_and_commit_their_offsets(
    kcat: str, shared_broker: BrokerProcess, members: list[GroupMember], tmp_path: Path
) -> None:
    topic, group = create_topic(shared_broker.bootstrap, partitions=4), topic_name("kcat-g")
    members += [GroupMember(kcat, shared_broker, group, topic, tmp_path / f"m{i}") for i in (0, 1)]

    def shared() -> bool:
        first, second = (m.assigned() or set() for m in members)
        return bool(first) and bool(second) and first | second == {0, 1, 2, 3}

    wait_for("assignment sharing the four partitions", shared, members)
    assert not members[0].assigned() & members[1].assigned()  # type: ignore[operator]
    admin = admin_client(shared_broker.bootstrap)
    description = admin.describe_consumer_groups([group])[group].result(TIMEOUT_S)
    assert sorted(
        sorted(tp.partition for tp in member.assignment.topic_partitions)
        for member in description.members
    ) == sorted(sorted(m.assigned() or ()) for m in members)

    p = producer(shared_broker.bootstrap)
    produce_and_confirm(p, topic, [(i % 4, None, b"r%d" % i, None) for i in range(40)])
    wait_for("40 records", lambda: sum(len(m.records()) for m in members) >= 40, members)
    for m in members:
        assert {partition for partition, _, _ in m.records()} <= (m.assigned() or set())
    assert sorted(r for m in members for r in m.records()) == sorted(
        (i % 4, i // 4, f"r{i}") for i in range(40)
    )

    for m in members:
        m.stop()
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, part) for part in range(4)]
    )
    offsets = admin.list_consumer_group_offsets([request])[group].result(TIMEOUT_S)
    assert {tp.partition: tp.offset for tp in offsets.topic_partitions} == {p: 10 for p in range(4)}

    # A new member of the group starts from the committed offsets: only the newer records.
    produce_and_confirm(p, topic, [(3, None, b"newer", None)])
    out = run_kcat(kcat, shared_broker, "-G", group, topic, "-e", "-q", "-f", "%p %o %s\n")
    assert out.splitlines() == ["3 10 newer"]
