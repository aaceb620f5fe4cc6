"""The Prometheus endpoint of a real broker process (`onceflow.metrics.listener`), scraped
the way Prometheus scrapes it and parsed with prometheus_client's own parser: an open
transaction shows as LSO lag and goes away when it commits, aborts are counted by reason,
a consumer group's lag appears, the Grafana dashboard and the README name only metrics the
broker exposes, and without the key the broker listens on nothing but its Kafka port.
"""

from __future__ import annotations

import json
import re
import socket
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.broker import BrokerProcess, BrokerStartError, free_port
from tests.helpers.clients import consumer, create_topic, produce_and_confirm, producer
from tests.helpers.txn import (
    TXN_BROKER_OVERRIDES,
    TxnProducer,
    make_txn_producer,
    wait_for,
)
from tests.helpers.txn import producers as producers  # the fixture

KEY = "onceflow.metrics.listener"
ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "grafana" / "onceflow-dashboard.json"
README = ROOT / "README.md"

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Scrape:
    """One scrape: every sample by (name, labels), and every name a query may use."""

    samples: dict[tuple[str, Labels], float]
    families: dict[str, str]  # family name -> type

    def value(self, name: str, default: float | None = None, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        if key not in self.samples:
            if default is not None:
                return default
            raise AssertionError(f"no sample {name}{labels} in the scrape")
        return self.samples[key]

    @property
    def queryable_names(self) -> set[str]:
        """The names PromQL can select: samples, and for families without samples yet the
        names their type implies (a counter's _total, a histogram's _bucket/_sum/_count)."""
        names = {name for name, _ in self.samples}
        for name, kind in self.families.items():
            if kind == "counter":
                names.add(f"{name}_total")
            elif kind == "histogram":
                names.update(f"{name}{suffix}" for suffix in ("_bucket", "_sum", "_count"))
            else:
                names.add(name)
        return names


def scrape(url: str, timeout: float = 20.0) -> Scrape:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10) as answer:
                assert answer.status == 200
                assert answer.headers["Content-Type"].startswith("text/plain; version=0.0.4")
                text = answer.read().decode()
            break
        except (ConnectionError, urllib.error.URLError):
            if time.monotonic() > deadline:  # the endpoint starts just after the Kafka port
                raise
            time.sleep(0.05)
    samples: dict[tuple[str, Labels], float] = {}
    families: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        families[family.name] = family.type
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return Scrape(samples, families)


@dataclass
class MetricsBroker:
    process: BrokerProcess
    metrics_port: int

    @property
    def bootstrap(self) -> str:
        return self.process.bootstrap

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def scrape(self) -> Scrape:
        return scrape(self.url)


@pytest.fixture(scope="module")
def _metrics_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MetricsBroker]:
    port = free_port()
    b = BrokerProcess(
        tmp_path_factory.mktemp("metrics") / "data",
        {**TXN_BROKER_OVERRIDES, KEY: f"127.0.0.1:{port}"},
    )
    b.start()
    try:
        yield MetricsBroker(b, port)
        assert b.stop() == 0, f"unclean broker shutdown; its log:\n{b.log_tail()}"
    finally:
        b.kill()


@pytest.fixture
def mb(_metrics_broker: MetricsBroker) -> Iterator[MetricsBroker]:
    """One broker with metrics per module; each test fails if it logged an internal error."""
    mark = _metrics_broker.process.log_size()
    yield _metrics_broker
    errors = _metrics_broker.process.internal_errors(mark)
    assert not errors, "the broker logged internal errors:\n" + "\n---\n".join(errors[:5])


def _txn_producer(
    mb: MetricsBroker, made: list[TxnProducer], txn_id: str, timeout_ms: int | None = None
) -> TxnProducer:
    p = make_txn_producer("confluent", mb.bootstrap, txn_id, timeout_ms)
    made.append(p)
    p.init()
    return p


def _txn_id(tag: str) -> str:
    return f"{tag}-{uuid.uuid4().hex[:8]}"


def scrape_until(mb: MetricsBroker, condition: Callable[[Scrape], bool], what: str) -> Scrape:
    """Scrape until `condition` holds (a deadline, never a timing assertion)."""

    def attempt() -> Scrape | None:
        s = mb.scrape()
        return s if condition(s) else None

    return wait_for(attempt, what=what)


# ---- transactions and the last stable offset ---------------------------------------------


