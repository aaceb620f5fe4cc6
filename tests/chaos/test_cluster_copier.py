"""Exactly-once copying on a three-broker cluster through broker failures (issue 11).

The transactional copiers of tests/chaos/test_txn_copier.py (`copier.py` subprocesses:
read_committed input, a transactional producer, the consumer offsets sent in each
transaction, about one transaction in three aborted on purpose) copy a 2-partition input
topic to a 3-partition output topic on a cluster of three brokers and a ZooKeeper. Every
topic has RF=3 and min.insync.replicas=2; the internal topics have three partitions each, so
the transaction coordinator of an id is the leader of `__transaction_state` partition
`abs(javaHash(id)) % 3`. While the copiers run, the test injects, one after the other and
each in the middle of the copy:

1. kill -9 of the leader of output partition 0; the broker is restarted;
2. kill -9 of the broker coordinating copier 0's transactions (FindCoordinator's answer,
   checked against the leader of its `__transaction_state` partition); restarted;
3. SIGSTOP of the broker coordinating copier 1's transactions until ZooKeeper has expired
   its session and its leaderships have moved (at least 1 s longer than
   zookeeper.session.timeout.ms, 4 s here), then SIGCONT: it comes back as a zombie that
   must find out it leads and coordinates nothing any more.

After each fault the test waits until leadership (or the coordinator) has moved to a live
broker and, once the broker is back, until ZooKeeper has every replica in each ISR and every
broker's Metadata agrees on the leaders. The input is written in chunks, the next one just
before each fault, so every fault hits copiers with work in hand however fast the machine
is. The copiers ride through: librdkafka retries, and one that exits (fenced, or hung in
send_offsets_to_transaction() by librdkafka's bug #5511 when the group coordinator's broker
left the metadata: copier.HungCallWatchdog) is started again and fences its predecessor.
They do not flush before an abort: librdkafka then hands the sequences of records it purged
to the next transaction, and the brokers must refuse that transaction's batches rather than
take them for retries of a killed leader's write (test_txn_purged_sequences; the copier
exits on librdkafka's fatal error and is started again).

Faults run on the main thread and a thread watches the copiers: brokers must be started
from the main thread, as `die_with_parent` (PR_SET_PDEATHSIG) kills a child when the
*thread* that started it ends.

At the end the read_committed output is exactly the input (every record once, in input
order per input and output partition: test_txn_copier's `_check_output`); the records it
returns are exactly those of the committed transactions on disk, none of an aborted one;
aborted copies are in the log (the aborts happened); the group's committed offsets are at
the input's end; every replica of every partition (input, output and the internal topics)
holds the same bytes; and at teardown every broker exits cleanly on SIGTERM having logged
no internal error (`Cluster.finish`).
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from onceflow.client.cluster import Cluster as WireCluster
from onceflow.client.errors import ClientError
from onceflow.cluster.znodes import (
    PartitionState,
    decode_assignment,
    partition_state_path,
    topic_path,
)
from onceflow.coordinator.transaction.coordinator import txn_partition_for
from onceflow.records.control import ControlType
from tests.chaos.test_txn_copier import (
    ABORT_RATIO,
    CopierProcess,
    Plan,
    _check_output,
    _group_offsets,
    _seed,
)
from tests.cluster.test_replication import wait_replicas_agree
from tests.helpers.clients import create_topic
from tests.helpers.cluster import (
    CLUSTER_TEST_OVERRIDES,
    Cluster,
    ClusterBroker,
    cluster_factory,
)
from tests.helpers.txn import (
    TXN_BROKER_OVERRIDES,
    partition_batches,
    read_records,
    wait_stable,
)

__all__ = ["cluster_factory"]

pytestmark = pytest.mark.slow

INTERNAL_PARTITIONS = 3
OVERRIDES = {
    **TXN_BROKER_OVERRIDES,
    "min.insync.replicas": "2",
    "transaction.state.log.num.partitions": str(INTERNAL_PARTITIONS),
    "offsets.topic.num.partitions": str(INTERNAL_PARTITIONS),
}
INTERNAL_TOPICS = ("__transaction_state", "__consumer_offsets")
INPUT_PARTITIONS = 2
OUTPUT_PARTITIONS = 3
# The input is written in CHUNKS chunks of CHUNK records per input partition: two before
# the copiers start, the next one just before each fault. Fault k strikes once every
# copier has committed k + 1/2 chunks, so each has at least 1.5 chunks left to copy.
CHUNKS = 5
CHUNK = 1000
BATCH = 100
PLAN = Plan(
    input_partitions=INPUT_PARTITIONS,
    output_partitions=OUTPUT_PARTITIONS,
    records=INPUT_PARTITIONS * CHUNKS * CHUNK,
)
RUN_DEADLINE_S = 240.0
STALL_S = 60.0  # a copier that commits nothing for this long is stuck
RECOVERY_S = 60.0  # for a new leader or coordinator, a restart, the ISR to fill again
WIRE_TIMEOUT_S = 5.0
# The copiers' transactional calls time out after CALL_TIMEOUT_S (retried, or the
# transaction aborted and done again); a send_offsets_to_transaction() still blocked
# HUNG_CALL_GRACE_S later is librdkafka's hang (copier.HungCallWatchdog) and the copier
# exits 5 and is started again.
CALL_TIMEOUT_S = 10.0
HUNG_CALL_GRACE_S = 5.0
# SIGSTOP lasts at least this long: past the session timeout (CLUSTER_TEST_OVERRIDES).
PAUSE_MIN_S = int(CLUSTER_TEST_OVERRIDES["zookeeper.session.timeout.ms"]) / 1000 + 1.0


# ---- who leads what, asked of the live brokers only ------------------------------------
# A paused broker still accepts TCP connections (the kernel does) and never answers, so
# every question goes to brokers the test knows are neither dead nor paused.


def _live(cluster: Cluster, paused: ClusterBroker | None) -> list[ClusterBroker]:
    return [b for b in cluster.running() if b is not paused]


def _leaders(live: list[ClusterBroker], topics: list[str]) -> dict[tuple[str, int], int]:
    """(topic, partition) -> leader id in the metadata of the first live broker that answers."""
    for b in live:
        try:
            with WireCluster(b.bootstrap, timeout_s=WIRE_TIMEOUT_S) as wire:
                metadata = wire.metadata(topics)
        except ClientError:
            continue
        return {
            (topic, p): leader
            for topic, parts in metadata.leaders.items()
            for p, leader in parts.items()
        }
    return {}


def _wait(
    what: str, check: Callable[[], tuple[bool, object]], timeout: float = RECOVERY_S
) -> object:
    """Call `check`, which answers (ok, detail), until ok; return detail. After `timeout`,
    fail naming `what` and the last detail."""
    deadline = time.monotonic() + timeout
    while True:
        ok, detail = check()
        if ok:
            return detail
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}: {detail}")
        time.sleep(0.2)


def txn_coordinator(cluster: Cluster, txn_id: str, live: list[ClusterBroker]) -> ClusterBroker:
    """The broker every live broker names in FindCoordinator (key type 1) for `txn_id`,
    once they agree on a live one; it must lead the id's `__transaction_state` partition."""
    live_ids = {b.broker_id for b in live}
    partition = txn_partition_for(txn_id, INTERNAL_PARTITIONS)

    def agreed() -> tuple[bool, object]:
        answers: dict[int, object] = {}
        for b in live:
            try:
                with WireCluster(b.bootstrap, timeout_s=WIRE_TIMEOUT_S) as wire:
                    answers[b.broker_id] = wire.transaction_coordinator(txn_id)[0]
            except ClientError as exc:
                answers[b.broker_id] = str(exc)
        nodes = set(answers.values())
        if len(nodes) != 1 or next(iter(nodes)) not in live_ids:
            return False, answers
        node = next(iter(nodes))
        leader = _leaders(live, ["__transaction_state"]).get(("__transaction_state", partition))
        if leader != node:
            return False, f"{answers}, but __transaction_state-{partition} is led by {leader}"
        return True, node

    node = _wait(f"a live coordinator of {txn_id}", agreed)
    assert isinstance(node, int)
    return cluster.broker(node)


