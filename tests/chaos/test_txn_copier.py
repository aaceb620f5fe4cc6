"""Exactly-once copying under SIGKILL, in the spirit of Kafka's transactions_test.py.

An input topic is seeded with numbered records. Transactional copiers (`copier.py`, one
subprocess per input partition, confluent-kafka, read_committed, 750 records per
transaction, about one transaction in three aborted on purpose, the consumer offsets sent
in the transaction) copy it to an output topic. While they run, each copier is killed with
SIGKILL three times and restarted (the new one fences its predecessor: same transactional
id), and the broker is killed with SIGKILL at least twice and restarted.

At the end the output, read_committed, is exactly the input: every record once, none lost,
nothing of an aborted transaction. Records of one input partition keep their order within
each output partition (the single-partition variant checks the whole order). The group's
committed offsets are at the end of the input, and the log holds aborted copies (so the
aborts really happened).
"""

from __future__ import annotations

import datetime
import os
import selectors
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from kio.schema.init_producer_id.v1 import request as init_producer_id_v1
from kio.schema.types import TransactionalId

from tests.helpers.broker import BrokerProcess, die_with_parent
from tests.helpers.clients import QUIET_LOGGER, create_topic
from tests.helpers.clients import producer as plain_producer
from tests.helpers.txn import (
    TXN_BROKER_OVERRIDES,
    Rec,
    last_txn_state,
    read_records,
    wait_stable,
)
from tests.helpers.wire import RawConnection

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[2]
RECORDS = 100_000
BATCH = 750
ABORT_RATIO = 1 / 3
COPIER_KILLS = 3
RUN_DEADLINE_S = 900.0
# A copier that commits nothing for this long is stuck: its stack is dumped and the test fails.
STALL_S = 120.0


@dataclass(frozen=True)
class Plan:
    input_partitions: int
    output_partitions: int
    records: int
    # Kill copier i when its committed progress passes each fraction; kill the broker when
    # the overall progress passes each fraction.
    copier_kills_at: tuple[float, ...] = (0.15, 0.4, 0.65)
    broker_kills_at: tuple[float, ...] = (0.3, 0.55)


