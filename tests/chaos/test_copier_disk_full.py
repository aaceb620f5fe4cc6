"""A consume-transform-produce loop through disk-full episodes, exactly once.

Two transactional copiers (copier.py subprocesses: read_committed input, transactional
output, the input offsets committed in each transaction, a third of the transactions
aborted on purpose) copy a seeded topic while the broker's data dir, a 48 MiB tmpfs, runs
out of space twice with no broker restart. Two brokers, two ways:

- low: with the 4 MiB free-space threshold, another process's file leaves 2 MiB: produce is
  refused while markers, the transaction log and offset commits still go on;
- full: with the threshold off, the file takes the last byte: every write fails for lack of
  space, and the broker releases its ballast so that its own writes can go on.

Space comes back each time by deleting the other file. At the end the output, read
committed, is exactly the input (every record once, in order per input partition and
output partition), and the group's committed offsets are at the end of the input.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos.test_txn_copier import (
    ABORT_RATIO,
    CopierProcess,
    Plan,
    _check_output,
    _group_offsets,
    _seed,
)
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import create_topic
from tests.helpers.small_disk import SmallDisk, small_disk
from tests.helpers.txn import TXN_BROKER_OVERRIDES, read_records, wait_for, wait_stable

pytestmark = pytest.mark.slow

MIB = 1 << 20
PLAN = Plan(input_partitions=2, output_partitions=3, records=20_000)
BATCH = 500
EPISODE_S = 5.0
RUN_DEADLINE_S = 300.0


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[SmallDisk]:
    with small_disk(tmp_path / "data", 48) as mounted:
        yield mounted


EPISODES_AT = (0.25, 0.6)  # overall progress at which each episode starts


def _run(
    disk: SmallDisk, broker: BrokerProcess, kind: str, tmp: Path
) -> tuple[str, str, str, list[str]]:
    per_partition = PLAN.records // PLAN.input_partitions
    src = create_topic(broker.bootstrap, partitions=PLAN.input_partitions)
    dst = create_topic(broker.bootstrap, partitions=PLAN.output_partitions)
    group = f"copier-{uuid.uuid4().hex[:8]}"
    _seed(broker.bootstrap, src, PLAN.input_partitions, per_partition)
    copiers = []
    for part in range(PLAN.input_partitions):
        args = [
            "--bootstrap", broker.bootstrap,
            "--input-topic", src,
            "--input-partition", str(part),
            "--input-end", str(per_partition),
            "--output-topic", dst,
            "--output-partitions", str(PLAN.output_partitions),
            "--txn-id", f"copier-{src}-{part}",
            "--group", group,
            "--batch", str(BATCH),
            "--abort-ratio", str(ABORT_RATIO),
        ]  # fmt: skip
        copiers.append(CopierProcess(args, per_partition, tmp, f"copier-{part}"))
    episodes = list(EPISODES_AT)
    notes: list[str] = []
    deadline = time.monotonic() + RUN_DEADLINE_S
    try:
        for c in copiers:
            c.start()
        while not all(c.done for c in copiers):
            assert time.monotonic() < deadline, "copiers unfinished: " + "; ".join(
                f"{c.name} at {c.position}: {c.tail()}" for c in copiers
            )
            time.sleep(0.05)
            for c in copiers:
                c.pump()
                code = c.exited()
                assert code is None or c.done, f"{c.name} exited {code}:\n{c.tail()}"
            overall = sum(c.position for c in copiers) / PLAN.records
            if episodes and overall >= episodes[0]:
                episodes.pop(0)
                before = sum(c.position for c in copiers)
                _episode(disk, broker, kind, copiers)
                notes.append(
                    f"{kind}: {sum(c.position for c in copiers) - before} copied during it"
                )
        for c in copiers:
            assert c.reap() == 0, c.tail()
    finally:
        for c in copiers:
            c.close()
    assert not episodes, "the copiers finished before every disk-full episode ran"
    recovered = sum(1 for c in copiers for line in c.lines if line.startswith("RECOVERED"))
    notes.append(f"{recovered} transactions restarted after an abortable error")
    return src, dst, group, notes


def _episode(
    disk: SmallDisk, broker: BrokerProcess, kind: str, copiers: list[CopierProcess]
) -> None:
    seen = broker.log_size()
    disk.fill(leave=2 * MIB if kind == "low" else 0)
    marker = "ok -> low" if kind == "low" else "ok -> full"
    wait_for(lambda: marker in broker.log[seen:], 30, f"the broker to see the disk {kind}")
    end = time.monotonic() + EPISODE_S
    while time.monotonic() < end:
        for c in copiers:
            c.pump()
        time.sleep(0.05)
    disk.unfill()
    wait_for(lambda: "-> ok" in broker.log[seen:], 30, "the broker to see space again")


@pytest.mark.timeout(600)
@pytest.mark.parametrize("kind", ["low", "full"])
def test_a_copier_stays_exactly_once_through_disk_full_episodes(
    disk: SmallDisk, tmp_path: Path, kind: str
) -> None:
    overrides = {
        **TXN_BROKER_OVERRIDES,
        "log.segment.bytes": str(MIB),
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.num.partitions": "4",
        "onceflow.log.dir.min.free.bytes": str(4 * MIB) if kind == "low" else "0",
        "onceflow.log.dir.min.free.percent": "100",
        "onceflow.log.dir.ballast.bytes": str(512 * 1024),
    }
    broker = BrokerProcess(disk.path, overrides).start()
    try:
        src, dst, group, notes = _run(disk, broker, kind, tmp_path)
        ends = wait_stable(broker.bootstrap, dst, range(PLAN.output_partitions), timeout=120)
        out = read_records("confluent", broker.bootstrap, dst, ends, committed=True, timeout=120)
        _check_output(PLAN, out)
        offsets = _group_offsets(broker.bootstrap, group, src, PLAN.input_partitions)
        per_partition = PLAN.records // PLAN.input_partitions
        assert offsets == dict.fromkeys(range(PLAN.input_partitions), per_partition)
        if kind == "full":
            assert "released the 524288-byte ballast" in broker.log
        assert broker.internal_errors() == []
        print(f"\ncopier: {len(out)} records copied exactly once; {'; '.join(notes)}")
    finally:
        broker.kill()