def _zk_states(zk: KazooClient, topics: list[str]) -> dict[tuple[str, int], PartitionState]:
    """Each partition's state znode: the truth the controller and the leaders write."""
    states = {}
    for topic in topics:
        raw, _ = zk.get(topic_path(topic))
        for p in decode_assignment(topic, raw)[1]:
            path = partition_state_path(topic, p)
            states[(topic, p)] = PartitionState.decode(path, zk.get(path)[0])
    return states


def wait_full_isr(cluster: Cluster, zk: KazooClient, topics: list[str]) -> None:
    """Until every partition of `topics` has a live leader and every broker in its ISR
    (in ZooKeeper), and every broker's Metadata names those leaders (a broker back from a
    pause answers from its old view until its watches catch up)."""
    everyone = sorted(cluster.ids)

    def full() -> tuple[bool, object]:
        states = _zk_states(zk, topics)
        short = {
            f"{t}-{p}": (s.leader, sorted(s.isr))
            for (t, p), s in states.items()
            if sorted(s.isr) != everyone or s.leader not in everyone
        }
        if short:
            return False, f"ZooKeeper: (leader, ISR) {short}"
        leaders = {key: s.leader for key, s in states.items()}
        for b in cluster.brokers:
            seen = _leaders([b], topics)
            if seen != leaders:
                wrong = {f"{t}-{p}": n for (t, p), n in seen.items() if leaders.get((t, p)) != n}
                return False, f"broker {b.broker_id}'s metadata names other leaders: {wrong}"
        return True, None

    _wait("every replica back in the ISR", full)


