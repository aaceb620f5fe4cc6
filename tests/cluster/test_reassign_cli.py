"""`onceflow reassign-partitions` on a real cluster, as an operator grows one: a fourth
broker starts, --generate proposes moving a topic over the four, --execute --throttle starts
it with replication throttles (the new replicas catch up at about the throttled rate),
--verify reports progress and, once done, removes the throttles; --cancel goes back."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from onceflow.cli.main import main
from tests.cluster.reassign_helpers import (
    ongoing,
    replicas_and_isr,
    topic_with_a_spare,
    wait_reassigned,
)
from tests.helpers.broker import free_port
from tests.helpers.clients import admin_client, create_topic, produce_and_confirm, producer
from tests.helpers.cluster import Cluster, cluster_factory

__all__ = ["cluster_factory"]

RATE = 200_000  # B/s
RECORDS, SIZE = 1600, 1000  # about 1.7 MB with the batches' overhead


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()  # what the test printed before
    code = main(["reassign-partitions", *argv])
    out = capsys.readouterr()
    return code, out.out + out.err


def _metric(port: int, sample: str) -> float:
    """One sample of a broker's /metrics, by its exposition name and labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        if name == sample:
            return float(value)
    raise AssertionError(f"no sample {sample} in the metrics")


def _configs(cluster: Cluster, kind: str, name: str) -> dict[str, str]:
    from confluent_kafka.admin import ConfigResource, ResourceType

    admin = admin_client(cluster.bootstrap)  # alive until the answer is in
    resource = ConfigResource(ResourceType[kind], name)
    [future] = admin.describe_configs([resource]).values()
    described = future.result(timeout=10)
    return {k: v.value for k, v in described.items() if v.value is not None}


def test_generate_execute_throttled_verify(
    cluster_factory: Callable[..., Cluster], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ports = {b: free_port() for b in (1, 2, 3, 4)}
    metrics = {b: {"onceflow.metrics.listener": f"127.0.0.1:{port}"} for b, port in ports.items()}
    cluster = cluster_factory(
        3,
        broker_overrides={b: metrics[b] for b in (1, 2, 3)},
        overrides={
            "replication.quota.window.num": "2",  # a rate measured over about a second
            "replica.fetch.max.bytes": "65536",
            "replica.fetch.backoff.ms": "100",
            "auto.leader.rebalance.enable": "false",
        },
    )
    topic = create_topic(cluster.bootstrap, partitions=1, replication_factor=1)
    value = b"x" * SIZE
    sent = produce_and_confirm(
        producer(cluster.bootstrap, acks="all"),
        topic,
        ((0, None, value, None) for _ in range(RECORDS)),
    )
    assert not sent.errors
    [old], _ = replicas_and_isr(cluster, topic, 0)
    cluster.add_broker(metrics[4])
    cluster.wait_formed()
    base = ["--bootstrap-server", cluster.bootstrap]

    moves = tmp_path / "topics.json"
    moves.write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))
    code, out = _run(
        [*base, "--generate", "--topics-to-move-json-file", str(moves), "--broker-list", "1,2,3,4"],
        capsys,
    )
    assert code == 0, out
    current_head, proposed_head = (
        "Current partition replica assignment\n",
        "Proposed partition reassignment configuration\n",
    )
    assert out.startswith(current_head) and proposed_head in out
    current = json.loads(out[len(current_head) :].split("\n")[0])
    assert current == {
        "version": 1,
        "partitions": [{"topic": topic, "partition": 0, "replicas": [old], "log_dirs": ["any"]}],
    }
    proposed = json.loads(out.split(proposed_head)[1])
    [entry] = proposed["partitions"]
    assert len(entry["replicas"]) == 1 and entry["replicas"][0] in (1, 2, 3, 4)

    # Move it to two replicas, the old one and broker 4, throttled.
    target = [old, 4]
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": target}]}
        )
    )
    started = time.monotonic()
    code, out = _run(
        [*base, "--execute", "--reassignment-json-file", str(plan), "--throttle", str(RATE)], capsys
    )
    assert code == 0, out
    assert "Save this to use as the --reassignment-json-file option during rollback" in out
    assert f"The inter-broker throttle limit was set to {RATE} B/s" in out
    assert f"Successfully started partition reassignment for {topic}-0" in out
    assert _configs(cluster, "TOPIC", topic)["follower.replication.throttled.replicas"] == "0:4"
    assert _configs(cluster, "TOPIC", topic)["leader.replication.throttled.replicas"] == f"0:{old}"
    assert _configs(cluster, "BROKER", "4")["follower.replication.throttled.rate"] == str(RATE)
    # A second --execute while this one runs is refused, as Kafka's tool refuses it.
    code, out = _run([*base, "--execute", "--reassignment-json-file", str(plan)], capsys)
    assert code != 0 and "Cannot execute because there is an existing partition assignment" in out
    code, out = _run([*base, "--verify", "--reassignment-json-file", str(plan)], capsys)
    assert code == 0
    assert f"Reassignment of partition {topic}-0 is still in progress." in out
    assert "Clearing" not in out
    assert _metric(ports[old], "onceflow_reassigning_partitions") == 1
    # kafka-topics.sh --describe shows the move (the throttle keeps it going for seconds).
    assert main(["topics", "--describe", "--topic", topic, *base]) == 0
    described = capsys.readouterr().out
    assert (
        f"\tReplicas: {old},4\tIsr: {old}\tAdding Replicas: 4\tRemoving Replicas: \n" in described
    )
    assert "ReplicationFactor: 1\t" in described
    wait_reassigned(cluster, {(topic, 0): tuple(target)}, timeout=120)
    took = time.monotonic() - started
    copied = sum(
        f.stat().st_size for f in (Path(cluster.broker(4).data_dir) / f"{topic}-0").glob("*.log")
    )
    rate = copied / took
    with capsys.disabled():
        print(f"\nthrottled copy: {copied} B in {took:.1f} s = {rate:.0f} B/s (limit {RATE})")
    assert copied > RECORDS * SIZE
    # Every byte copied went through the throttles, and the metrics count them.
    follower = 'onceflow_replication_throttled_bytes_total{throttle="follower"}'
    leader = 'onceflow_replication_throttled_bytes_total{throttle="leader"}'
    assert _metric(ports[4], follower) >= copied
    assert _metric(ports[old], leader) >= copied
    assert _metric(ports[old], "onceflow_reassigning_partitions") == 0
    assert rate < 1.5 * RATE, f"the throttle did not hold: {rate:.0f} B/s"

    code, out = _run([*base, "--verify", "--reassignment-json-file", str(plan)], capsys)
    assert code == 0, out
    assert out.splitlines()[:2] == [
        "Status of partition reassignment:",
        f"Reassignment of partition {topic}-0 is completed.",
    ]
    assert "Clearing broker-level throttles on brokers 1,2,3,4" in out
    assert f"Clearing topic-level throttles on topic {topic}" in out
    assert "follower.replication.throttled.replicas" not in _configs(cluster, "TOPIC", topic)
    unlimited = str(2**63 - 1)  # the default once the dynamic value is deleted
    for b in ("1", "4"):
        rates = _configs(cluster, "BROKER", b)
        assert rates.get("follower.replication.throttled.rate", unlimited) == unlimited
        assert rates.get("leader.replication.throttled.rate", unlimited) == unlimited
    cluster.finish()


