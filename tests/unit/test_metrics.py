"""Metrics pieces without a broker process: the onceflow.metrics.listener key, API and error
names, errors found in responses, the LSO lag in seconds, and the /metrics HTTP endpoint."""

from __future__ import annotations

import asyncio
import datetime
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.parser import text_string_to_metric_families

from onceflow.broker.broker import Broker
from onceflow.broker.metrics import BrokerMetrics, Buckets, api_name, response_errors
from onceflow.broker.metrics_http import start_metrics_server
from onceflow.broker.metrics_state import lso_lag_seconds
from onceflow.broker.responses import RawBody
from onceflow.clock import ManualClock
from onceflow.config import (
    BrokerConfig,
    ConfigError,
    Listener,
    describe_broker_config,
    load_broker_config,
)
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import build, nested, response_type
from onceflow.records.batch import validate_produced_batches
from onceflow.records.builder import build_batch
from onceflow.storage.fs import SimFileSystem
from onceflow.storage.partition_log import LogConfig, PartitionLog
from onceflow.storage.recovery import open_partition

KEY = "onceflow.metrics.listener"

# ---- the configuration key -------------------------------------------------------------


def test_metrics_are_off_by_default() -> None:
    cfg, warnings = load_broker_config(None, {})
    assert warnings == []
    assert cfg.onceflow_metrics_listener is None
    entry = next(e for e in describe_broker_config(cfg) if e.name == KEY)
    assert entry.value is None and entry.is_default


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("127.0.0.1:9404", Listener("127.0.0.1", 9404)),
        ("0.0.0.0:9404", Listener("0.0.0.0", 9404)),
        (":9404", Listener("", 9404)),
        ("[::1]:9404", Listener("::1", 9404)),
        ("metrics.example:0", Listener("metrics.example", 0)),
        ("", None),
        ("  ", None),
    ],
)
def test_metrics_listener_forms(value: str, expected: Listener | None) -> None:
    cfg, _ = load_broker_config(None, {KEY: value})
    assert cfg.onceflow_metrics_listener == expected