# ---- the faults ------------------------------------------------------------------------


@dataclass
class Nemesis:
    """The faults, injected from the main thread (see the module's docstring), each once
    every copier is far enough."""

    cluster: Cluster
    copiers: list[CopierProcess]
    seed_chunk: Callable[[int], None]
    topics: list[str]  # every topic whose partitions must stay led and replicated
    output: str
    watcher: Watcher
    zk: KazooClient
    started: float = field(default_factory=time.monotonic)
    events: list[str] = field(default_factory=list)
    faults_done: int = 0
    paused: ClusterBroker | None = None

    def note(self, text: str) -> None:
        self.events.append(f"{time.monotonic() - self.started:6.1f} s  {text}")

    def report(self) -> str:
        return "nemesis:\n" + "\n".join(self.events)

    def run(self) -> None:
        faults = [self.kill_output_leader, self.kill_coordinator, self.pause_coordinator]
        for k, fault in enumerate(faults):
            self.wait_progress(int((k + 0.5) * CHUNK))
            self.seed_chunk(k + 2)
            self.note(f"input chunk {k + 2} written; positions {self.positions()}")
            fault()
            self.faults_done += 1

    def resume_paused(self) -> None:
        if self.paused is not None:  # failed mid-pause: never leave a broker stopped
            self.paused.resume()
            self.paused = None

    def positions(self) -> list[int]:
        return [c.position for c in self.copiers]

    def wait_progress(self, position: int) -> None:
        while min(self.positions()) < position:
            if not self.watcher.running:
                raise AssertionError(f"the copiers stopped at {self.positions()}")
            time.sleep(0.05)

    def live(self) -> list[ClusterBroker]:
        return _live(self.cluster, self.paused)

    def kill_and_restart(
        self, victim: ClusterBroker, moved: Callable[[], tuple[bool, object]]
    ) -> None:
        victim.kill()
        self.note(f"broker {victim.broker_id} killed; positions {self.positions()}")
        self.note(f"{_wait('the move away from the killed broker', moved)}")
        victim.start()  # waits for its registration to expire first
        self.note(f"broker {victim.broker_id} restarted")
        wait_full_isr(self.cluster, self.zk, self.topics)
        self.note("every replica in the ISR")

    def kill_output_leader(self) -> None:
        victim = self.cluster.leader_of(self.output, 0)

        def moved() -> tuple[bool, object]:
            leader = _leaders(self.live(), [self.output]).get((self.output, 0), -1)
            ok = leader not in (-1, victim.broker_id)
            return ok, f"{self.output}-0 led by broker {leader}"

        self.note(f"fault 1: the leader of {self.output}-0 is broker {victim.broker_id}")
        self.kill_and_restart(victim, moved)

    def kill_coordinator(self) -> None:
        txn_id = self.copiers[0].txn_id
        victim = txn_coordinator(self.cluster, txn_id, self.live())
        self.note(f"fault 2: the coordinator of {txn_id} is broker {victim.broker_id}")

        def moved() -> tuple[bool, object]:
            node = txn_coordinator(self.cluster, txn_id, self.live())
            return True, f"{txn_id} coordinated by broker {node.broker_id}"

        self.kill_and_restart(victim, moved)

    def pause_coordinator(self) -> None:
        txn_id = self.copiers[1].txn_id
        victim = txn_coordinator(self.cluster, txn_id, self.live())
        led = sorted(
            f"{t}-{p}"
            for (t, p), leader in _leaders(self.live(), self.topics).items()
            if leader == victim.broker_id
        )
        self.note(
            f"fault 3: the coordinator of {txn_id} is broker {victim.broker_id}, "
            f"leading {', '.join(led)}"
        )
        victim.pause()
        self.paused = victim
        paused_at = time.monotonic()
        self.note(f"broker {victim.broker_id} paused; positions {self.positions()}")
        self.cluster.wait_unregistered([victim.broker_id])  # ZooKeeper expired its session
        self.note(f"broker {victim.broker_id}'s session expired")

        def moved() -> tuple[bool, object]:
            still = sorted(
                f"{t}-{p}"
                for (t, p), leader in _leaders(self.live(), self.topics).items()
                if leader in (-1, victim.broker_id)
            )
            return not still, f"still led by {victim.broker_id} or by none: {still}"

        _wait(f"leaderships moved off the paused broker {victim.broker_id}", moved)
        node = txn_coordinator(self.cluster, txn_id, self.live())
        self.note(f"leaderships moved; {txn_id} coordinated by broker {node.broker_id}")
        # Paused for longer than the session timeout, whatever ZooKeeper's rounding.
        time.sleep(max(0.0, paused_at + PAUSE_MIN_S - time.monotonic()))
        victim.resume()
        self.paused = None
        self.note(f"broker {victim.broker_id} resumed after {time.monotonic() - paused_at:.1f} s")
        wait_full_isr(self.cluster, self.zk, self.topics)
        self.note("every replica in the ISR")


