"""The cluster: acks=all produce on RF=3 (idempotent and transactional) against RF=1, a
consume-transform-produce round trip on RF=3, and failover under a producer.

One cluster, started the way a user starts one: `onceflow cluster --brokers 3` as a
subprocess (ZooKeeper and three brokers on this machine, durable mode, sharing its cores),
with `zookeeper.session.timeout.ms` set. Its `cluster.json` gives each broker's PID, log
and the exact command that starts it again, which is how a broker is killed and restarted
here; the launcher adopts a restarted broker and stops it at the end.

- Produce: the suite's idempotent acks=all workload (`onceflow.bench.produce`, 1 KiB
  values) to a fresh one-partition topic of RF=3 (`min.insync.replicas=2`) and of RF=1, and
  its transactional workload (`produce_transactional`, committing every 100 ms, otherwise
  the same client settings and values) to a fresh RF=3 topic, in turn, on the same cluster.
- Round trip: `onceflow.bench.roundtrip_run` on two fresh RF=3 topics, input and output: a
  timestamped record produced (idempotent, acks=all) at a fixed rate, copied by a
  read_committed consumer and a transactional producer committing the batch of each poll
  with the consumer's offsets, and read by a read_committed consumer of the output. The
  figures are the p50 and p99 from the input's send to the output's read.
- Failover: a producer thread (idempotent, acks=all, 100 B values at a fixed rate,
  `linger.ms=1`) records when each acknowledgement arrives. The partition's leader gets
  kill -9 (or SIGTERM: a controlled shutdown); the figure is read from the acknowledgement
  times around it. After each one the broker is started again with its recorded command
  and the next one waits until the ISR is full again.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from kazoo.client import KazooClient

from benchmarks.common import BROKER_SRC_ENV, metadata_answered
from onceflow.bench import (
    KIB,
    BenchError,
    Failures,
    kafka_reason,
    pair_figures,
    percentile,
    produce,
    produce_transactional,
    producer_config,
    roundtrip_pair,
    send,
    transactional_producer,
)
from onceflow.cli.cluster import CLUSTER_FILE, pid_alive
from onceflow.cluster.zk_server import ZooKeeperError, die_with_parent, require_zookeeper
from onceflow.cluster.znodes import broker_path

BROKERS = 3
MIN_INSYNC = 2
WAIT_S = 60.0  # for a leader, a full ISR, a start, a stop: far above what any takes
ACK_VALUE_BYTES = 100
# After a leader change is seen, acknowledgements must flow again for this long before the
# window closes, so the gap that ends the outage is inside the window.
AFTER_S = 1.0


def zookeeper_missing() -> str | None:
    """Why the section cannot run here (ZooKeeper or java is not installed), or None."""
    try:
        require_zookeeper()
    except ZooKeeperError as exc:
        return str(exc)
    return None


class BenchCluster:
    """`onceflow cluster --brokers N` in a fresh temporary data dir, as a subprocess."""

    def __init__(self, brokers: int, overrides: dict[str, str]) -> None:
        self.dir = tempfile.mkdtemp(prefix="onceflow-bench-cluster-")
        self.brokers = brokers
        self.overrides = dict(overrides)
        self.env = dict(os.environ)
        if os.environ.get(BROKER_SRC_ENV):
            self.env["PYTHONPATH"] = os.path.join(os.environ[BROKER_SRC_ENV], "src")
        self.launcher: subprocess.Popen[str] | None = None
        self.restarted: dict[int, subprocess.Popen[bytes]] = {}  # ours, after a kill or stop
        self.document: dict[str, Any] = {}
        self.bootstrap = ""
        self._admin: AdminClient | None = None

    # ---- the launcher --------------------------------------------------------------------

    def start(self) -> BenchCluster:
        args = [sys.executable, "-m", "onceflow", "cluster", "--brokers", str(self.brokers)]
        args += ["--data-dir", self.dir]
        for key, value in self.overrides.items():
            args += ["--override", f"{key}={value}"]
        with open(os.path.join(self.dir, "launcher.log"), "ab") as log:
            self.launcher = subprocess.Popen(
                args,
                stdout=subprocess.PIPE,
                stderr=log,
                stdin=subprocess.DEVNULL,
                text=True,
                env=self.env,
                preexec_fn=die_with_parent,  # a killed suite leaves no cluster behind
            )
        assert self.launcher.stdout is not None
        # The launcher prints the bootstrap servers once every broker answers, or exits
        # (its own start timeout is 60 s).
        self.bootstrap = self.launcher.stdout.readline().strip()
        if not self.bootstrap:
            raise BenchError(f"onceflow cluster did not start; see {self.dir}/launcher.log")
        with open(os.path.join(self.dir, CLUSTER_FILE)) as f:
            self.document = json.load(f)
        self._admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        self.wait_formed()
        return self

    def close(self, *, remove: bool = True) -> None:
        """SIGTERM the launcher (it stops every broker, ours too, then ZooKeeper); then
        remove the data dir unless told to keep it (its logs, after a failure)."""
        if self.launcher is not None and self.launcher.poll() is None:
            self.launcher.terminate()
            try:
                self.launcher.wait(180)
            except subprocess.TimeoutExpired:
                self.launcher.kill()
                self.launcher.wait(30)
        for proc in self.restarted.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait(30)
        if remove:
            shutil.rmtree(self.dir, ignore_errors=True)

    # ---- brokers -------------------------------------------------------------------------

    def _entry(self, broker_id: int) -> dict[str, Any]:
        for entry in self.document["brokers"]:
            if entry["id"] == broker_id:
                return dict(entry)
        raise KeyError(broker_id)

    def pid(self, broker_id: int) -> int:
        if broker_id in self.restarted:
            return self.restarted[broker_id].pid
        return int(self._entry(broker_id)["pid"])

    def _wait_exit(self, broker_id: int, pid: int, timeout: float) -> None:
        proc = self.restarted.get(broker_id)
        if proc is not None:
            proc.wait(timeout)  # ours to reap
            return
        deadline = time.monotonic() + timeout
        while pid_alive(pid):  # the launcher's child: it reaps it
            if time.monotonic() > deadline:
                raise BenchError(f"broker {broker_id} (pid {pid}) did not exit")
            time.sleep(0.01)

    def kill9(self, broker_id: int) -> None:
        pid = self.pid(broker_id)
        os.kill(pid, signal.SIGKILL)
        self._wait_exit(broker_id, pid, WAIT_S)

    def terminate(self, broker_id: int) -> None:
        """SIGTERM (a controlled shutdown) and wait until the process has exited."""
        pid = self.pid(broker_id)
        os.kill(pid, signal.SIGTERM)
        self._wait_exit(broker_id, pid, WAIT_S)

    def restart(self, broker_id: int) -> None:
        """Start the broker again with its command from cluster.json, once ZooKeeper has
        dropped its old registration (a killed broker's lasts until its session expires),
        and wait until it answers."""
        self.wait_unregistered(broker_id)
        entry = self._entry(broker_id)
        with open(entry["log"], "ab") as log:
            self.restarted[broker_id] = subprocess.Popen(
                entry["command"],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        deadline = time.monotonic() + WAIT_S
        while not metadata_answered(int(entry["port"])):
            if self.restarted[broker_id].poll() is not None or time.monotonic() > deadline:
                raise BenchError(f"broker {broker_id} did not start again; see {entry['log']}")
            time.sleep(0.02)

    def wait_unregistered(self, broker_id: int) -> None:
        zk = KazooClient(hosts=self.document["zookeeper"]["connect"], timeout=10.0)
        zk.start(timeout=10.0)
        try:
            deadline = time.monotonic() + WAIT_S
            while zk.exists(broker_path(broker_id)):
                if time.monotonic() > deadline:
                    raise BenchError(f"broker {broker_id} is still registered in ZooKeeper")
                time.sleep(0.05)
        finally:
            zk.stop()
            zk.close()

    # ---- what the cluster says -----------------------------------------------------------

    @property
    def admin(self) -> AdminClient:
        assert self._admin is not None
        return self._admin

    def wait_formed(self) -> None:
        deadline = time.monotonic() + WAIT_S
        while len(self.admin.list_topics(timeout=10).brokers) < self.brokers:
            if time.monotonic() > deadline:
                raise BenchError("the cluster did not form")
            time.sleep(0.1)

    def partition_state(self, topic: str, partition: int = 0) -> tuple[int, list[int]]:
        """(leader, ISR) of a partition as Metadata answers; leader -1 when none or unknown."""
        try:
            found = self.admin.list_topics(topic, timeout=5).topics.get(topic)
        except KafkaException:
            return -1, []
        if found is None or found.error is not None or partition not in found.partitions:
            return -1, []
        state = found.partitions[partition]
        return int(state.leader), sorted(state.isrs)

    def wait_partition(
        self, topic: str, *, isr_size: int, not_leader: int = -1, partition: int = 0
    ) -> int:
        """Until the partition has a leader other than `not_leader` and `isr_size` replicas
        in sync; returns the leader."""
        deadline = time.monotonic() + WAIT_S
        while True:
            leader, isr = self.partition_state(topic, partition)
            if leader >= 0 and leader != not_leader and len(isr) >= isr_size:
                return leader
            if time.monotonic() > deadline:
                raise BenchError(f"{topic}-{partition}: leader {leader}, ISR {isr}")
            time.sleep(0.05)

    def create_topic(self, topic: str, replication: int) -> None:
        config = {"min.insync.replicas": str(MIN_INSYNC)} if replication >= MIN_INSYNC else {}
        new = NewTopic(topic, num_partitions=1, replication_factor=replication, config=config)
        try:
            self.admin.create_topics([new])[topic].result(60)
        except (KafkaException, TimeoutError) as exc:
            raise BenchError(f"cannot create topic {topic}: {kafka_reason(exc)}") from exc
        self.wait_partition(topic, isr_size=replication)


# ---- produce: RF=3 against RF=1, transactional against idempotent -------------------------


def produce_run(
    cluster: BenchCluster, replication: int, messages: int, *, transactional: bool = False
) -> float:
    """Seconds to produce and acknowledge `messages` 1 KiB values, acks=all, to a new
    one-partition topic of `replication` replicas: idempotent, or in transactions committing
    every 100 ms (the same client settings otherwise)."""
    kind = "txn" if transactional else "idem"
    topic = f"cluster-{kind}-rf{replication}-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, replication)
    if not transactional:
        return produce(cluster.bootstrap, topic, messages, KIB)
    producer = transactional_producer(cluster.bootstrap, f"bench-{topic}")
    return produce_transactional(producer, topic, messages, KIB, partition=0)


def produce_group(cluster: BenchCluster, messages: int, runs: ClusterRuns, index: int) -> None:
    """One group of the produce runs: idempotent and transactional on RF=3, in an order
    that alternates between groups (so neither always runs on the disk the other just
    wrote to), then idempotent on RF=1."""
    rf3 = [(False, runs.rf3_seconds), (True, runs.txn_rf3_seconds)]
    for transactional, seconds in rf3 if index % 2 == 0 else rf3[::-1]:
        seconds.append(produce_run(cluster, BROKERS, messages, transactional=transactional))
    runs.rf1_seconds.append(produce_run(cluster, 1, messages))


# ---- consume-transform-produce ---------------------------------------------------------------


def roundtrip(
    cluster: BenchCluster, rate: int, warmup_seconds: float, seconds: float
) -> dict[str, list[float]]:
    """The consume-transform-produce round trips (seconds) of the plain and of the
    transactional copier, each through two new RF=3 topics."""
    return roundtrip_pair(
        cluster.bootstrap,
        lambda topic: cluster.create_topic(topic, BROKERS),
        rate=rate,
        warmup_seconds=warmup_seconds,
        seconds=seconds,
        prefix="bench-cluster-",
    )


# ---- failover ------------------------------------------------------------------------------


class AckTimes(Failures):
    """A delivery callback that keeps each acknowledgement's arrival time (time.monotonic(),
    read in the callback) and the errors."""

    def __init__(self) -> None:
        super().__init__()
        self.times: list[float] = []

    def __call__(self, err: object, msg: object) -> None:
        if err is None:
            self.times.append(time.monotonic())
        else:
            super().__call__(err, msg)


@dataclass
class AckRecorder:
    """An idempotent acks=all producer sending `rate` records/s from a thread (open loop: the
    schedule does not wait for acknowledgements) and keeping each acknowledgement's arrival
    time (time.monotonic(), read in the delivery callback)."""

    bootstrap: str
    topic: str
    rate: int
    report: AckTimes = field(default_factory=AckTimes)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _error: BaseException | None = None

    def start(self) -> AckRecorder:
        self._thread = threading.Thread(target=self._guarded, daemon=True)
        self._thread.start()
        return self

    def _guarded(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # reported by the main thread
            self._error = exc

    def _run(self) -> None:
        producer = Producer(
            producer_config(
                self.bootstrap,
                # Never give up on a record during an outage: a failed delivery is a
                # failure of the run, not a shorter gap.
                {"linger.ms": 1, "message.timeout.ms": 300_000},
            )
        )
        value = b"v" * ACK_VALUE_BYTES
        interval = 1.0 / self.rate
        due = time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic()
            while due <= now:
                send(producer, self.topic, value, self.report, 0)
                due += interval
            producer.poll(min(interval, max(0.0, due - time.monotonic())))
        if producer.flush(120) != 0:
            raise BenchError("deliveries still pending 120 s after the last record")

    def wait_ack_after(self, moment: float) -> None:
        """Until an acknowledgement has arrived after `moment`."""
        deadline = max(time.monotonic(), moment) + WAIT_S
        acks = self.report.times
        while not acks or acks[-1] <= moment:
            self.check()
            if time.monotonic() > deadline:
                raise BenchError("the producer gets no acknowledgements")
            time.sleep(0.01)

    def window(self, start: float, end: float, *, previous: bool) -> list[float]:
        """The acknowledgement times in [start, end]; with `previous`, the last one before
        `start` first."""
        acks = list(self.report.times)
        inside = [t for t in acks if start <= t <= end]
        if not previous:
            return inside
        before = [t for t in acks if t < start]
        return before[-1:] + inside

    def check(self) -> None:
        if self._error is not None:
            raise self._error
        self.report.check()

    def stop(self) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(180)
        self.check()


def longest_gap(times: list[float]) -> tuple[float, float]:
    """(length, end) of the longest interval between consecutive times."""
    gaps = [(b - a, b) for a, b in itertools.pairwise(times)]
    return max(gaps) if gaps else (0.0, times[-1] if times else 0.0)


def kill_failover(cluster: BenchCluster, work: AckRecorder) -> tuple[float, float]:
    """kill -9 of the partition's leader. Returns the seconds from the kill to the end of
    the longest silence of acknowledgements after it (the first acknowledgement of the new
    leader), and to the moment Metadata first named another leader (polled every 50 ms).
    Acknowledgements that arrive in the first moments after the kill were written by the
    old leader before it died (its responses were in flight); the silence comes after them.
    The broker is started again and the ISR is full again when this returns."""
    leader = cluster.wait_partition(work.topic, isr_size=BROKERS)
    work.wait_ack_after(time.monotonic())
    killed_at = time.monotonic()
    cluster.kill9(leader)
    cluster.wait_partition(work.topic, isr_size=MIN_INSYNC, not_leader=leader)
    elected = time.monotonic()
    work.wait_ack_after(elected + AFTER_S)
    times = [killed_at, *work.window(killed_at, time.monotonic(), previous=False)]
    _length, resumed = longest_gap(times)
    cluster.restart(leader)
    cluster.wait_partition(work.topic, isr_size=BROKERS)
    return resumed - killed_at, elected - killed_at


def controlled_shutdown_gap(cluster: BenchCluster, work: AckRecorder) -> float:
    """SIGTERM of the partition's leader: the longest gap between consecutive
    acknowledgements from the last one before the signal until acknowledgements have flowed
    for a second after the broker exited and the leader moved. The broker is started again
    and the ISR is full again when this returns."""
    leader = cluster.wait_partition(work.topic, isr_size=BROKERS)
    work.wait_ack_after(time.monotonic())
    signalled_at = time.monotonic()
    cluster.terminate(leader)
    cluster.wait_partition(work.topic, isr_size=MIN_INSYNC, not_leader=leader)
    work.wait_ack_after(time.monotonic() + AFTER_S)
    gap, _end = longest_gap(work.window(signalled_at, time.monotonic(), previous=True))
    cluster.restart(leader)
    cluster.wait_partition(work.topic, isr_size=BROKERS)
    return gap


@dataclass
class ClusterRuns:
    rf3_seconds: list[float] = field(default_factory=list)  # idempotent
    rf1_seconds: list[float] = field(default_factory=list)
    txn_rf3_seconds: list[float] = field(default_factory=list)
    ctp_roundtrips: list[float] = field(default_factory=list)  # transactional
    ctp_plain_roundtrips: list[float] = field(default_factory=list)
    steady_gaps: list[float] = field(default_factory=list)
    kill_failovers: list[float] = field(default_factory=list)
    kill_elections: list[float] = field(default_factory=list)  # kill to a new leader named
    shutdown_gaps: list[float] = field(default_factory=list)


def cluster_runs(
    *,
    messages: int,
    groups: int,
    ctp_rate: int,
    ctp_warmup_seconds: float,
    ctp_seconds: float,
    kills: int,
    shutdowns: int,
    session_timeout_ms: int,
    ack_rate: int,
    steady_seconds: float,
) -> ClusterRuns:
    """Everything measured on one 3-broker cluster: the consume-transform-produce round
    trip at `ctp_rate` records/s (`ctp_warmup_seconds` not counted, then `ctp_seconds`), first,
    while the disk is rested and every broker is the one the launcher started; `groups`
    interleaved groups of produce runs of `messages` values (RF=3 idempotent and
    transactional, RF=1); the longest gap between acknowledgements over `steady_seconds`
    with nothing happening (the reference), then `kills` kill -9s and `shutdowns` controlled
    shutdowns of the leader under a producer of `ack_rate` records/s."""
    runs = ClusterRuns()
    cluster = BenchCluster(BROKERS, {"zookeeper.session.timeout.ms": str(session_timeout_ms)})
    try:
        cluster.start()
        pair = roundtrip(cluster, ctp_rate, ctp_warmup_seconds, ctp_seconds)
        runs.ctp_roundtrips, runs.ctp_plain_roundtrips = pair["txn"], pair["plain"]
        for index in range(groups):  # interleaved, so drift touches each run alike
            produce_group(cluster, messages, runs, index)
        topic = f"cluster-failover-{uuid.uuid4().hex[:8]}"
        cluster.create_topic(topic, BROKERS)
        work = AckRecorder(cluster.bootstrap, topic, ack_rate).start()
        try:
            # The reference: the longest gap between acknowledgements with nothing happening.
            work.wait_ack_after(time.monotonic())
            quiet_from = time.monotonic()
            time.sleep(steady_seconds)
            quiet = work.window(quiet_from, time.monotonic(), previous=True)
            runs.steady_gaps.append(longest_gap(quiet)[0])
            for _ in range(kills):
                failover, elected = kill_failover(cluster, work)
                runs.kill_failovers.append(failover)
                runs.kill_elections.append(elected)
            for _ in range(shutdowns):
                runs.shutdown_gaps.append(controlled_shutdown_gap(cluster, work))
        finally:
            work.stop()
    except BaseException:
        with contextlib.suppress(Exception):
            cluster.close(remove=False)
        print(f"the cluster's logs are in {cluster.dir}", file=sys.stderr)
        raise
    cluster.close()
    return runs


def figures(runs: ClusterRuns, messages: int, session_timeout_ms: int) -> dict[str, float]:
    out: dict[str, float] = {}
    mb = messages * KIB / 1e6
    for rf, seconds in ((3, runs.rf3_seconds), (1, runs.rf1_seconds)):
        out[f"cluster_produce_1024B_rf{rf}_MBps"] = mb / statistics.median(seconds)
        out[f"cluster_produce_1024B_rf{rf}_msgps"] = messages / statistics.median(seconds)
    out["cluster_produce_rf3_ratio_to_rf1"] = statistics.median(
        rf1 / rf3 for rf1, rf3 in zip(runs.rf1_seconds, runs.rf3_seconds, strict=True)
    )
    out["cluster_produce_txn_100ms_1024B_rf3_MBps"] = mb / statistics.median(runs.txn_rf3_seconds)
    # As the RF=1 ratio: the median of each group's own ratio of speeds.
    out["cluster_produce_txn_100ms_rf3_ratio_to_idempotent"] = statistics.median(
        idem / txn for idem, txn in zip(runs.rf3_seconds, runs.txn_rf3_seconds, strict=True)
    )
    ordered = sorted(runs.ctp_roundtrips)
    out["cluster_ctp_roundtrip_p50_ms"] = percentile(ordered, 0.50) * 1000
    out["cluster_ctp_roundtrip_p99_ms"] = percentile(ordered, 0.99) * 1000
    if runs.ctp_plain_roundtrips:
        pair = {"plain": runs.ctp_plain_roundtrips, "txn": runs.ctp_roundtrips}
        out.update(pair_figures(pair, "cluster_ctp"))
    out["cluster_zookeeper_session_timeout_s"] = session_timeout_ms / 1000
    if runs.kill_failovers:
        out["cluster_failover_kill9_p50_s"] = statistics.median(runs.kill_failovers)
        out["cluster_failover_kill9_max_s"] = max(runs.kill_failovers)
        out["cluster_failover_kill9_new_leader_p50_s"] = statistics.median(runs.kill_elections)
    if runs.shutdown_gaps:
        out["cluster_controlled_shutdown_ack_gap_p50_s"] = statistics.median(runs.shutdown_gaps)
        out["cluster_controlled_shutdown_ack_gap_max_s"] = max(runs.shutdown_gaps)
    if runs.steady_gaps:
        out["cluster_steady_ack_gap_s"] = statistics.median(runs.steady_gaps)
    return out
