"""Share groups (KIP-932): records/s consumed from one partition by 1, 2 and 4
ShareConsumers of one share group (implicit acknowledgement: every record accepted), beside
a classic consumer reading the same partition in the same run."""

from __future__ import annotations

import threading
import time
import uuid

from confluent_kafka import ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from onceflow.bench import KIB, consume, create_topic, produce

CONSUMER_COUNTS = (1, 2, 4)


def prepare(bootstrap: str, messages: int) -> str:
    """A one-partition topic holding `messages` 1 KiB records (and produce's warm-up one)."""
    topic = f"share-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, messages, KIB, partitions=1)
    return topic


def share_run(bootstrap: str, topic: str, consumers: int, messages: int) -> float:
    """Records/s for `consumers` share consumers of a new group to take all `messages`."""
    group = f"share-bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry(
                "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET
            )
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    clients = [
        ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0})
        for _ in range(consumers)
    ]
    for c in clients:
        c.subscribe([topic])
    got = [0] * consumers
    done = threading.Event()
    deadline = time.monotonic() + 300

    def run(k: int) -> None:
        while not done.is_set() and time.monotonic() < deadline:
            got[k] += sum(1 for m in clients[k].poll(0.2) if m.error() is None)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(consumers)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    while sum(got) < messages and time.monotonic() < deadline:
        time.sleep(0.01)
    seconds = time.perf_counter() - start
    done.set()
    for t in threads:
        t.join()
    for c in clients:
        c.close()
    if sum(got) < messages:
        raise RuntimeError(f"share consumers took {sum(got)} of {messages} records")
    return messages / seconds


def classic_run(bootstrap: str, topic: str, messages: int) -> float:
    return messages / consume(bootstrap, topic, messages, "read_uncommitted", warm_up=True)