# ---- the copiers -------------------------------------------------------------------------


@dataclass
class Watcher:
    """Watches the copiers from a thread: reads their progress, starts again one that
    exited on its own, fails on a stall or the deadline."""

    cluster: Cluster
    copiers: list[CopierProcess]
    nemesis: Nemesis | None = None
    error: BaseException | None = None
    failures: list[str] = field(default_factory=list)
    # Per copier, each line it printed with when it was read (seconds since the start).
    timelines: dict[str, list[tuple[float, str]]] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def longest_wait(self, c: CopierProcess) -> str:
        """The longest time between two lines of a copier, and the line ending it."""
        times = self.timelines.get(c.name, [])
        gaps = [(b[0] - a[0], b) for a, b in itertools.pairwise(times)]
        if not gaps:
            return f"{c.name}: no lines"
        gap, (at, line) = max(gaps)
        return f"{c.name}: {gap:.1f} s before {line!r} at {at:.1f} s"

    def start(self) -> None:
        for c in self.copiers:
            c.start()
        self._thread = threading.Thread(target=self._run, name="copier-watcher", daemon=True)
        self._thread.start()

    def join(self, timeout: float) -> None:
        assert self._thread is not None
        self._thread.join(timeout)

    def note(self, text: str) -> None:
        if self.nemesis is not None:
            self.nemesis.note(text)

    def _run(self) -> None:
        try:
            self._watch()
        except BaseException as exc:
            self.error = exc

    def _watch(self) -> None:
        deadline = time.monotonic() + RUN_DEADLINE_S
        while not all(c.done for c in self.copiers):
            if self.stop.is_set():
                return
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"unfinished after {RUN_DEADLINE_S:.0f} s: "
                    + "; ".join(f"{c.name} at {c.position}:\n{c.tail()}" for c in self.copiers)
                )
            time.sleep(0.02)
            for c in self.copiers:
                seen = len(c.lines)
                c.pump()
                now = time.monotonic() - self.started
                self.timelines.setdefault(c.name, []).extend((now, x) for x in c.lines[seen:])
                if not c.done and time.monotonic() - c.last_progress > STALL_S:
                    raise AssertionError(
                        f"{c.name} made no progress for {STALL_S:.0f} s: {self.stall_report(c)}"
                    )
                code = c.exited()
                if code is not None and not c.done:
                    # Died on its own (fatal: fenced, say): start a new one, which fences
                    # whatever its predecessor left open.
                    c.reap()
                    self.failures.append(f"{c.name} exited {code}: {c.tail()}")
                    self.note(f"{c.name} exited {code} ({c.lines[-1:]}); started again")
                    c.restarts_after_failure += 1
                    assert c.restarts_after_failure <= 10, "\n\n".join(self.failures)
                    c.start()
                    c.last_progress = time.monotonic()
        for c in self.copiers:
            assert c.reap() == 0, c.tail()

    def stall_report(self, c: CopierProcess) -> str:
        paused = self.nemesis.paused if self.nemesis is not None else None
        try:
            live = _live(self.cluster, paused)
            coordinator = f"broker {txn_coordinator(self.cluster, c.txn_id, live).broker_id}"
        except AssertionError as exc:
            coordinator = str(exc)
        logs = "\n".join(
            f"--- broker {b.broker_id} log:\n{b.log_tail(3000)}" for b in self.cluster.brokers
        )
        return (
            f"{c.name} at {c.position}:\n{c.tail()}\nits stack:\n{c.dump_stack()}\n"
            f"coordinator of {c.txn_id}: {coordinator}\n"
            + (self.nemesis.report() if self.nemesis is not None else "")
            + f"\n{logs}"
        )

    def close(self) -> None:
        self.stop.set()
        if self._thread is not None:
            self._thread.join(30)
        for c in self.copiers:
            c.close()