class CopierProcess:
    """One copier subprocess at a time for an input partition; restarted after a kill."""

    def __init__(self, args: list[str], end: int, log_dir: Path, name: str) -> None:
        self.args = args
        self.txn_id = args[args.index("--txn-id") + 1]
        self.end = end
        self.name = name
        self.log_dir = log_dir
        self.position = 0
        self.done = False
        self.kills = 0
        self.restarts_after_failure = 0
        self.lines: list[str] = []
        self.proc: subprocess.Popen[bytes] | None = None
        self._sel = selectors.DefaultSelector()
        self._buf = b""
        self._runs = 0
        self.last_progress = time.monotonic()

    def start(self) -> None:
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
        )
        self._runs += 1
        stderr = open(self.log_dir / f"{self.name}-{self._runs}.stderr", "wb")  # noqa: SIM115
        with stderr:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.chaos.copier", *self.args],
                stdout=subprocess.PIPE,
                stderr=stderr,
                stdin=subprocess.DEVNULL,
                cwd=str(REPO_ROOT),
                env=env,
                preexec_fn=die_with_parent,
            )
        assert self.proc.stdout is not None
        self._buf = b""
        self._sel.register(self.proc.stdout, selectors.EVENT_READ)

    def _unregister(self) -> None:
        if self.proc is not None and self.proc.stdout is not None:
            self._sel.unregister(self.proc.stdout)
            self.proc.stdout.close()

    def pump(self) -> None:
        """Read what the copier printed so far."""
        if self.proc is None or self.proc.stdout is None:
            return
        fd = self.proc.stdout.fileno()
        while self._sel.select(0):
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        for raw in lines:
            line = raw.decode(errors="replace")
            self.lines.append(line)
            if line.startswith(("COMMITTED ", "START ", "ABORTED ")):
                self.last_progress = time.monotonic()
            if line.startswith("COMMITTED "):
                self.position = int(line.split()[1])
            elif line == "DONE":
                self.done = True

    @property
    def progress(self) -> float:
        return self.position / self.end

    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)
        self.pump()
        self._unregister()
        self.kills += 1

    def reap(self) -> int:
        """After the process exited on its own: read the rest; return its code."""
        assert self.proc is not None
        code = self.proc.wait(10)
        self.pump()
        self._unregister()
        return code

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._sel.close()

    def tail(self) -> str:
        return "\n".join(self.lines[-15:])

    def dump_stack(self) -> str:
        """SIGUSR1 makes the copier print its Python stack (faulthandler) to stderr."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGUSR1)
            time.sleep(1.0)
        path = self.log_dir / f"{self.name}-{self._runs}.stderr"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""


@dataclass
class RunStats:
    broker_kills: int = 0
    copier_kills: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    committed_txns: int = 0
    aborted_txns: int = 0
    recovered: int = 0
    seconds: float = 0.0


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data", TXN_BROKER_OVERRIDES)
    b.start()
    try:
        yield b
        if b.running:
            assert b.stop() == 0, f"unclean broker shutdown; its log:\n{b.log_tail()}"
        errors = b.internal_errors()
        assert not errors, "the broker logged internal errors:\n" + "\n---\n".join(errors[:5])
    finally:
        b.kill()


def _value(partition: int, i: int) -> bytes:
    return f"{partition}-{i:06d}".encode()


def _seed(bootstrap: str, topic: str, partitions: int, per_partition: int, first: int = 0) -> None:
    """Records `first` to `per_partition - 1` of each input partition (all of them unless
    `first` says the earlier ones are written already)."""
    p = plain_producer(
        bootstrap,
        **{
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 20,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 200_000,
        },
    )
    failed: list[object] = []

    def cb(err: object, _msg: object) -> None:
        if err is not None:
            failed.append(err)

    for i in range(first, per_partition):
        for part in range(partitions):
            while True:
                try:
                    p.produce(topic, value=_value(part, i), partition=part, on_delivery=cb)
                    break
                except BufferError:
                    p.poll(0.05)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(120) == 0, "seeding did not finish"
    assert not failed, failed[:5]


def _run_copiers(
    broker: BrokerProcess, plan: Plan, src: str, dst: str, group: str, tmp: Path
) -> RunStats:
    per_partition = plan.records // plan.input_partitions
    copiers = []
    for part in range(plan.input_partitions):
        args = [
            "--bootstrap", broker.bootstrap,
            "--input-topic", src,
            "--input-partition", str(part),
            "--input-end", str(per_partition),
            "--output-topic", dst,
            "--output-partitions", str(plan.output_partitions),
            "--txn-id", f"copier-{src}-{part}",
            "--group", group,
            "--batch", str(BATCH),
            "--abort-ratio", str(ABORT_RATIO),
        ]  # fmt: skip
        copiers.append(CopierProcess(args, per_partition, tmp, f"copier-{part}"))
    stats = RunStats()
    started = time.monotonic()
    deadline = started + RUN_DEADLINE_S
    broker_kills_left = list(plan.broker_kills_at)
    copier_kills_left = {c.name: list(plan.copier_kills_at) for c in copiers}
    try:
        for c in copiers:
            c.start()
        while not all(c.done for c in copiers):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"copiers unfinished after {RUN_DEADLINE_S} s: "
                    + "; ".join(f"{c.name} at {c.position}:\n{c.tail()}" for c in copiers)
                    + f"\nbroker log:\n{broker.log_tail()}"
                )
            time.sleep(0.02)
            for c in copiers:
                c.pump()
                if not c.done and time.monotonic() - c.last_progress > STALL_S:
                    raise AssertionError(
                        f"{c.name} made no progress for {STALL_S} s at {c.position}:\n"
                        f"{c.tail()}\nits stack:\n{c.dump_stack()}\n"
                        f"{_coordinator_view(broker, c.txn_id)}\n"
                        f"broker log:\n{broker.log_tail()}"
                    )
                code = c.exited()
                if code is not None and not c.done:
                    # Died on its own (a fatal error, e.g. fenced after a broker restart
                    # timed its transaction out): count it and start a new one.
                    c.reap()
                    stats.failures.append(f"{c.name} exited {code}: {c.tail()}")
                    c.restarts_after_failure += 1
                    assert c.restarts_after_failure <= 10, "\n\n".join(stats.failures)
                    c.start()
                    c.last_progress = time.monotonic()
                    continue
                todo = copier_kills_left[c.name]
                if todo and not c.done and c.progress >= todo[0]:
                    todo.pop(0)
                    c.kill()
                    c.start()
                    c.last_progress = time.monotonic()
            overall = sum(c.position for c in copiers) / plan.records
            if broker_kills_left and overall >= broker_kills_left[0]:
                broker_kills_left.pop(0)
                broker.kill()
                stats.broker_kills += 1
                broker.start()
        for c in copiers:
            assert c.reap() == 0, c.tail()
    finally:
        for c in copiers:
            c.close()
    stats.seconds = time.monotonic() - started
    stats.copier_kills = {c.name: c.kills for c in copiers}
    for c in copiers:
        stats.committed_txns += sum(1 for line in c.lines if line.startswith("COMMITTED"))
        stats.aborted_txns += sum(1 for line in c.lines if line.startswith("ABORTED"))
        stats.recovered += sum(1 for line in c.lines if line.startswith("RECOVERED"))
    return stats


def _coordinator_view(broker: BrokerProcess, txn_id: str) -> str:
    """For a stall report: the transactional id's newest logged state, and what a new
    InitProducerId for it is answered (51, CONCURRENT_TRANSACTIONS, for ever means the
    coordinator is stuck on a pending transition)."""
    last = last_txn_state(broker.data_dir, txn_id)
    try:
        with RawConnection(broker.bootstrap) as conn:
            answer = conn.call(
                init_producer_id_v1.InitProducerIdRequest(
                    transactional_id=TransactionalId(txn_id),
                    transaction_timeout=datetime.timedelta(seconds=30),
                )
            )
        init = f"error {int(answer.error_code)}"
    except Exception as exc:
        init = f"failed: {exc!r}"
    return f"{txn_id}: newest logged state {last}; a new InitProducerId is answered {init}"


def _group_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",  # require_stable: waits out pending offsets
            "logger": QUIET_LOGGER,
            "log_level": 0,
        }
    )
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=60)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        c.close()


def _check_output(plan: Plan, out: list[Rec]) -> None:
    per_partition = plan.records // plan.input_partitions
    expected = Counter(
        _value(p, i) for p in range(plan.input_partitions) for i in range(per_partition)
    )
    got = Counter(r.value for r in out)
    missing = expected - got
    duplicated = {v: n for v, n in got.items() if n > 1}
    unexpected = set(got) - set(expected)
    assert not missing and not duplicated and not unexpected, (
        f"output differs from input: {len(missing)} missing (e.g. {sorted(missing)[:5]}), "
        f"{len(duplicated)} duplicated (e.g. {sorted(duplicated.items())[:5]}), "
        f"{len(unexpected)} unexpected (e.g. {sorted(unexpected)[:5]})"  # type: ignore[type-var]
    )
    # Order: per output partition, the records of each input partition come in input order
    # (and each lands where the copier's rule puts it).
    seqs: dict[tuple[int, int], list[int]] = defaultdict(list)
    for r in out:  # sorted by (output partition, offset)
        assert r.value is not None
        src_part, index = (int(x) for x in r.value.split(b"-"))
        assert r.partition == index % plan.output_partitions, r
        seqs[(src_part, r.partition)].append(index)
    for key, indexes in seqs.items():
        assert indexes == sorted(indexes), f"input {key[0]} -> output {key[1]} out of order"
    if plan.input_partitions == 1 and plan.output_partitions == 1:
        assert [r.value for r in out] == [_value(0, i) for i in range(per_partition)]


def _copy_and_check(broker: BrokerProcess, plan: Plan, tmp: Path) -> RunStats:
    per_partition = plan.records // plan.input_partitions
    src = create_topic(broker.bootstrap, partitions=plan.input_partitions)
    dst = create_topic(broker.bootstrap, partitions=plan.output_partitions)
    group = f"copier-{uuid.uuid4().hex[:8]}"
    t0 = time.monotonic()
    _seed(broker.bootstrap, src, plan.input_partitions, per_partition)
    seeded_s = time.monotonic() - t0

    stats = _run_copiers(broker, plan, src, dst, group, tmp)
    assert stats.broker_kills == len(plan.broker_kills_at)
    assert all(n >= COPIER_KILLS for n in stats.copier_kills.values()), stats.copier_kills

    outs = range(plan.output_partitions)
    ends = wait_stable(broker.bootstrap, dst, outs, timeout=120)
    out = read_records("confluent", broker.bootstrap, dst, ends, committed=True, timeout=300)
    _check_output(plan, out)
    everything = read_records(
        "confluent", broker.bootstrap, dst, ends, committed=False, timeout=300
    )
    assert len(everything) > len(out), "no aborted copy in the log: the aborts did not happen"
    offsets = _group_offsets(broker.bootstrap, group, src, plan.input_partitions)
    assert offsets == dict.fromkeys(range(plan.input_partitions), per_partition), offsets
    print(
        f"\ncopier run: {plan.records} records, seeded in {seeded_s:.1f} s, copied in "
        f"{stats.seconds:.1f} s; {stats.committed_txns} committed and {stats.aborted_txns} "
        f"aborted transactions, {stats.recovered} recovered errors; broker kills "
        f"{stats.broker_kills}, copier kills {stats.copier_kills}, unplanned copier exits "
        f"{len(stats.failures)}; {len(everything) - len(out)} aborted records in the log"
    )
    for failure in stats.failures:
        print("  unplanned exit:", failure.splitlines()[0])
    return stats


@pytest.mark.timeout(1200)
def test_copiers_copy_exactly_once_through_kills(broker: BrokerProcess, tmp_path: Path) -> None:
    _copy_and_check(
        broker, Plan(input_partitions=2, output_partitions=3, records=RECORDS), tmp_path
    )


@pytest.mark.timeout(1200)
def test_single_partition_copier_keeps_order_through_kills(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    _copy_and_check(
        broker, Plan(input_partitions=1, output_partitions=1, records=RECORDS), tmp_path
    )