@pytest.mark.parametrize(
    "value",
    [
        "9404",
        "localhost",
        "http://127.0.0.1:9404",
        "PLAINTEXT://127.0.0.1:9404",
        "h:70000",
        "a b:1",
    ],
)
def test_a_bad_metrics_listener_is_refused_naming_key_and_form(value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_broker_config(None, {KEY: value})
    message = str(caught.value)
    assert caught.value.key == KEY
    assert KEY in message and repr(value) in message
    assert "expected HOST:PORT" in message


def test_the_metrics_listener_may_not_take_the_kafka_port() -> None:
    with pytest.raises(ConfigError, match=r"onceflow\.metrics\.listener.*Kafka listener"):
        load_broker_config(None, {"listeners": "127.0.0.1:9092", KEY: "127.0.0.1:9092"})
    with pytest.raises(ConfigError, match=r"onceflow\.metrics\.listener"):
        BrokerConfig(onceflow_metrics_listener=Listener("0.0.0.0", 9092))
    # Another port, or the same port on another address, is fine.
    load_broker_config(None, {"listeners": "127.0.0.1:9092", KEY: "127.0.0.1:9093"})
    load_broker_config(None, {"listeners": "127.0.0.1:9092", KEY: "127.0.0.2:9092"})


def test_a_broker_without_the_key_keeps_no_metrics() -> None:
    fs = SimFileSystem()
    assert Broker(BrokerConfig(log_dirs=("/d",)), fs=fs, clock=ManualClock()).metrics is None
    on = BrokerConfig(log_dirs=("/e",), onceflow_metrics_listener=Listener("127.0.0.1", 0))
    assert Broker(on, fs=fs, clock=ManualClock()).metrics is not None


# ---- names and errors ------------------------------------------------------------------


def test_api_names_are_kafkas() -> None:
    assert api_name(ApiKey.PRODUCE) == "Produce"
    assert api_name(ApiKey.API_VERSIONS) == "ApiVersions"
    assert api_name(ApiKey.ADD_PARTITIONS_TO_TXN) == "AddPartitionsToTxn"
    assert api_name(ApiKey.OFFSET_FOR_LEADER_EPOCH) == "OffsetForLeaderEpoch"
    assert api_name(ApiKey.DESCRIBE_TRANSACTIONS) == "DescribeTransactions"
    assert api_name(9999) == "9999"


def _produce_response(*codes: ErrorCode) -> object:
    partitions = tuple(
        build(
            nested(ApiKey.PRODUCE, 8, "PartitionProduceResponse"),
            index=i,
            error_code=code,
            base_offset=-1,
            record_errors=(),
        )
        for i, code in enumerate(codes)
    )
    topic = build(
        nested(ApiKey.PRODUCE, 8, "TopicProduceResponse"),
        name="t",
        partition_responses=partitions,
    )
    return build(
        response_type(ApiKey.PRODUCE, 8),
        responses=(topic,),
        throttle_time=datetime.timedelta(0),
    )


def test_errors_are_found_at_any_depth_of_a_response() -> None:
    response = _produce_response(
        ErrorCode.none, ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error
    )
    found: list[ErrorCode] = []
    response_errors(response, found)
    assert found == [ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error]
    clean: list[ErrorCode] = []
    response_errors(_produce_response(ErrorCode.none), clean)
    assert clean == []


def test_buckets_count_a_value_on_a_bound_as_below_it() -> None:
    buckets = Buckets((1.0, 2.0))
    for value in (0.5, 1.0, 1.5, 2.0, 3.0):
        buckets.observe(value)
    assert buckets.cumulative() == [("1.0", 2), ("2.0", 4), ("+Inf", 5)]
    assert buckets.total == 8.0


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client import generate_latest

    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_a_request_is_counted_once_with_its_errors_and_bytes() -> None:
    fs = SimFileSystem()
    cfg = BrokerConfig(log_dirs=("/d",), onceflow_metrics_listener=Listener("127.0.0.1", 0))
    metrics = BrokerMetrics(Broker(cfg, fs=fs, clock=ManualClock()))
    response = _produce_response(ErrorCode.none, ErrorCode.not_leader_or_follower)
    metrics.request_done(ApiKey.PRODUCE, 0.0, response, 100)
    metrics.request_done(ApiKey.FETCH, 0.0, RawBody([], (ErrorCode.offset_out_of_range,)), 50)
    metrics.request_done(ApiKey.PRODUCE, 0.0, None, 0)  # acks=0: no response
    metrics.received(40)
    metrics.flush_round(0.002, 500)
    got = _samples(metrics.registry)
    assert got[("onceflow_requests_total", (("api", "Produce"),))] == 2
    assert got[("onceflow_requests_total", (("api", "Fetch"),))] == 1
    assert got[("onceflow_request_seconds_count", (("api", "Produce"),))] == 2
    produce_error = (("api", "Produce"), ("error", "NOT_LEADER_OR_FOLLOWER"))
    assert got[("onceflow_request_errors_total", produce_error)] == 1
    fetch_error = (("api", "Fetch"), ("error", "OFFSET_OUT_OF_RANGE"))
    assert got[("onceflow_request_errors_total", fetch_error)] == 1
    assert got[("onceflow_bytes_out_total", ())] == 150
    assert got[("onceflow_bytes_in_total", ())] == 40
    assert got[("onceflow_fsync_seconds_count", ())] == 1
    assert got[("onceflow_group_commit_records_sum", ())] == 500


# ---- LSO lag in seconds ----------------------------------------------------------------


def _log(clock: ManualClock) -> PartitionLog:
    plog, _ = open_partition(
        SimFileSystem(), "/data/t-0", "t", 0, LogConfig(index_interval_bytes=128), clock, 0, False
    )
    return plog


def _txn_append(plog: PartitionLog, producer_id: int, sequence: int, ts: int) -> int:
    data = build_batch(
        [(b"k", b"v" * 50, [])],
        timestamp_ms=ts,
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=sequence,
        transactional=True,
    )
    return plog.append_batches(data, validate_produced_batches(data, 1 << 22)).first_offset


@pytest.mark.parametrize("batches", [1, 3, 12])  # 12: the first batch is no longer in memory
def test_lso_lag_seconds_is_the_age_of_the_oldest_open_transactions_first_batch(
    batches: int,
) -> None:
    clock = ManualClock()
    plog = _log(clock)
    assert lso_lag_seconds(plog, clock.now_ms()) == 0.0
    start = clock.now_ms()
    for seq in range(batches):
        _txn_append(plog, 7, seq, clock.now_ms())
        clock.advance(1000)
    # A younger transaction of another producer does not hide the older one.
    _txn_append(plog, 8, 0, clock.now_ms())
    clock.advance(500)
    assert lso_lag_seconds(plog, clock.now_ms()) == (clock.now_ms() - start) / 1000
    plog.append_marker(7, 0, 0, commit=True)
    assert lso_lag_seconds(plog, clock.now_ms()) == 0.5  # producer 8's
    plog.append_marker(8, 0, 0, commit=False)
    assert lso_lag_seconds(plog, clock.now_ms()) == 0.0


# ---- the HTTP endpoint -----------------------------------------------------------------


async def _get(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return data


def test_the_endpoint_serves_metrics_and_refuses_the_rest() -> None:
    registry = CollectorRegistry()
    Counter("probe", "A probe.", registry=registry).inc(3)

    async def run() -> list[bytes]:
        server = await start_metrics_server(registry, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            return [
                await _get(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
                await _get(port, b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
                await _get(port, b"GET /other HTTP/1.1\r\nHost: x\r\n\r\n"),
                await _get(port, b"POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
                await _get(port, b"nonsense\r\n\r\n"),
                await _get(port, b"GET /metrics HTTP/1.1\r\nX: " + b"y" * 20_000 + b"\r\n\r\n"),
            ]
        finally:
            server.close()
            await server.wait_closed()

    ok, head, missing, post, bad, huge = asyncio.run(run())
    status, _, body = ok.partition(b"\r\n\r\n")
    assert status.startswith(b"HTTP/1.1 200 ")
    assert b"Content-Type: text/plain; version=0.0.4" in status
    assert b"probe_total 3.0" in body
    assert head.startswith(b"HTTP/1.1 200 ") and head.endswith(b"\r\n\r\n")
    assert missing.startswith(b"HTTP/1.1 404 ")
    assert post.startswith(b"HTTP/1.1 405 ")
    # A request that cannot be parsed has no HTTP version to answer in: aiohttp says 1.0.
    assert bad.split(b" ", 2)[1] == b"400"
    assert huge.split(b" ", 2)[1] == b"431"


# ---- two-phase commit transactions -----------------------------------------------------


def test_two_phase_transactions_are_counted_with_their_age(tmp_path: Path) -> None:
    """A two-phase commit transaction has no timeout to end it, so the metrics show how many
    are open and how old the oldest is; an ordinary open transaction is not counted."""

    async def main() -> None:
        clock = ManualClock()
        config = BrokerConfig(
            log_dirs=(str(tmp_path),),
            onceflow_metrics_listener=Listener("127.0.0.1", 0),
            transaction_two_phase_commit_enable=True,
            transaction_state_log_num_partitions=1,
            offsets_topic_num_partitions=1,
        )
        broker = Broker(config, clock=clock)
        await broker.start()
        try:
            await broker.create_topic("t", 1)
            coordinator = broker.txn_coordinator
            inits = {
                "two": await coordinator.init_producer_id("two", 60_000, two_phase=True),
                "plain": await coordinator.init_producer_id("plain", 60_000),
            }
            for txn_id, init in inits.items():
                error = await coordinator.add_partitions(
                    txn_id, init.producer_id, init.producer_epoch, [("t", 0)]
                )
                assert error is ErrorCode.none
            clock.advance(5_000)
            assert broker.metrics is not None
            values = {
                s.name: s.value
                for family in broker.metrics.registry.collect()
                for s in family.samples
            }
            assert values["onceflow_transactions_two_phase_open"] == 1
            assert values["onceflow_transaction_two_phase_oldest_open_seconds"] == 5.0
        finally:
            await broker.stop()

    asyncio.run(main())
