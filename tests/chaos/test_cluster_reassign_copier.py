"""Exactly-once while partitions move to a new broker (issue 25).

A three-broker cluster runs the transactional copiers of test_cluster_copier (read_committed
input, transactional output, consumer offsets in each transaction, a third of the
transactions aborted on purpose) and an idempotent acks=all producer. Mid-copy a fourth
broker joins; it is paused (SIGSTOP: still registered, unable to copy anything) while the
test reassigns, through AlterPartitionReassignments, a partition of the output topic, the
idempotent producer's partition, copier 0's `__transaction_state` partition and the group's
`__consumer_offsets` partition: each from its replicas to the new broker and the two others,
dropping the controller. Then the controller, which also leads the output partition, is
killed with kill -9 while every reassignment is in progress (checked: ListPartitionReassignments
names them all), and broker 4 resumes. A new controller must resume the reassignments from
ZooKeeper alone, the partitions get new leaders, broker 4 catches up and joins the ISRs, and
the reassignments complete. The old controller restarts and drops its moved replicas.

At the end: the read_committed output is exactly the input (every record once, in order),
its records are exactly those of the committed transactions on disk, the group's offsets are
at the input's end, every record the idempotent producer had acknowledged is there exactly
once, every moved partition's replicas and ISR are its target, and its replicas hold the
same bytes; every broker exits cleanly, having logged no internal error.

Not marked slow: about half a minute, like the cluster tests.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Message

from onceflow.client.cluster import Cluster as WireCluster
from onceflow.coordinator.group.offsets import partition_for as group_partition_for
from onceflow.coordinator.transaction.coordinator import txn_partition_for
from onceflow.protocol.api_versions import ApiKey
from tests.chaos.test_cluster_copier import (
    INPUT_PARTITIONS,
    INTERNAL_PARTITIONS,
    OUTPUT_PARTITIONS,
    OVERRIDES,
    Watcher,
    _decided_offsets,
    _leaders,
)
from tests.chaos.test_txn_copier import (
    ABORT_RATIO,
    CopierProcess,
    Plan,
    _check_output,
    _group_offsets,
    _seed,
)
from tests.cluster.reassign_helpers import alter, ongoing, wait_reassigned
from tests.cluster.test_replication import segment_bytes
from tests.helpers.clients import consume_until, consumer, create_topic, drain, producer
from tests.helpers.cluster import Cluster, cluster_factory
from tests.helpers.txn import read_records, wait_stable

__all__ = ["cluster_factory"]

CHUNKS = 3
CHUNK = 1000
PLAN = Plan(INPUT_PARTITIONS, OUTPUT_PARTITIONS, INPUT_PARTITIONS * CHUNKS * CHUNK)
T = 90.0


class IdempotentWriter:
    """An idempotent acks=all producer writing numbered records until stopped; what was
    acknowledged and what failed."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.acked: list[bytes] = []
        self.failed: list[str] = []
        self.stop = threading.Event()
        self._p = producer(
            bootstrap,
            acks="all",
            **{"enable.idempotence": True, "linger.ms": 5, "message.timeout.ms": 120_000},
        )
        self._thread = threading.Thread(target=self._run, name="idempotent", daemon=True)

    def _delivered(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            self.acked.append(msg.value() or b"")
        else:
            self.failed.append(str(err))

    def _run(self) -> None:
        n = 0
        while not self.stop.is_set():
            try:
                self._p.produce(
                    self.topic, value=b"i%07d" % n, partition=0, on_delivery=self._delivered
                )
                n += 1
            except BufferError:
                pass
            self._p.poll(0.005)  # about 200 records a second
        assert self._p.flush(150) == 0

    def start(self) -> IdempotentWriter:
        self._thread.start()
        return self

    def finish(self) -> None:
        self.stop.set()
        self._thread.join(180)
        assert not self._thread.is_alive(), "the idempotent producer did not finish"


def _controller(cluster: Cluster) -> int:
    with WireCluster(cluster.bootstrap, 10.0) as wire:
        described = wire.bootstrap.call(
            ApiKey.DESCRIBE_CLUSTER, include_cluster_authorized_operations=False
        )
    return int(described.controller_id)


def _wait_progress(copiers: list[CopierProcess], watcher: Watcher, position: int) -> None:
    while min(c.position for c in copiers) < position:
        assert watcher.running, f"the copiers stopped: {watcher.error}"
        time.sleep(0.05)


def _replicas_agree(
    cluster: Cluster, topic: str, partition: int, replicas: tuple[int, ...]
) -> None:
    deadline = time.monotonic() + T
    while True:
        copies = {b: segment_bytes(cluster, b, topic, partition) for b in replicas}
        if len(set(copies.values())) == 1:
            return
        assert time.monotonic() < deadline, {b: len(c) for b, c in copies.items()}
        time.sleep(0.2)


@pytest.mark.timeout(480)
def test_exactly_once_while_partitions_move_to_a_new_broker_and_the_controller_dies(
    cluster_factory: Callable[..., Cluster], tmp_path: Path
) -> None:
    cluster = cluster_factory(3, overrides={**OVERRIDES, "auto.leader.rebalance.enable": "false"})
    per_partition = CHUNKS * CHUNK
    src = create_topic(cluster.bootstrap, partitions=INPUT_PARTITIONS, replication_factor=3)
    dst = create_topic(cluster.bootstrap, partitions=OUTPUT_PARTITIONS, replication_factor=3)
    idem = create_topic(cluster.bootstrap, partitions=1, replication_factor=3)
    group = f"copier-{uuid.uuid4().hex[:8]}"
    _seed(cluster.bootstrap, src, INPUT_PARTITIONS, 2 * CHUNK)
    copiers = []
    for part in range(INPUT_PARTITIONS):
        args = [
            "--bootstrap", cluster.bootstrap,
            "--input-topic", src,
            "--input-partition", str(part),
            "--input-end", str(per_partition),
            "--output-topic", dst,
            "--output-partitions", str(OUTPUT_PARTITIONS),
            "--txn-id", f"copier-{src}-{part}",
            "--group", group,
            "--batch", "100",
            "--abort-ratio", str(ABORT_RATIO),
            "--call-timeout", "10",
            "--hung-call-grace", "5",
        ]  # fmt: skip
        copiers.append(CopierProcess(args, per_partition, tmp_path, f"copier-{part}"))
    watcher = Watcher(cluster, copiers)
    writer = IdempotentWriter(cluster.bootstrap, idem).start()
    events: list[str] = []
    try:
        watcher.start()
        _wait_progress(copiers, watcher, CHUNK // 2)
        _seed(cluster.bootstrap, src, INPUT_PARTITIONS, per_partition, first=2 * CHUNK)
        new = cluster.add_broker()
        cluster.wait_formed()
        victim = _controller(cluster)
        leaders = _leaders(cluster.running(), [dst])
        led = [p for p in range(OUTPUT_PARTITIONS) if leaders.get((dst, p)) == victim]
        data = (dst, led[0] if led else 0)
        moving = [
            data,
            (idem, 0),
            ("__transaction_state", txn_partition_for(copiers[0].txn_id, INTERNAL_PARTITIONS)),
            ("__consumer_offsets", group_partition_for(group, INTERNAL_PARTITIONS)),
        ]
        everyone = (1, 2, 3)
        targets = {tp: (new.broker_id, *[b for b in everyone if b != victim]) for tp in moving}
        new.pause()
        try:
            assert alter(cluster, dict(targets)) == dict.fromkeys(targets, 0)
            pending = ongoing(cluster)
            assert set(targets) <= set(pending), pending
            events.append(f"reassigning {targets}; controller {victim} leads {data}")
            cluster.broker(victim).kill()
            events.append(f"controller {victim} killed with {len(pending)} reassignments pending")
        finally:
            new.resume()
        wait_reassigned(cluster, targets, timeout=T)
        events.append("reassignments complete")
        cluster.broker(victim).start()
        _wait_progress(copiers, watcher, per_partition)
        watcher.join(T)
        assert watcher.error is None, watcher.error
    finally:
        writer.finish()
        watcher.close()
    print("\n".join(events))

    ends = wait_stable(cluster.bootstrap, dst, range(OUTPUT_PARTITIONS), timeout=T)
    out = read_records("confluent", cluster.bootstrap, dst, ends, committed=True, timeout=120)
    _check_output(PLAN, out)
    offsets = _group_offsets(cluster.bootstrap, group, src, INPUT_PARTITIONS)
    assert offsets == dict.fromkeys(range(INPUT_PARTITIONS), per_partition), offsets
    by_partition: dict[int, set[int]] = {p: set() for p in range(OUTPUT_PARTITIONS)}
    for r in out:
        by_partition[r.partition].add(r.offset)
    for (topic, partition), target in targets.items():
        _replicas_agree(cluster, topic, partition, target)
    for p in range(OUTPUT_PARTITIONS):
        holder = targets[data][0] if p == data[1] else 1  # broker 4 holds the moved one
        committed, aborted = _decided_offsets(cluster, dst, p, holder)
        assert not by_partition[p] & aborted, f"{dst}-{p}: aborted records read"
        assert by_partition[p] == committed, f"{dst}-{p}: read_committed != committed on disk"

    c = consumer(
        cluster.bootstrap, f"check-{uuid.uuid4().hex[:6]}", **{"auto.offset.reset": "earliest"}
    )
    c.subscribe([idem])
    assert writer.acked, "the idempotent producer wrote nothing"
    got = consume_until(c, lambda m: len(m) >= len(writer.acked), timeout=T)
    stored = Counter(m.value() for m in got + drain(c, 3.0))
    c.close()
    duplicates = [v for v, n in stored.items() if n > 1]
    assert not duplicates, f"duplicated by the idempotent producer: {duplicates[:5]}"
    lost = set(writer.acked) - set(stored)
    assert not lost, f"{len(lost)} acknowledged records lost: {sorted(lost)[:5]}"
    print(
        f"idempotent: {len(writer.acked)} acknowledged, {len(writer.failed)} failed; "
        f"copied {PLAN.records}"
    )
    cluster.finish()