def test_cancel_and_refusals(
    cluster_factory: Callable[..., Cluster], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = cluster_factory(3)
    topic, original, spare, others = topic_with_a_spare(cluster)
    base = ["--bootstrap-server", others]
    plan = tmp_path / "plan.json"
    target = [spare, original[0]]
    plan.write_text(
        json.dumps(
            {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": target}]}
        )
    )
    code, out = _run([*base, "--cancel", "--reassignment-json-file", str(plan)], capsys)
    assert code == 0
    assert out.splitlines()[:3] == [
        "None of the specified partition reassignments are active.",
        "None of the specified partition moves are active.",
        "Clearing broker-level throttles on brokers 1,2,3",
    ]
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps(
            {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [1, 9]}]}
        )
    )
    code, out = _run([*base, "--execute", "--reassignment-json-file", str(bad)], capsys)
    assert (code, out.strip()) == (1, "onceflow: error: Unknown broker id 9")
    bad.write_text(
        json.dumps(
            {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [1, 1]}]}
        )
    )
    code, out = _run([*base, "--execute", "--reassignment-json-file", str(bad)], capsys)
    assert code != 0 and f"{topic}-0 contains multiple entries for 1" in out

    cluster.broker(spare).pause()  # registered, but cannot catch up: stays in progress
    try:
        code, out = _run([*base, "--execute", "--reassignment-json-file", str(plan)], capsys)
        assert code == 0, out
        assert (topic, 0) in ongoing(cluster, others)
        code, out = _run([*base, "--list"], capsys)
        assert out.splitlines() == [
            "Current partition reassignments:",
            f"{topic}-0: replicas: {spare},{original[0]},{original[1]}. adding: {spare}. "
            f"removing: {original[1]}.",
        ]
        code, out = _run(
            [*base, "--cancel", "--reassignment-json-file", str(plan), "--preserve-throttles"],
            capsys,
        )
        assert code == 0, out
        assert f"Successfully cancelled partition reassignment for: {topic}-0" in out
    finally:
        cluster.broker(spare).resume()
    wait_reassigned(cluster, {(topic, 0): tuple(original)})
    assert _run([*base, "--list"], capsys) == (0, "No partition reassignments found.\n")
    cluster.finish()
