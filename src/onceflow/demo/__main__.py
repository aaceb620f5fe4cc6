"""`make run`: an exactly-once payments pipeline, a crash in the middle, and the proof.

1. start an embedded Onceflow broker (a subprocess with a temporary data dir), unless
   `--bootstrap-server` points at a broker of your own; with `--brokers N` (N >= 3), a
   cluster instead: ZooKeeper and N brokers through `onceflow cluster`, every topic with
   replication factor 3;
2. generate payment events with a transactional producer, some transactions aborted;
3. run the Spark job (onceflow.demo.job) in its own process;
4. SIGKILL the job's driver in the middle of a micro-batch, and start it again from its
   checkpoints while the generator keeps producing; on a cluster, first kill -9 the broker
   that is the transaction coordinator of the clean payments' sink, in the middle of a
   micro-batch, and start it again some seconds later;
5. check with read_committed consumers that every committed payment appears exactly once,
   that no aborted payment appears anywhere, and that the balances equal the sums computed
   independently from the input.

It prints progress, then a table, and exits non-zero if any check fails.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from onceflow.demo.checks import Report, check_pipeline
from onceflow.demo.generator import generate
from onceflow.demo.job import BALANCES_TOPIC, CLEAN_SINK_ID, CLEAN_TOPIC, PAYMENTS_TOPIC
from onceflow.demo.observer import StableOffsetWatcher, batch_of_output, batches_seen_in_part
from onceflow.retry import Backoff, retry

if TYPE_CHECKING:
    from onceflow.demo.cluster import BrokerKill, DemoCluster

PARTITIONS = {PAYMENTS_TOPIC: 3, CLEAN_TOPIC: 3, BALANCES_TOPIC: 2}
CLUSTER_REPLICATION_FACTOR = 3

# Every broker the demo starts, the embedded one or a cluster's, gets these overrides.
BROKER_OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
    # Two-phase commit (KIP-939): the sink then commits each micro-batch all at once.
    "transaction.two.phase.commit.enable": "true",
    # The demo writes a few MB: it should run on a laptop with less than the default
    # 1 GiB free, where produce would otherwise be refused.
    "onceflow.log.dir.min.free.bytes": str(64 << 20),
}


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    def connect() -> None:
        if proc.poll() is not None:
            raise SystemExit("the embedded broker exited at startup; see its log above")
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()

    try:
        retry(connect, Backoff(0.1), retry_on=OSError, deadline_s=timeout)
    except OSError:
        raise SystemExit("the embedded broker did not start listening in time") from None


def start_broker(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    log = (workdir / "broker.log").open("wb")
    command = [sys.executable, "-m", "onceflow", "serve"]
    command += ["--data-dir", str(workdir / "broker-data"), "--listener", f"127.0.0.1:{port}"]
    for key, value in BROKER_OVERRIDES.items():
        command += ["--override", f"{key}={value}"]
    proc = subprocess.Popen(
        command,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    wait_for_port(port, proc)
    return proc, f"127.0.0.1:{port}"


def create_topics(bootstrap: str, replication_factor: int = -1) -> None:
    """The demo's topics; replication factor -1 is the broker's default."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined]  # no __all__
        AdminClient,
        NewTopic,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    wanted = [
        NewTopic(topic, num_partitions=n, replication_factor=replication_factor)
        for topic, n in PARTITIONS.items()
    ]
    for topic, future in admin.create_topics(wanted).items():
        try:
            future.result(30)
        except Exception as exc:  # an existing topic (a user's broker, a rerun) is fine
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise SystemExit(f"cannot create topic {topic}: {exc}") from exc


def start_job(bootstrap: str, checkpoint: Path, log_path: Path) -> subprocess.Popen[bytes]:
    log = log_path.open("ab")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "onceflow.demo.job",
            "--bootstrap-server",
            bootstrap,
            "--checkpoint",
            str(checkpoint),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def batches(checkpoint: Path, kind: str) -> set[int]:
    folder = checkpoint / "clean" / kind
    if not folder.is_dir():
        return set()
    return {int(p.name) for p in folder.iterdir() if p.name.isdigit()}