def test_an_open_transaction_shows_lso_lag_until_it_commits(
    mb: MetricsBroker, producers: list[TxnProducer]
) -> None:
    topic = create_topic(mb.bootstrap, partitions=2)
    before = mb.scrape()
    produces_before = before.value("onceflow_requests_total", 0, api="Produce")
    commits_before = before.value("onceflow_transaction_commits_total")
    markers_before = before.value("onceflow_transaction_markers_written_total", type="commit")
    completed_before = before.value("onceflow_transactions", state="CompleteCommit")

    p = _txn_producer(mb, producers, _txn_id("lag"))
    p.begin()
    for i in range(10):
        p.send(topic, 0, f"open-{i}".encode())
    p.flush()  # acknowledged: on disk, below the high watermark, not yet committed

    part = {"topic": topic, "partition": "0"}
    m = scrape_until(
        mb,
        lambda s: s.value("onceflow_partition_lso_lag_records", **part) > 0,
        "the open transaction's LSO lag",
    )
    assert m.value("onceflow_partition_high_watermark", **part) == 10
    assert m.value("onceflow_partition_log_end_offset", **part) == 10
    assert m.value("onceflow_partition_last_stable_offset", **part) == 0
    assert m.value("onceflow_partition_lso_lag_records", **part) == 10
    assert m.value("onceflow_partition_lso_lag_seconds", **part) >= 0
    assert m.value("onceflow_partition_open_transactions", **part) == 1
    assert m.value("onceflow_partition_active_producer_ids", **part) == 1
    assert m.value("onceflow_partition_size_bytes", **part) > 0
    assert m.value("onceflow_partition_is_leader", **part) == 1
    # The other partition of the topic holds nothing back.
    other = {"topic": topic, "partition": "1"}
    assert m.value("onceflow_partition_lso_lag_records", **other) == 0
    assert m.value("onceflow_partition_open_transactions", **other) == 0
    assert m.value("onceflow_transactions", state="Ongoing") == 1
    assert m.value("onceflow_transaction_oldest_open_seconds") >= 0
    assert m.value("onceflow_requests_total", api="Produce") > produces_before
    assert m.value("onceflow_requests_total", api="AddPartitionsToTxn") >= 1
    assert m.value("onceflow_request_seconds_count", api="Produce") > produces_before

    p.commit()

    m = scrape_until(
        mb,
        lambda s: s.value("onceflow_transactions", state="CompleteCommit") == completed_before + 1,
        "the transaction to complete",
    )
    assert m.value("onceflow_partition_lso_lag_records", **part) == 0
    assert m.value("onceflow_partition_lso_lag_seconds", **part) == 0
    assert m.value("onceflow_partition_open_transactions", **part) == 0
    assert m.value("onceflow_partition_last_stable_offset", **part) == 11  # + the marker
    assert m.value("onceflow_partition_high_watermark", **part) == 11
    assert m.value("onceflow_transactions", state="Ongoing") == 0
    assert m.value("onceflow_transactions", state="PrepareCommit") == 0
    assert m.value("onceflow_transaction_oldest_open_seconds") == 0
    assert m.value("onceflow_transaction_commits_total") == commits_before + 1
    markers = m.value("onceflow_transaction_markers_written_total", type="commit")
    assert markers == markers_before + 1  # one partition written to


def test_aborts_are_counted_by_reason(mb: MetricsBroker, producers: list[TxnProducer]) -> None:
    topic = create_topic(mb.bootstrap)
    before = mb.scrape()

    def aborts(s: Scrape, reason: str) -> float:
        return s.value("onceflow_transaction_aborts_total", reason=reason) - before.value(
            "onceflow_transaction_aborts_total", reason=reason
        )

    # The client aborts.
    client = _txn_producer(mb, producers, _txn_id("client"))
    client.begin()
    client.send(topic, 0, b"aborted")
    client.flush()
    client.abort()
    # A new instance with the same transactional id fences an open transaction.
    txn_id = _txn_id("fenced")
    zombie = _txn_producer(mb, producers, txn_id)
    zombie.begin()
    zombie.send(topic, 0, b"zombie")
    zombie.flush()
    _txn_producer(mb, producers, txn_id)
    # Nobody ends this one: the coordinator aborts it at its timeout.
    stalled = _txn_producer(mb, producers, _txn_id("stalled"), timeout_ms=2000)
    stalled.begin()
    stalled.send(topic, 0, b"stalled")
    stalled.flush()

    m = scrape_until(mb, lambda s: aborts(s, "timeout") >= 1, "the timed-out transaction's abort")
    assert (aborts(m, "client"), aborts(m, "fencing"), aborts(m, "timeout")) == (1, 1, 1)
    assert m.value("onceflow_transaction_commits_total") == before.value(
        "onceflow_transaction_commits_total"
    )
    m = scrape_until(
        mb,
        lambda s: s.value("onceflow_transactions", state="PrepareAbort") == 0,
        "the aborts' markers",
    )
    written = m.value("onceflow_transaction_markers_written_total", type="abort")
    assert written - before.value("onceflow_transaction_markers_written_total", type="abort") == 3
    part = {"topic": topic, "partition": "0"}
    assert m.value("onceflow_partition_lso_lag_records", **part) == 0
    assert m.value("onceflow_partition_open_transactions", **part) == 0


