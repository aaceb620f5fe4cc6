"""The benchmark suite runs (tiny sizes), so it cannot rot. No timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# One figure of each kind the smoke run measures; each must exist and be positive.
FIGURES = (
    "produce_1024B_onceflow_MBps",
    "produce_100B_mock_msgps",
    "produce_1024B_ratio_to_mock",
    "produce_txn_100ms_ratio_to_idempotent",
    "consume_read_committed_MBps",
    "participant_produce_1024B_participant_MBps",
    "participant_produce_100B_confluent_msgps",
    "participant_produce_1024B_ratio_to_confluent",
    "participant_produce_100B_columns_msgps",
    "participant_produce_100B_columns_ratio_to_confluent",
    "consume_read_uncommitted_MBps",
    "disk_durable_write_MBps",
    "disk_sustained_write_MBps",
    "produce_1024B_fraction_of_disk",
    "latency_plain_p50_ms",
    "latency_idempotent_p99_ms",
    "latency_transactional_p99.9_ms",
    "ctp_plain_p50_ms",
    "ctp_txn_p99_ms",
    "ctp_txn_to_plain_p50_ratio",
    "scale_partitions_100_MBps",
    "scale_txn_producers_16_recps",
    "scale_txn_size_10000_recps",
    "recovery_2MB_with_snapshot_s",
    "recovery_8MB_without_snapshot_s",
    "recovery_with_snapshot_growth_8MB_to_2MB",
    "security_produce_1024B_sasl_ssl_MBps",
    "security_produce_1024B_sasl_ssl_ratio_to_plaintext",
    "security_produce_1024B_acls_ratio_to_plaintext",
    "security_consume_1024B_sasl_ssl_ratio_to_plaintext",
    "security_tls_decrypt_librdkafka_produce_ms_per_MB",
    "security_tls_decrypt_librdkafka_produce_ratio_to_full_records",
)


def test_benchmark_suite_smoke_run_prints_and_writes_figures() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--smoke"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "produce_1024B_ratio_to_mock" in done.stdout
    results = json.loads((ROOT / "benchmarks" / "results" / "smoke.json").read_text())
    figures = results["figures"]
    assert results["cores"] >= 1
    for name in FIGURES:
        assert figures[name] > 0, name
    # Memory per partition is a difference of two RSS readings: present, but noise at
    # smoke sizes can make it zero or negative.
    assert "broker_memory_per_partition_KiB" in figures
