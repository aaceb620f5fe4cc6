"""Share-group test helpers: confluent-kafka ShareConsumers, group configs, and a share
consumer in a child process that a test can SIGKILL while it holds records."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from tests.helpers.broker import die_with_parent

REPO_ROOT = Path(__file__).resolve().parents[2]
#: Broker settings that make locks short enough for a test to wait one out.
SHORT_LOCKS = {
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.record.lock.duration.ms": "2000",
    "group.share.min.session.timeout.ms": "6000",
    "group.share.session.timeout.ms": "6000",
    "group.share.min.heartbeat.interval.ms": "500",
    "group.share.heartbeat.interval.ms": "500",
}


_NOT_READY = (
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
)


def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def set_group_configs(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    """IncrementalAlterConfigs on the GROUP resource, as kafka-configs.sh --entity-type groups."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in configs.items()
        ],
    )
    deadline = time.monotonic() + 30
    while True:  # on a cluster, __share_group_state is created by the first use
        try:
            for future in admin.incremental_alter_configs([resource]).values():
                future.result(30)
            return
        except KafkaException as exc:
            if exc.args[0].code() not in _NOT_READY or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def produce(bootstrap: str, topic: str, values: Iterable[bytes], partition: int = 0) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for v in values:
        p.produce(topic, v, partition=partition)
    assert p.flush(30) == 0


def share_consumer(bootstrap: str, group: str, topic: str, **conf: Any) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, **conf})
    c.subscribe([topic])
    return c


def poll_values(
    consumers: list[ShareConsumer],
    want: Callable[[], bool],
    timeout: float = 40.0,
    on_message: Callable[[int, Any], None] | None = None,
) -> None:
    """Poll the consumers in turn until `want()` (each message to `on_message(i, msg)`)."""
    deadline = time.monotonic() + timeout
    while not want():
        assert time.monotonic() < deadline, "timed out polling share consumers"
        for i, c in enumerate(consumers):
            for m in c.poll(0.2):
                if m.error() is None and on_message is not None:
                    on_message(i, m)


CHILD = """
import sys, time
from confluent_kafka import ShareConsumer
bootstrap, group, topic = sys.argv[1:4]
c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                   "share.acknowledgement.mode": "explicit"})
c.subscribe([topic])
while True:
    got = [m for m in c.poll(0.5) if m.error() is None]
    if got:
        for m in got:
            print("RECORD", m.partition(), m.offset(), flush=True)
        print("HOLDING", flush=True)
        time.sleep(3600)  # hold the records, acknowledge nothing
"""


class ChildShareConsumer:
    """A share consumer in its own process: it acquires one batch and holds it."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, bootstrap, group, topic],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=REPO_ROOT,
            preexec_fn=die_with_parent,
        )

    def held(self, timeout: float = 40.0) -> list[int]:
        """The offsets it acquired, once it holds them."""
        assert self.proc.stdout is not None
        offsets = []
        deadline = time.monotonic() + timeout
        for line in self.proc.stdout:
            if line.startswith("RECORD"):
                offsets.append(int(line.split()[2]))
            elif line.startswith("HOLDING"):
                return offsets
            assert time.monotonic() < deadline
        raise AssertionError("the child share consumer exited")

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
