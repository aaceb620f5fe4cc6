"""Share groups (KIP-932) with confluent-kafka's ShareConsumer against a real broker:
several consumers on one partition, release and reject, a killed consumer's records
delivered again after the lock, the delivery-count limit, read_committed with aborted and
open transactions, and a broker kill -9 with acknowledgements in flight."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections import Counter

import pytest
from confluent_kafka import AcknowledgeType, Producer

from tests.helpers.broker import BrokerProcess, free_port
from tests.helpers.share import (
    SHORT_LOCKS,
    ChildShareConsumer,
    create_topic,
    poll_values,
    produce,
    set_group_configs,
    share_consumer,
)
from tests.integration.test_metrics import scrape

EXPLICIT = {"share.acknowledgement.mode": "explicit"}


def _setup(broker: BrokerProcess, partitions: int = 1, **configs: str) -> tuple[str, str]:
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, partitions)
    set_group_configs(broker.bootstrap, group, {"share.auto.offset.reset": "earliest", **configs})
    return topic, group


@pytest.mark.broker_overrides(SHORT_LOCKS)
def test_several_consumers_share_one_partition_each_record_to_one(broker: BrokerProcess) -> None:
    topic, group = _setup(broker)
    n = 600
    consumers = [share_consumer(broker.bootstrap, group, topic) for _ in range(3)]
    seen: Counter[int] = Counter()
    by_consumer: Counter[int] = Counter()

    def note(i: int, m: object) -> None:
        seen[int(m.value())] += 1  # type: ignore[attr-defined]
        by_consumer[i] += 1

    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for start in range(0, n, 10):  # a stream of small batches while all three poll
        for i in range(start, start + 10):
            producer.produce(topic, str(i).encode(), partition=0)
        producer.flush(30)
        for i, c in enumerate(consumers):
            for m in c.poll(0.05):
                if m.error() is None:
                    note(i, m)
    poll_values(consumers, lambda: len(seen) == n, on_message=note)
    for _ in range(4):  # anything delivered twice would show now
        for i, c in enumerate(consumers):
            for m in c.poll(0.1):
                if m.error() is None:
                    note(i, m)
    for c in consumers:
        c.close()
    assert set(seen) == set(range(n))
    assert max(seen.values()) == 1, "a record was delivered twice"
    assert len(by_consumer) >= 2, f"one consumer took everything: {by_consumer}"


METRICS_PORT = free_port()


@pytest.mark.broker_overrides(
    {**SHORT_LOCKS, "onceflow.metrics.listener": f"127.0.0.1:{METRICS_PORT}"}
)
def test_release_delivers_again_and_reject_never(broker: BrokerProcess) -> None:
    topic, group = _setup(broker)
    produce(broker.bootstrap, topic, (str(i).encode() for i in range(10)))
    c = share_consumer(broker.bootstrap, group, topic, **EXPLICIT)
    deliveries: Counter[int] = Counter()
    accepted: set[int] = set()

    def handle(_: int, m: object) -> None:
        offset = m.offset()  # type: ignore[attr-defined]
        deliveries[offset] += 1
        if offset % 3 == 0 and deliveries[offset] == 1:
            c.acknowledge(m, AcknowledgeType.RELEASE)
        elif offset % 3 == 1:
            c.acknowledge(m, AcknowledgeType.REJECT)
        else:
            c.acknowledge(m, AcknowledgeType.ACCEPT)
            accepted.add(offset)

    poll_values([c], lambda: len(accepted) == 7, on_message=handle)
    c.commit_sync()
    for _ in range(8):  # nothing comes back: rejected records are archived
        assert c.poll(0.25).__len__() == 0
    c.close()
    assert accepted == {i for i in range(10) if i % 3 != 1}
    assert {o for o, k in deliveries.items() if k == 2} == {0, 3, 6, 9}
    assert all(deliveries[o] == 1 for o in (1, 4, 7))
    metrics = scrape(f"http://127.0.0.1:{METRICS_PORT}/metrics")
    assert metrics.value("onceflow_share_records_acquired_total") == 14
    assert metrics.value("onceflow_share_records_redelivered_total") == 4
    assert metrics.value("onceflow_share_records_acknowledged_total", type="release") == 4
    assert metrics.value("onceflow_share_records_acknowledged_total", type="reject") == 3
    assert metrics.value("onceflow_share_records_acknowledged_total", type="accept") == 7


@pytest.mark.broker_overrides(SHORT_LOCKS)
def test_a_killed_consumer_s_records_come_back_after_the_lock(broker: BrokerProcess) -> None:
    topic, group = _setup(broker)
    produce(broker.bootstrap, topic, (str(i).encode() for i in range(20)))
    child = ChildShareConsumer(broker.bootstrap, group, topic)
    held = child.held()
    assert held, "the child acquired nothing"
    child.kill()  # SIGKILL: no acknowledgement, no leave
    c = share_consumer(broker.bootstrap, group, topic)
    got: Counter[int] = Counter()
    poll_values([c], lambda: len(got) == 20, on_message=lambda _, m: got.update([m.offset()]))
    c.close()
    assert set(got) == set(range(20)) and max(got.values()) == 1


@pytest.mark.broker_overrides(SHORT_LOCKS)
def test_the_delivery_count_limit_archives_a_poison_record(broker: BrokerProcess) -> None:
    topic, group = _setup(broker, **{"share.delivery.count.limit": "3"})
    produce(broker.bootstrap, topic, [b"poison", b"ok-1", b"ok-2"])
    c = share_consumer(broker.bootstrap, group, topic, **EXPLICIT)
    deliveries: Counter[bytes] = Counter()

    def handle(_: int, m: object) -> None:
        value = m.value()  # type: ignore[attr-defined]
        deliveries[value] += 1
        kind = AcknowledgeType.RELEASE if value == b"poison" else AcknowledgeType.ACCEPT
        c.acknowledge(m, kind)

    poll_values([c], lambda: deliveries[b"poison"] >= 3, on_message=handle)
    c.commit_sync()
    for _ in range(8):
        for m in c.poll(0.25):
            handle(0, m)
    c.close()
    assert deliveries == {b"poison": 3, b"ok-1": 1, b"ok-2": 1}


@pytest.mark.broker_overrides(SHORT_LOCKS)
def test_read_committed_never_delivers_aborted_and_waits_for_open(broker: BrokerProcess) -> None:
    topic, group = _setup(broker, **{"share.isolation.level": "read_committed"})

    def txn_producer(tid: str) -> Producer:
        p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": tid})
        p.init_transactions(30)
        return p

    committed, aborted, late = txn_producer("a"), txn_producer("b"), txn_producer("c")
    late.begin_transaction()
    late.produce(topic, b"late-0", partition=0)
    late.flush(30)
    for i in range(5):
        committed.begin_transaction()
        committed.produce(topic, f"c-{i}".encode(), partition=0)
        committed.commit_transaction(30)
        aborted.begin_transaction()
        aborted.produce(topic, f"x-{i}".encode(), partition=0)
        aborted.abort_transaction(30)
    c = share_consumer(broker.bootstrap, group, topic)
    values: list[bytes] = []
    # Everything after late-0 waits for its transaction (the LSO): nothing arrives yet.
    for _ in range(12):
        values.extend(m.value() for m in c.poll(0.25) if m.error() is None)
    assert values == []
    late.commit_transaction(30)
    poll_values([c], lambda: len(values) >= 6, on_message=lambda _, m: values.append(m.value()))
    for _ in range(8):
        values.extend(m.value() for m in c.poll(0.25) if m.error() is None)
    c.close()
    assert sorted(values) == sorted([b"late-0"] + [f"c-{i}".encode() for i in range(5)])


@pytest.mark.broker_overrides(SHORT_LOCKS)
def test_a_broker_kill_loses_no_acknowledgement(broker: BrokerProcess) -> None:
    topic, group = _setup(broker)
    n = 200
    produce(broker.bootstrap, topic, (str(i).encode() for i in range(n)))
    c = share_consumer(broker.bootstrap, group, topic, **EXPLICIT)
    acked: set[int] = set()

    def accept(_: int, m: object) -> None:
        c.acknowledge(m)
        acked.add(int(m.value()))  # type: ignore[attr-defined]

    poll_values([c], lambda: len(acked) >= n // 2, on_message=accept)
    c.commit_sync()  # answered: durable in __share_group_state
    broker.restart(kill=True)
    c2 = share_consumer(broker.bootstrap, group, topic)
    again: Counter[int] = Counter()
    poll_values(
        [c2],
        lambda: len(again) == n - len(acked),
        on_message=lambda _, m: again.update([int(m.value())]),
        timeout=60,
    )
    for _ in range(8):
        again.update(int(m.value()) for m in c2.poll(0.25) if m.error() is None)
    c2.close()
    c.close()
    assert not (set(again) & acked), "an acknowledged record was delivered again"
    assert set(again) | acked == set(range(n))


@pytest.mark.broker_overrides(SHORT_LOCKS)
def test_share_groups_are_listed_described_and_deleted(broker: BrokerProcess) -> None:
    from confluent_kafka.admin import AdminClient

    from onceflow.client.cluster import Cluster
    from onceflow.protocol.api_versions import ApiKey

    topic, group = _setup(broker)
    produce(broker.bootstrap, topic, [b"a", b"b"])
    c = share_consumer(broker.bootstrap, group, topic)
    got: list[bytes] = []
    poll_values([c], lambda: len(got) == 2, on_message=lambda _, m: got.append(m.value()))
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    with Cluster(broker.bootstrap) as cluster:
        _, conn = cluster.group_coordinator(group)
        listed = conn.call(ApiKey.LIST_GROUPS, states_filter=(), types_filter=("share",)).groups
        assert [(g.group_id, g.group_type, g.group_state) for g in listed] == [
            (group, "share", "Stable")
        ]
        described = conn.call(
            ApiKey.SHARE_GROUP_DESCRIBE, group_ids=(group,), include_authorized_operations=False
        ).groups[0]
        assert described.error_code == 0 and described.group_state == "Stable"
        assert [
            [t.topic_name for t in m.assignment.topic_partitions] for m in described.members
        ] == [[topic]]
        # A live member: NON_EMPTY_GROUP; once it left, the group and its state go.
        assert admin.delete_consumer_groups([group])[group].exception(30) is not None
        c.close()
        admin.delete_consumer_groups([group])[group].result(30)
        gone = conn.call(
            ApiKey.SHARE_GROUP_DESCRIBE, group_ids=(group,), include_authorized_operations=False
        ).groups[0]
        assert gone.error_code == 69  # GROUP_ID_NOT_FOUND


_ONCEFLOW = (sys.executable, "-m", "onceflow.cli.main")


def _cli(broker: BrokerProcess, *args: str) -> str:
    proc = subprocess.run(
        [*_ONCEFLOW, "share-groups", "--bootstrap-server", broker.bootstrap, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.broker_overrides(SHORT_LOCKS)
def test_the_cli_lists_describes_and_resets_a_share_group(broker: BrokerProcess) -> None:
    topic, group = _setup(broker)
    produce(broker.bootstrap, topic, (str(i).encode() for i in range(10)))
    c = share_consumer(broker.bootstrap, group, topic)
    got: list[bytes] = []
    poll_values([c], lambda: len(got) == 10, on_message=lambda _, m: got.append(m.value()))
    c.commit_sync()
    assert group in _cli(broker, "--list").split()
    members = _cli(broker, "--describe", "--group", group, "--members").splitlines()
    assert members[0].split() == [
        "GROUP",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
        "#PARTITIONS",
        "ASSIGNMENT",
    ]
    assert members[1].split()[-1] == f"{topic}:0"
    c.close()
    offsets = _cli(broker, "--describe", "--group", group).splitlines()
    assert offsets[1].split() == [group, topic, "0", "10", "0"]  # start offset 10, no lag
    assert "Empty" in _cli(broker, "--describe", "--group", group, "--state")
    _cli(
        broker, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute"
    )
    assert _cli(broker, "--describe", "--group", group).splitlines()[1].split()[3:] == ["0", "10"]
    again = share_consumer(broker.bootstrap, group, topic)
    redelivered: list[bytes] = []
    poll_values(
        [again],
        lambda: len(redelivered) == 10,
        on_message=lambda _, m: redelivered.append(m.value()),
    )
    again.close()
    assert sorted(redelivered) == sorted(got)
    assert "successful" in _cli(broker, "--delete", "--group", group)
    assert group not in _cli(broker, "--list").split()