def _run(cluster: Cluster, tmp: Path) -> tuple[str, str, str, Nemesis]:
    per_partition = CHUNKS * CHUNK
    src = create_topic(cluster.bootstrap, partitions=INPUT_PARTITIONS, replication_factor=3)
    dst = create_topic(cluster.bootstrap, partitions=OUTPUT_PARTITIONS, replication_factor=3)
    group = f"copier-{uuid.uuid4().hex[:8]}"

    def seed_chunk(k: int) -> None:
        if k < CHUNKS:
            _seed(cluster.bootstrap, src, INPUT_PARTITIONS, (k + 1) * CHUNK, first=k * CHUNK)

    seed_chunk(0)
    seed_chunk(1)
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
            "--batch", str(BATCH),
            "--abort-ratio", str(ABORT_RATIO),
            "--call-timeout", str(CALL_TIMEOUT_S),
            "--hung-call-grace", str(HUNG_CALL_GRACE_S),
        ]  # fmt: skip
        copiers.append(CopierProcess(args, per_partition, tmp, f"copier-{part}"))
    watcher = Watcher(cluster, copiers)
    zk = KazooClient(hosts=cluster.zookeeper.connect, timeout=5.0)
    zk.start(timeout=10.0)
    topics = [src, dst, *INTERNAL_TOPICS]
    nemesis = Nemesis(cluster, copiers, seed_chunk, topics, dst, watcher, zk)
    watcher.nemesis = nemesis
    try:
        watcher.start()
        try:
            nemesis.run()
        except BaseException as exc:
            watcher.stop.set()
            watcher.join(30)
            copiers_failed = f"\nthe copiers had failed: {watcher.error}" if watcher.error else ""
            raise AssertionError(
                f"fault injection failed: {exc}\n{nemesis.report()}{copiers_failed}"
            ) from exc
        watcher.join(RUN_DEADLINE_S + 30)
        assert not watcher.running, "the copier watcher did not finish"
        if watcher.error is not None:
            raise AssertionError(f"{watcher.error}\n{nemesis.report()}") from watcher.error
    finally:
        nemesis.resume_paused()
        watcher.close()
        zk.stop()
        zk.close()
    return src, dst, group, nemesis


# ---- the checks --------------------------------------------------------------------------


def _decided_offsets(
    cluster: Cluster, topic: str, partition: int, broker: int = 1
) -> tuple[set[int], set[int]]:
    """(committed, aborted) offsets of the transactional records of a partition, from the
    segment files of `broker` (every replica holds the same bytes by now)."""
    open_txns: dict[int, list[int]] = {}
    committed: set[int] = set()
    aborted: set[int] = set()
    for batch in partition_batches(cluster.broker(broker).data_dir, topic, partition):
        h = batch.header
        if batch.marker is not None:
            offsets = open_txns.pop(h.producer_id, [])
            (committed if batch.marker is ControlType.COMMIT else aborted).update(offsets)
        else:
            assert h.is_transactional, f"{topic}-{partition}: a non-transactional batch {h}"
            assert len(batch.records) == h.last_offset_delta + 1 == h.record_count, h
            open_txns.setdefault(h.producer_id, []).extend(range(h.base_offset, h.next_offset))
    assert not open_txns, f"{topic}-{partition}: undecided transactions {list(open_txns)}"
    return committed, aborted


