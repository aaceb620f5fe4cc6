"""Client workloads that measure a Kafka-protocol broker (Onceflow or Apache Kafka).

`onceflow bench` runs them against a user's broker and the suite in `benchmarks/`
(`make bench`) runs them against a broker process of its own, so both measure the same
thing. This is client code: confluent-kafka and the standard library only, never the
broker's internals (an import-linter contract in pyproject.toml keeps it so).
"""

from onceflow.bench.latency import MODES, latency_run, percentile
from onceflow.bench.roundtrip import pair_figures, roundtrip_pair, roundtrip_run
from onceflow.bench.stats import figure_table, median_of, medians
from onceflow.bench.workloads import (
    COMMIT_INTERVAL_S,
    KIB,
    BenchError,
    Endpoint,
    Failures,
    client_base,
    consume,
    create_topic,
    kafka_reason,
    produce,
    produce_transactional,
    producer_config,
    send,
    transactional_producer,
)

__all__ = [
    "COMMIT_INTERVAL_S",
    "KIB",
    "MODES",
    "BenchError",
    "Endpoint",
    "Failures",
    "client_base",
    "consume",
    "create_topic",
    "figure_table",
    "kafka_reason",
    "latency_run",
    "median_of",
    "medians",
    "pair_figures",
    "percentile",
    "produce",
    "produce_transactional",
    "producer_config",
    "roundtrip_pair",
    "roundtrip_run",
    "send",
    "transactional_producer",
]
