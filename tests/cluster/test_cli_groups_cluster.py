"""`onceflow groups`, `delete-records` and `topics alter` on a three-broker cluster, for a
group coordinated by a broker other than the one bootstrapped from and a topic whose
partitions are led by all three: each request reaches the broker that must answer it."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

from onceflow.cli.main import main
from tests.helpers.clients import (
    admin_client,
    consume_until,
    consumer,
    create_topic,
    produce_and_confirm,
    producer,
    topic_name,
)
from tests.helpers.cluster import Cluster, cluster_fixture

three = cluster_fixture(3, scope="module")
T = 20.0


def cli(capsys: pytest.CaptureFixture[str], bootstrap: str, line: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([*line.split(), "--bootstrap-server", bootstrap])
    out, err = capsys.readouterr()
    return code, out, err


def remote_group(bootstrap: str, first: int) -> str:
    """A group name whose coordinator is not broker `first`."""
    admin = admin_client(bootstrap)
    while True:
        group = f"cli-c-{uuid.uuid4().hex[:8]}"
        described = admin.describe_consumer_groups([group], request_timeout=T)[group].result(T)
        if described.coordinator.id != first:
            return group


def test_the_commands_reach_the_brokers_that_answer(
    three: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    first = three.brokers[0]
    bootstrap = first.bootstrap  # one broker only: the others are found through it
    topic = create_topic(bootstrap, topic_name("cli"), partitions=3, replication_factor=3)
    leaders = admin_client(bootstrap).list_topics(topic, timeout=T).topics[topic].partitions
    assert sorted(p.leader for p in leaders.values()) == [1, 2, 3]
    records = [(p, None, f"{p}-{i}".encode(), None) for p in range(3) for i in range(5)]
    assert not produce_and_confirm(producer(bootstrap, acks="all"), topic, records).errors
    group = remote_group(bootstrap, first.broker_id)
    c = consumer(bootstrap, group)
    c.subscribe([topic])
    consume_until(c, lambda got: len(got) >= 15)
    c.commit(offsets=[TopicPartition(topic, p, 2) for p in range(3)], asynchronous=False)
    c.close()

    code, out, err = cli(capsys, bootstrap, f"groups --describe --group {group}")
    assert code == 0, err
    lag = [line.split()[2:6] for line in out.splitlines()[2:]]
    assert lag == [[str(p), "2", "5", "3"] for p in range(3)]
    code, out, err = cli(capsys, bootstrap, f"delete-records --topic {topic} --offset 3")
    assert code == 0, err
    assert out.splitlines()[2:] == [f"partition: {topic}-{p}\tlow_watermark: 3" for p in range(3)]
    reset = f"groups --reset-offsets --group {group} --all-topics --to-earliest --execute"
    code, out, err = cli(capsys, bootstrap, reset)
    assert code == 0 and [line.split()[-1] for line in out.splitlines()[2:]] == ["3"] * 3, err

    code, out, err = cli(
        capsys, bootstrap, f"groups --delete-offsets --group {group} --topic {topic}:0"
    )
    assert code == 0 and out.splitlines()[-1].split() == [topic, "0", "Successful"], err
    admin = admin_client(bootstrap)  # kept alive until its future is done
    request = [ConsumerGroupTopicPartitions(group)]
    fetched = admin.list_consumer_group_offsets(request, request_timeout=T)[group].result(T)
    assert sorted((tp.partition, tp.offset) for tp in fetched.topic_partitions) == [(1, 3), (2, 3)]

    code, _, err = cli(
        capsys, bootstrap, f"topics alter {topic} --partitions 5 --config retention.ms=600000"
    )
    assert code == 0, err
    described = admin_client(bootstrap).list_topics(topic, timeout=T).topics[topic]
    assert len(described.partitions) == 5
    code, out, err = cli(capsys, bootstrap, f"groups --delete --group {group}")
    assert (code, err) == (0, "")
