"""`make run-orders`: an order service writing orders to a database and "order created"
events to a topic through one DualWriter, killed -9 at random points while the broker is
killed -9 and restarted; at the end every committed order has exactly one event and no
event lacks an order, and the table it prints says so.

1. start an embedded Onceflow broker with two-phase commit on (or use --bootstrap-server);
   the database is a throwaway PostgreSQL server when PostgreSQL is installed (Debian's
   `postgresql`), SQLite in the work directory otherwise, or what --dsn names;
2. each round starts the service (onceflow.demo.orders_service) and kills it: at an exact
   step of a unit (a fail point after the Kafka prepare, after the database commit, after
   the Kafka commit or after the completion) or by kill -9 from outside at a random time;
   every few rounds the broker is killed -9 under the running service and restarted, and
   the demo's own PostgreSQL server crashes (stop -m immediate) and restarts;
3. the next start of the service recovers what the last one left; a last recovery ends
   the run, and the orders table and the topic (read_committed) are compared.

It exits non-zero if any check fails.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, no __all__
    AdminClient,
    NewTopic,
)

from onceflow.demo.checks import Report, read_committed
from onceflow.demo.orders_service import FAILPOINT_ENV, SETTINGS
from onceflow.demo.postgres import PostgresServer, postgres_bin
from onceflow.dualwrite import DualWriter
from onceflow.dualwrite.database import Database

TOPIC = "order-events"
TXN_ID = "order-service-0"
STEPS = [
    "dualwrite.after_prepare",
    "dualwrite.after_db_commit",
    "dualwrite.after_kafka_commit",
    "dualwrite.after_complete",
]
KILLED = {"broker": "kill -9 of the broker", "database": "PostgreSQL crash and restart"}
BROKER_OVERRIDES = {
    "transaction.two.phase.commit.enable": "true",
    "onceflow.log.dir.min.free.bytes": str(64 << 20),
}


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


class Broker:
    """The embedded broker: a subprocess on a fixed port and data dir, so a restart keeps
    both."""

    def __init__(self, workdir: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        command = [sys.executable, "-m", "onceflow", "serve", "--data-dir"]
        command += [str(self.workdir / "broker-data"), "--listener", self.bootstrap]
        for key, value in BROKER_OVERRIDES.items():
            command += ["--override", f"{key}={value}"]
        with (self.workdir / "broker.log").open("ab") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"the broker exited; see {self.workdir / 'broker.log'}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.1)
        raise SystemExit("the broker did not start listening in time")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


def create_topic(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    if TOPIC not in admin.list_topics(timeout=10).topics:
        admin.create_topics([NewTopic(TOPIC, 3, 1)])[TOPIC].result(30)


def run_service(
    dsn: str, bootstrap: str, log: Path, failpoint: str = ""
) -> subprocess.Popen[bytes]:
    env = dict(__import__("os").environ)
    if failpoint:
        env[FAILPOINT_ENV] = failpoint
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "onceflow.demo.orders_service", dsn, bootstrap, TXN_ID, TOPIC],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )


def one_round(
    n: int, args: argparse.Namespace, rng: random.Random, bootstrap: str,
    broker: Broker | None, log: Path, kills: Counter[str], pg: PostgresServer | None,
) -> None:  # fmt: skip
    """Start the service and kill it, at a fail point or from outside; maybe the broker."""
    if rng.random() < 0.6:
        step = rng.choice(STEPS)
        service = run_service(args.dsn, bootstrap, log, f"{step}:{rng.randint(3, 40)}")
        how = f"fail point {step}"
    else:
        service = run_service(args.dsn, bootstrap, log)
        step, how = "outside", "kill -9 from outside"
    broker_kill = broker is not None and args.broker_kill_every and n % args.broker_kill_every == 0
    if broker_kill and broker is not None:
        time.sleep(rng.uniform(1.0, 2.0))
        say(f"round {n}: kill -9 of the broker under the running service")
        broker.kill()
        kills["broker"] += 1
        time.sleep(rng.uniform(0.5, 1.5))
        broker.start()
    every = args.database_crash_every
    if pg is not None and every and n % every == every - 1:
        time.sleep(rng.uniform(1.0, 2.0))
        say(f"round {n}: PostgreSQL crashes (stop -m immediate) under the running service")
        pg.restart("immediate")
        kills["database"] += 1
    try:
        service.wait(timeout=rng.uniform(1.5, 3.0) if step == "outside" else 60)
    except subprocess.TimeoutExpired:
        service.kill()
        service.wait()
    kills[step.removeprefix("dualwrite.")] += 1
    say(f"round {n}: order service killed ({how})")


def check(dsn: str, bootstrap: str, kills: Counter[str], recoveries: Counter[str]) -> Report:
    db = Database(dsn)
    try:
        db.begin()
        orders = {str(r[0]) for r in db.execute("SELECT id FROM orders").fetchall()}
        db.commit()
    finally:
        db.close()
    events = Counter(json.loads(value)["order"] for _, value in read_committed(bootstrap, TOPIC))
    report = Report()
    report.events = [
        f"{KILLED.get(k, f'service killed: {k}')} x{v}" for k, v in sorted(kills.items())
    ]
    report.events += [
        f"recovery found {'nothing open' if k == 'none' else k} x{v}"
        for k, v in sorted(recoveries.items())
    ]
    report.add("orders committed", len(orders), len(orders), ok=len(orders) > 0)
    report.add("events committed", len(orders), sum(events.values()))
    report.add("orders with exactly one event", len(orders), sum(events[o] == 1 for o in orders))
    report.add("orders without an event", 0, sum(o not in events for o in orders))
    report.add("orders with two events or more", 0, sum(events[o] > 1 for o in orders))
    report.add("events without an order", 0, sum(o not in orders for o in events))
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m onceflow.demo.orders", description=__doc__)
    parser.add_argument("--dsn", help="the orders database (default: see --database)")
    parser.add_argument(
        "--database",
        choices=("auto", "postgresql", "sqlite"),
        default="auto",
        help="without --dsn: a throwaway PostgreSQL server, or SQLite in the work dir "
        "(auto: PostgreSQL if installed)",
    )
    parser.add_argument(
        "--database-crash-every",
        type=int,
        default=5,
        help="crash the demo's own PostgreSQL server every N rounds (0: never)",
    )
    parser.add_argument("--bootstrap-server", help="use this broker instead of an embedded one")
    parser.add_argument("--rounds", type=int, default=12, help="service kills (default 12)")
    parser.add_argument(
        "--broker-kill-every", type=int, default=4, help="kill the broker every N rounds"
    )
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--workdir", help="keep the logs and data here")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="onceflow-orders-"))
    workdir.mkdir(parents=True, exist_ok=True)
    pg: PostgresServer | None = None
    if args.dsn is None:
        use_pg = args.database == "postgresql" or (args.database == "auto" and postgres_bin())
        if use_pg:
            pg = PostgresServer().start()
            args.dsn = pg.dsn
        else:
            args.dsn = f"sqlite:///{workdir / 'orders.db'}"
    broker = None if args.bootstrap_server else Broker(workdir)
    kills: Counter[str] = Counter()
    try:
        if broker is not None:
            broker.start()
        bootstrap = args.bootstrap_server or (broker.bootstrap if broker else "")
        create_topic(bootstrap)
        say(f"orders in {Database(args.dsn).safe_dsn}, events in {TOPIC} at {bootstrap}")
        log = workdir / "service.log"
        for n in range(1, args.rounds + 1):
            one_round(n, args, rng, bootstrap, broker, log, kills, pg)
        say("last recovery: a writer of the service's id takes over")
        with DualWriter(args.dsn, bootstrap, TXN_ID, recovery_interval_s=None, **SETTINGS) as w:
            last = w.last_recovery
        lines = log.read_text(errors="replace").splitlines()
        recoveries = Counter(
            line.split(": ", 1)[1] for line in lines if line.startswith("recovered: ")
        )
        recoveries[last] += 1
        report = check(args.dsn, bootstrap, kills, recoveries)
    finally:
        if broker is not None:
            broker.stop()
        if pg is not None:
            pg.close()
    print(report.table())
    if args.workdir is None and report.passed:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        print(f"logs and data in {workdir}")
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
