"""`onceflow bench` as a user runs it, `python -m onceflow bench ...`, against a broker process.

Tiny sizes: the point is that every figure is measured and named, that the run removes the
topics it made (after a failure too), and that failures are one line with exit code 1.
No timing is asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.broker import BrokerProcess, free_port
from tests.helpers.clients import admin_client

TINY = ["--messages", "500", "--repeat", "1", "--latency-rate", "200", "--latency-seconds", "0.3"]
FIGURES = (
    "produce_1024B_MBps",
    "produce_1024B_msgps",
    "produce_txn_100ms_1024B_MBps",
    "produce_txn_100ms_ratio_to_idempotent",
    "consume_read_uncommitted_MBps",
    "consume_read_committed_MBps",
    "consume_committed_ratio_to_uncommitted",
    "consume_committed_ratio_to_produce",
    *(
        f"latency_{mode}_{q}_ms"
        for mode in ("plain", "idempotent", "transactional")
        for q in ("p50", "p99", "p99.9")
    ),
)


def bench(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "onceflow", "bench", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def bench_topics(bootstrap: str, settle_s: float = 10) -> list[str]:
    """Topics a bench run made that are still there, after deletions have had `settle_s` to
    land (the broker may answer DeleteTopics before Metadata stops showing the topic)."""
    admin = admin_client(bootstrap)
    deadline = time.monotonic() + settle_s
    while True:
        names = [t for t in admin.list_topics(timeout=10).topics if t.startswith("onceflow-bench-")]
        if not names or time.monotonic() > deadline:
            return names
        time.sleep(0.1)


def test_bench_writes_every_figure_and_deletes_its_topics(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    out = tmp_path / "bench.json"
    done = bench("--bootstrap-server", broker.bootstrap, *TINY, "--json", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(out.read_text())
    assert results["bootstrap"] == broker.bootstrap
    assert (results["repeat"], results["messages"]) == (1, 500)
    assert results["cores"] >= 1
    for name in FIGURES:
        assert results["figures"][name] > 0, name
    assert set(results["figures"]) == set(FIGURES)
    assert "median of 1" in done.stdout
    for name in FIGURES:
        assert name in done.stdout
    assert "Traceback" not in done.stderr
    assert bench_topics(broker.bootstrap) == []


def test_bench_only_consume_still_writes_the_topic_it_reads(broker: BrokerProcess) -> None:
    done = bench("--bootstrap-server", broker.bootstrap, *TINY, "--only", "consume")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "consume_read_committed_MBps" in done.stdout
    assert "produce_1024B_MBps" not in done.stdout
    assert bench_topics(broker.bootstrap) == []


def test_bench_unreachable_bootstrap_is_one_line() -> None:
    done = bench("--bootstrap-server", f"127.0.0.1:{free_port()}", *TINY, timeout=30)
    assert done.returncode == 1
    assert done.stderr.startswith("onceflow: error: cannot connect to any bootstrap server")
    assert done.stderr.count("\n") == 1
    assert done.stdout == ""


@pytest.mark.broker_overrides({"message.max.bytes": "20000"})
def test_bench_failed_delivery_is_one_line_and_cleans_up(broker: BrokerProcess) -> None:
    # librdkafka accepts 30,000-byte values; the broker refuses every batch.
    done = bench(
        "--bootstrap-server", broker.bootstrap, *TINY, "--value-bytes", "30000", timeout=60
    )
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    assert len(errors) == 1, done.stderr
    assert errors[0].startswith("onceflow: error: idempotent produce:")
    assert "deliveries failed" in errors[0]
    assert "Traceback" not in done.stderr
    assert bench_topics(broker.bootstrap) == []


@pytest.mark.broker_overrides({"delete.topic.enable": "false"})
def test_bench_refused_deletion_is_a_warning(broker: BrokerProcess) -> None:
    done = bench("--bootstrap-server", broker.bootstrap, *TINY, "--only", "produce")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "produce_1024B_MBps" in done.stdout
    warning = [line for line in done.stderr.splitlines() if "warning" in line]
    assert len(warning) == 1 and "topics not deleted" in warning[0], done.stderr
    assert len(bench_topics(broker.bootstrap, settle_s=0)) == 1  # the produce topic stays