def _report_run(cluster: Cluster, nemesis: Nemesis, copied_s: float, tmp: Path) -> None:
    """What happened, printed before the checks (so a failing check is shown with it), and
    each copier's lines with the second they were read, in `tmp`."""
    copiers = nemesis.copiers
    for c in copiers:
        timeline = nemesis.watcher.timelines.get(c.name, [])
        (tmp / f"{c.name}.lines").write_text("".join(f"{t:7.2f} {x}\n" for t, x in timeline))
    lines = [line for c in copiers for line in c.lines]
    logs = [b.log for b in cluster.brokers]
    seen = {
        what: sum(log.count(marker) for log in logs)
        for what, marker in (
            ("transactions finished by a new coordinator", "after loading __transaction_state"),
            ("follower truncations", ": truncating from "),
            ("fenced coordinator markers", "transaction_coordinator_fenced"),
        )
    }
    print(
        f"\ncluster copier: {PLAN.records} records copied in {copied_s:.1f} s (cluster start "
        f"included); {sum(x.startswith('COMMITTED') for x in lines)} committed and "
        f"{sum(x.startswith('ABORTED') for x in lines)} aborted transactions, "
        f"{sum(x.startswith('RECOVERED') for x in lines)} recovered errors, "
        f"{sum(c.restarts_after_failure for c in copiers)} copier restarts; in the broker "
        f"logs: {seen}; longest waits: "
        + "; ".join(nemesis.watcher.longest_wait(c) for c in copiers)
        + "\n"
        + "\n".join(nemesis.events)
    )


@pytest.mark.timeout(420)
def test_copiers_copy_exactly_once_through_leader_coordinator_kills_and_a_pause(
    cluster_factory: Callable[..., Cluster], tmp_path: Path
) -> None:
    t0 = time.monotonic()
    cluster = cluster_factory(3, overrides=OVERRIDES)
    src, dst, group, nemesis = _run(cluster, tmp_path)
    copied_s = time.monotonic() - t0
    _report_run(cluster, nemesis, copied_s, tmp_path)
    assert nemesis.faults_done == 3, nemesis.events

    outs = range(OUTPUT_PARTITIONS)
    ends = wait_stable(cluster.bootstrap, dst, outs, timeout=RECOVERY_S)
    out = read_records("confluent", cluster.bootstrap, dst, ends, committed=True, timeout=120)
    _check_output(PLAN, out)
    everything = read_records(
        "confluent", cluster.bootstrap, dst, ends, committed=False, timeout=120
    )
    assert len(everything) > len(out), "no aborted copy in the log: the aborts did not happen"
    offsets = _group_offsets(cluster.bootstrap, group, src, INPUT_PARTITIONS)
    assert offsets == dict.fromkeys(range(INPUT_PARTITIONS), CHUNKS * CHUNK), offsets

    # Every replica holds the same bytes: the leaders' logs, truncated where they diverged.
    for topic, partitions in (
        (src, INPUT_PARTITIONS),
        (dst, OUTPUT_PARTITIONS),
        *((t, INTERNAL_PARTITIONS) for t in INTERNAL_TOPICS),
    ):
        for p in range(partitions):
            wait_replicas_agree(cluster, topic, p)

    # What read_committed returns is exactly the committed transactions' records.
    by_partition: dict[int, set[int]] = {p: set() for p in outs}
    for r in out:
        by_partition[r.partition].add(r.offset)
    aborted_records = 0
    for p in outs:
        committed, aborted = _decided_offsets(cluster, dst, p)
        assert not by_partition[p] & aborted, (
            f"{dst}-{p}: read_committed returned records of aborted transactions at "
            f"{sorted(by_partition[p] & aborted)[:10]}"
        )
        assert by_partition[p] == committed, (
            f"{dst}-{p}: read_committed and the committed transactions on disk differ: "
            f"{sorted(committed - by_partition[p])[:10]} not read, "
            f"{sorted(by_partition[p] - committed)[:10]} read but not committed"
        )
        aborted_records += len(aborted)
    assert aborted_records == len(everything) - len(out)

    print(
        f"checked in {time.monotonic() - t0 - copied_s:.1f} s: output == input, "
        f"{aborted_records} aborted records in the log, none of them read"
    )