def wait_mid_batch(job: subprocess.Popen[bytes], checkpoint: Path, after: int) -> int:
    """Until the clean query has committed `after` micro-batches and runs another one,
    planned but not yet committed; return that batch's id."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if job.poll() is not None:
            raise SystemExit("the Spark job exited on its own; see job.log")
        planned, committed = batches(checkpoint, "offsets"), batches(checkpoint, "commits")
        running = planned - committed
        if len(committed) >= after and running:
            return max(running)
        time.sleep(0.01)
    raise SystemExit("the Spark job made no progress; see job.log")


def kill_mid_batch(job: subprocess.Popen[bytes], checkpoint: Path, after: int) -> int:
    """SIGKILL the driver while a micro-batch is planned but not yet committed."""
    batch = wait_mid_batch(job, checkpoint, after)
    job.send_signal(signal.SIGKILL)
    job.wait()
    return batch


def start_cluster(workdir: Path, brokers: int) -> DemoCluster:
    from onceflow.demo.cluster import DemoCluster, require_cluster_tools

    require_cluster_tools(brokers)
    root = workdir / "cluster"
    say(f"starting ZooKeeper and {brokers} brokers (onceflow cluster, data in {root})")
    cluster = DemoCluster.start(root, brokers, BROKER_OVERRIDES)
    say(f"cluster of {brokers} brokers on {cluster.bootstrap}")
    return cluster


def crash_coordinator(
    cluster: DemoCluster,
    job: subprocess.Popen[bytes],
    checkpoint: Path,
    after: int,
    down_s: float,
) -> BrokerKill:
    """kill -9 the broker that coordinates the transactions of the clean payments' sink
    while a micro-batch is running, leave it down `down_s` seconds (at least until the
    others dropped it), then start it again with the same command."""
    from onceflow.demo.cluster import SESSION_TIMEOUT_MS, BrokerKill

    txn_ids = [f"{CLEAN_SINK_ID}-{p}" for p in range(PARTITIONS[PAYMENTS_TOPIC])]
    coordinators = {txn_id: cluster.coordinator(txn_id) for txn_id in txn_ids}
    victim = coordinators[txn_ids[0]]
    batch = wait_mid_batch(job, checkpoint, after)
    cluster.kill(victim)
    kill = BrokerKill(
        victim, [t for t, b in coordinators.items() if b == victim], batch, time.time()
    )
    say(
        f"kill -9 of broker {victim}, transaction coordinator of {', '.join(kill.coordinates)}, "
        f"in the middle of micro-batch {batch}"
    )
    kill.gone_at = cluster.wait_dropped(victim, SESSION_TIMEOUT_MS / 1000 + 30)
    if kill.gone_at is not None:
        say(f"the cluster dropped broker {victim} {kill.gone_at - kill.killed_at:.1f} s later")
    while time.time() < kill.killed_at + down_s:
        if job.poll() is not None:
            raise SystemExit("the Spark job exited on its own; see job.log")
        time.sleep(0.2)
    kill.restarted_at = time.time()
    cluster.restart(victim)
    kill.serving_at = time.time()
    say(f"restarted broker {victim} with its command from cluster.json; it is serving again")
    return kill


def wait_in_sync(cluster: DemoCluster, timeout: float) -> list[str]:
    """Until every partition's ISR holds all its replicas (the restarted broker caught up);
    the partitions still short of one after the timeout."""
    deadline = time.monotonic() + timeout
    lagging = cluster.under_replicated()
    while lagging and time.monotonic() < deadline:
        time.sleep(1)
        lagging = cluster.under_replicated()
    return lagging


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make run", description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap-server", help="use this broker instead of an embedded one")
    parser.add_argument(
        "--brokers",
        type=int,
        default=1,
        metavar="N",
        help="run on a cluster of N >= 3 brokers (needs ZooKeeper) and kill -9 one of them "
        "mid-batch; 1 (the default) is one embedded broker",
    )
    parser.add_argument(
        "--broker-down-seconds",
        type=float,
        default=15,
        help="with --brokers: how long the killed broker stays down",
    )
    parser.add_argument("--payments", type=int, default=3000)
    parser.add_argument("--kills", type=int, default=1, help="driver SIGKILLs during the run")
    parser.add_argument(
        "--generate-seconds",
        type=float,
        default=40,
        help="spread the payments over this long, so they keep coming across the crash",
    )
    parser.add_argument("--workdir", help="keep broker data, checkpoints and logs here")
    parser.add_argument("--timeout", type=float, default=600, help="seconds for the whole run")
    args = parser.parse_args(argv)
    if args.brokers != 1 and args.brokers < CLUSTER_REPLICATION_FACTOR:
        parser.error(
            f"--brokers {args.brokers}: use 1 (one broker) or at least "
            f"{CLUSTER_REPLICATION_FACTOR}, so that the replicas survive one broker's death"
        )
    if args.brokers > 1 and args.bootstrap_server:
        parser.error("--brokers and --bootstrap-server exclude each other")
    if shutil.which("java") is None:
        print("error: the Spark job needs Java 17 ('java' is not on PATH)", file=sys.stderr)
        return 1
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="onceflow-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    checkpoint = workdir / "checkpoints"
    broker = None
    cluster: DemoCluster | None = None
    broker_kill: BrokerKill | None = None
    job: subprocess.Popen[bytes] | None = None
    crashes_done = threading.Event()
    watcher: StableOffsetWatcher | None = None
    started = time.monotonic()
    started_at = time.time()
    try:
        if args.bootstrap_server:
            bootstrap = args.bootstrap_server
            say(f"using your broker at {bootstrap}")
        elif args.brokers > 1:
            cluster = start_cluster(workdir, args.brokers)
            bootstrap = cluster.bootstrap
        else:
            broker, bootstrap = start_broker(workdir)
            say(f"embedded broker on {bootstrap} (data in {workdir / 'broker-data'})")
        create_topics(bootstrap, CLUSTER_REPLICATION_FACTOR if cluster is not None else -1)
        if not args.bootstrap_server:  # its brokers have two-phase commit on
            watcher = StableOffsetWatcher(bootstrap, CLEAN_TOPIC)
            watcher.start()
        ledger = workdir / "generated.jsonl"
        ledger.unlink(missing_ok=True)
        outcome: dict[str, tuple[int, int]] = {}
        # A fifth of the payments wait until the planned crashes are done, trickling out
        # meanwhile: every crash then finds a micro-batch to interrupt, however slow the
        # machine (a job that had caught up would otherwise plan no batch to kill).
        crashes = args.kills + (1 if args.brokers > 1 else 0)

        def run_generator() -> None:
            transactions = max(1, args.payments // 50)
            pause = args.generate_seconds / transactions
            outcome["counts"] = generate(
                bootstrap,
                PAYMENTS_TOPIC,
                args.payments,
                ledger,
                pause_s=pause,
                reserve=args.payments // 5 if crashes else 0,
                release=crashes_done,
            )

        generator = threading.Thread(target=run_generator, name="generator", daemon=True)
        generator.start()
        say(f"generating {args.payments} payments in transactions, some aborted on purpose")
        job = start_job(bootstrap, checkpoint, workdir / "job.log")
        say("Spark job started (local[2,4]); waiting for its first micro-batches")
        first_kill_after = 2
        if cluster is not None:
            broker_kill = crash_coordinator(
                cluster, job, checkpoint, after=2, down_s=args.broker_down_seconds
            )
            first_kill_after = len(batches(checkpoint, "commits")) + 1
        for kill in range(args.kills):
            batch = kill_mid_batch(job, checkpoint, after=first_kill_after + 2 * kill)
            say(f"SIGKILLed the driver in the middle of micro-batch {batch}")
            job = start_job(bootstrap, checkpoint, workdir / "job.log")
            say("restarted the job from its checkpoints")
        crashes_done.set()
        generator.join(args.timeout)
        if "counts" not in outcome:
            raise SystemExit("the generator did not finish")
        committed, aborted = outcome["counts"]
        say(f"generator done: {committed} payments committed, {aborted} aborted")
        report = wait_and_check(bootstrap, ledger, job, started + args.timeout)
        if watcher is not None:
            watcher.stop.set()
            watcher.join(30)
            check_micro_batches_whole(report, bootstrap, checkpoint, watcher)
        if cluster is not None and broker_kill is not None:
            report.events.append(broker_kill.describe(started_at))
            lagging = wait_in_sync(cluster, 60)
            report.add("partitions with a replica out of sync", 0, len(lagging))
            if lagging:
                say(f"replicas out of sync at the end: {', '.join(lagging[:10])}")
    finally:
        crashes_done.set()
        if job is not None and job.poll() is None:
            job.send_signal(signal.SIGTERM)
            try:
                job.wait(60)
            except subprocess.TimeoutExpired:
                job.kill()
        if broker is not None:
            broker.send_signal(signal.SIGTERM)
            broker.wait(60)
        if cluster is not None:
            cluster.stop()
    print(report.table())
    say(f"finished in {time.monotonic() - started:.0f} s; files in {workdir}")
    return 0 if report.passed else 1


def check_micro_batches_whole(
    report: Report, bootstrap: str, checkpoint: Path, watcher: StableOffsetWatcher
) -> None:
    """The report's row for per-batch atomicity: no look of the watcher showed part of a
    micro-batch of the clean query."""
    from onceflow.spark.batch_commit import read_decision
    from onceflow.spark.ledger import DEFAULT_LEDGER_TOPIC

    decision = read_decision(
        {"bootstrap.servers": bootstrap}, DEFAULT_LEDGER_TOPIC, CLEAN_SINK_ID, 30
    )
    report.add("clean sink commits per micro-batch", "yes", "yes" if decision else "no")
    batch_of = batch_of_output(bootstrap, checkpoint, PAYMENTS_TOPIC, CLEAN_TOPIC)
    seen_in_part = batches_seen_in_part(watcher.looks, batch_of)
    report.add("micro-batches seen in part by a reader", 0, len(seen_in_part))
    report.events.append(
        f"a read_committed reader looked {len(watcher.looks)} times at the clean topic "
        f"while {len(set(batch_of.values()))} micro-batches were committed"
    )
    for line in seen_in_part[:5]:
        say(f"seen in part: {line}")


def wait_and_check(
    bootstrap: str, ledger: Path, job: subprocess.Popen[bytes], deadline: float
) -> Report:
    """Let the job catch up, then check; while outputs are still short, keep waiting."""
    report = check_pipeline(bootstrap, ledger)
    while not report.caught_up and time.monotonic() < deadline:
        if job.poll() is not None:
            say("the Spark job exited unexpectedly; see job.log")
            break
        time.sleep(2)
        report = check_pipeline(bootstrap, ledger)
        say(f"waiting for the job: {report.progress}")
    return report


if __name__ == "__main__":
    sys.exit(main())