# ---- consumer groups ---------------------------------------------------------------------


def test_a_consumer_groups_members_committed_offset_and_lag(mb: MetricsBroker) -> None:
    topic = create_topic(mb.bootstrap)
    p = producer(mb.bootstrap)
    delivered = produce_and_confirm(p, topic, [(0, None, b"x%d" % i, None) for i in range(10)])
    assert not delivered.errors
    group = f"metrics-{uuid.uuid4().hex[:8]}"
    c = consumer(mb.bootstrap, group)
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        while not c.assignment():
            assert time.monotonic() < deadline, "the consumer was never assigned its partition"
            c.poll(0.2)
        c.commit(offsets=[TopicPartition(topic, 0, 4)], asynchronous=False)
        labels = {"group": group, "topic": topic, "partition": "0"}
        m = scrape_until(
            mb, lambda s: s.value("onceflow_group_lag", -1, **labels) >= 0, "the group's lag"
        )
        assert m.value("onceflow_group_committed_offset", **labels) == 4
        assert m.value("onceflow_group_lag", **labels) == 6  # high watermark 10 - 4
        assert m.value("onceflow_group_members", group=group) == 1
    finally:
        c.close()
    m = scrape_until(
        mb, lambda s: s.value("onceflow_group_members", group=group) == 0, "the member to leave"
    )
    assert m.value("onceflow_group_lag", **labels) == 6


# ---- the dashboard and the README cannot rot ---------------------------------------------


def _dashboard_queries(dashboard: dict[str, object]) -> list[str]:
    queries: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("expr", "definition", "query") and isinstance(value, str):
                    queries.append(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(dashboard)
    return queries


def test_the_dashboard_queries_only_metrics_the_broker_exposes(mb: MetricsBroker) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    queries = _dashboard_queries(dashboard)
    used = {name for q in queries for name in re.findall(r"\bonceflow_[a-z0-9_]+", q)}
    for wanted in (
        "onceflow_partition_lso_lag_records",
        "onceflow_partition_lso_lag_seconds",
        "onceflow_transactions",
        "onceflow_transaction_oldest_open_seconds",
        "onceflow_requests_total",
        "onceflow_request_seconds_bucket",
        "onceflow_fsync_seconds_bucket",
        "onceflow_under_replicated_partitions",
    ):
        assert wanted in used, f"the dashboard has no panel on {wanted}"
    exposed = mb.scrape().queryable_names
    missing = sorted(used - exposed)
    assert not missing, f"the dashboard queries metrics the broker does not expose: {missing}"
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]


def test_the_readme_documents_every_metric_and_no_other(mb: MetricsBroker) -> None:
    text = README.read_text()
    section = text.split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `(onceflow_[a-z0-9_]+)`", section, re.MULTILINE))
    families = mb.scrape().families
    exposed = {
        f"{name}_total" if kind == "counter" else name
        for name, kind in families.items()
        if name.startswith("onceflow_")  # process_* are prometheus_client's own
    }
    missing, unknown = sorted(exposed - documented), sorted(documented - exposed)
    assert not missing, f"metrics missing from the README's table: {missing}"
    assert not unknown, f"the README documents metrics that do not exist: {unknown}"


# ---- off by default, and a clear error when the port is taken ------------------------------


def _listening_ports(pid: int) -> set[int]:
    """TCP ports a process listens on, from /proc (its sockets' inodes in LISTEN state)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink()
        except OSError:
            continue
        match = re.fullmatch(r"socket:\[(\d+)\]", str(target))
        if match:
            inodes.add(match[1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def test_without_the_key_the_broker_listens_on_its_kafka_port_only(
    broker: BrokerProcess, mb: MetricsBroker
) -> None:
    assert broker.pid is not None and mb.process.pid is not None
    assert _listening_ports(broker.pid) == {broker.port}
    # The same look finds the metrics port of a broker that has the key.
    assert _listening_ports(mb.process.pid) == {mb.process.port, mb.metrics_port}
    assert "metrics" not in broker.log.lower()


def test_a_taken_metrics_port_stops_the_start_with_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        b = BrokerProcess(tmp_path / "data", {KEY: f"127.0.0.1:{port}"})
        try:
            with pytest.raises(BrokerStartError):
                b.start()
            assert b.proc is not None and b.proc.wait(10) == 1
            assert f"cannot listen for metrics on 127.0.0.1:{port} ({KEY})" in b.log
            assert "Traceback" not in b.log
        finally:
            b.close()
