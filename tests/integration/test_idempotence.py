"""Idempotent producers of three real clients through a fault-injecting proxy.

The broker advertises the proxy, so every connection the clients make goes through it. The
proxy drops the response to every Nth Produce request after the broker has appended the
batch (the client must retry a batch the broker already has), delays responses, and cuts
connections at random right after Produce requests. Each client sends numbered records with
up to 5 requests in flight; afterwards the partitions, read straight from the broker, must
hold every record exactly once and in order, at the offsets the clients were told.

The proxy's counters show that the faults fired and that batches the broker had already
acknowledged were sent again, so the exact log is the broker's deduplication at work.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka import KafkaError, Message
from kafka import KafkaProducer

from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import OP_TIMEOUT_S, create_topic
from tests.helpers.clients import producer as confluent_producer
from tests.helpers.proxy import FaultProxy, Faults, ProxyStats, read_partition

PARTITIONS = 3
PER_PARTITION = 500
DELIVERY_TIMEOUT_S = 60.0

FAULTS = Faults(
    drop_produce_response_every=9,
    delay_probability=0.3,
    max_delay_s=0.03,
    cut_after_produce_probability=0.1,
    max_cut_delay_s=0.02,
)


class Proxied:
    def __init__(self, broker: BrokerProcess, proxy: FaultProxy) -> None:
        self.broker = broker
        self.proxy = proxy

    @property
    def bootstrap(self) -> str:
        """What clients use: the proxy (which the broker advertises, too)."""
        return self.proxy.address


@pytest.fixture(scope="module")
def proxied_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxied]:
    proxy = FaultProxy(seed=1).start()
    broker = BrokerProcess(
        tmp_path_factory.mktemp("idempotence") / "data",
        {"advertised.listeners": proxy.address},
    )
    try:
        broker.start()
        proxy.target_port = broker.port  # start() may have moved to another free port
        yield Proxied(broker, proxy)
        assert broker.stop() == 0, f"unclean broker shutdown; its log:\n{broker.log_tail()}"
    finally:
        broker.kill()
        proxy.stop()


@pytest.fixture
def env(proxied_broker: Proxied) -> Iterator[Proxied]:
    proxied_broker.proxy.clear_faults()
    proxied_broker.proxy.reset_stats()
    yield proxied_broker
    proxied_broker.proxy.clear_faults()
    assert proxied_broker.broker.running, proxied_broker.broker.log_tail()


def _value(partition: int, i: int) -> bytes:
    return f"p{partition}-{i:06d}".encode()


def _order() -> list[tuple[int, int]]:
    """(partition, index) in sending order: partitions interleaved, each in order."""
    return [(p, i) for i in range(PER_PARTITION) for p in range(PARTITIONS)]


def _check_log(env: Proxied, topic: str, stats: ProxyStats) -> None:
    """Exactly once, in order, at the expected offsets; and the faults really happened."""
    for p in range(PARTITIONS):
        contents = read_partition(env.broker.bootstrap, topic, p)
        expected = [_value(p, i) for i in range(PER_PARTITION)]
        got = contents.values()
        if got != expected:
            dupes = len(got) - len(set(got))
            missing = sorted(set(expected) - set(got))[:5]
            first_diff = next(
                (i for i, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b), None
            )
            raise AssertionError(
                f"partition {p}: {len(got)} records for {len(expected)} sent, {dupes} repeated, "
                f"missing e.g. {missing}, first difference at offset {first_diff}"
            )
        assert [r.offset for r in contents.records] == list(range(PER_PARTITION))
        assert contents.high_watermark == PER_PARTITION
        # Idempotence was really on: every record carries a producer id and a sequence, and
        # within one producer id and epoch the sequences follow on without a repeat.
        assert all(r.producer_id >= 0 and r.sequence >= 0 for r in contents.records)
        last: dict[tuple[int, int], int] = {}
        for r in contents.records:
            ident = (r.producer_id, r.producer_epoch)
            if ident in last:
                assert r.sequence == last[ident] + 1, f"sequence jump at {p}@{r.offset}"
            last[ident] = r.sequence

    print(
        f"proxy: {stats.produce_requests} produce requests, {stats.dropped_responses} "
        f"responses dropped, {stats.delayed_responses} delayed, {stats.random_cuts} cuts, "
        f"{stats.batches_resent} batches resent, {len(stats.retried_appends)} acknowledged "
        "batches retried"
    )
    assert stats.produce_requests > 0
    assert stats.dropped_responses > 0, stats
    assert stats.delayed_responses > 0, stats
    assert stats.random_cuts > 0, stats
    # Batches the broker had appended and acknowledged were sent again by the client ...
    assert stats.retried_appends, f"no acknowledged batch was retried: {stats}"
    assert stats.batches_resent >= len(stats.retried_appends)
    # ... and the log above holds each of them once.


def _assert_offsets(acked: dict[tuple[int, int], int]) -> None:
    """Each record was acknowledged once, at the offset it really has (a retried duplicate is
    answered with the offset its first append got)."""
    assert len(acked) == PARTITIONS * PER_PARTITION
    wrong = [(pi, off) for pi, off in acked.items() if off != pi[1]]
    assert not wrong, f"acknowledged at the wrong offsets: {wrong[:10]}"


# ---- the clients -----------------------------------------------------------------------------


def test_confluent_kafka_idempotent_producer_through_faults(env: Proxied) -> None:
    topic = create_topic(env.bootstrap, partitions=PARTITIONS)
    p = confluent_producer(
        env.bootstrap,
        **{
            "enable.idempotence": True,
            "acks": "all",
            "max.in.flight.requests.per.connection": 5,
            "linger.ms": 1,
            "batch.num.messages": 10,
            "message.timeout.ms": int(DELIVERY_TIMEOUT_S * 1000),
            "retry.backoff.ms": 20,
            "reconnect.backoff.ms": 10,
            "reconnect.backoff.max.ms": 100,
        },
    )
    acked: dict[tuple[int, int], int] = {}
    errors: list[KafkaError] = []
    twice: list[tuple[int, int]] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            errors.append(err)
            return
        part, idx = msg.partition(), int(msg.value()[4:])
        if (part, idx) in acked:
            twice.append((part, idx))
        acked[(part, idx)] = msg.offset()

    env.proxy.set_faults(FAULTS, seed=11)
    for part, i in _order():
        while True:
            try:
                p.produce(topic, value=_value(part, i), partition=part, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    remaining = p.flush(DELIVERY_TIMEOUT_S)
    env.proxy.clear_faults()
    assert remaining == 0, f"{remaining} records without a delivery report"
    assert not errors, f"delivery errors: {errors[:5]}"
    assert not twice, f"records acknowledged twice: {twice[:5]}"
    _assert_offsets(acked)
    _check_log(env, topic, env.proxy.stats())


def test_kafka_python_idempotent_producer_through_faults(env: Proxied) -> None:
    topic = create_topic(env.bootstrap, partitions=PARTITIONS)
    timeout_ms = int(OP_TIMEOUT_S * 1000)
    p = KafkaProducer(
        bootstrap_servers=env.bootstrap,
        enable_idempotence=True,
        acks="all",
        max_in_flight_requests_per_connection=5,
        linger_ms=1,
        batch_size=150,  # a few records per batch: many requests
        request_timeout_ms=10_000,
        delivery_timeout_ms=int(DELIVERY_TIMEOUT_S * 1000),
        max_block_ms=timeout_ms,
        retry_backoff_ms=20,
        reconnect_backoff_ms=10,
        reconnect_backoff_max_ms=100,
    )
    try:
        p.partitions_for(topic)  # metadata before the faults start
        env.proxy.set_faults(FAULTS, seed=12)
        futures = [
            ((part, i), p.send(topic, value=_value(part, i), partition=part))
            for part, i in _order()
        ]
        p.flush(timeout=DELIVERY_TIMEOUT_S)
        env.proxy.clear_faults()
        acked = {pi: f.get(timeout=OP_TIMEOUT_S).offset for pi, f in futures}
    finally:
        env.proxy.clear_faults()
        p.close(timeout=OP_TIMEOUT_S)
    _assert_offsets(acked)
    _check_log(env, topic, env.proxy.stats())


def test_aiokafka_idempotent_producer_through_faults(env: Proxied) -> None:
    topic = create_topic(env.bootstrap, partitions=PARTITIONS)

    async def run() -> dict[tuple[int, int], int]:
        p = AIOKafkaProducer(
            bootstrap_servers=env.bootstrap,
            enable_idempotence=True,
            acks="all",
            linger_ms=1,
            max_batch_size=150,
            request_timeout_ms=10_000,
            retry_backoff_ms=20,
        )
        await asyncio.wait_for(p.start(), OP_TIMEOUT_S)
        try:
            await asyncio.wait_for(p.partitions_for(topic), OP_TIMEOUT_S)
            env.proxy.set_faults(FAULTS, seed=13)
            futures = []
            for part, i in _order():
                fut = await asyncio.wait_for(
                    p.send(topic, value=_value(part, i), partition=part), OP_TIMEOUT_S
                )
                futures.append(((part, i), fut))
            results = await asyncio.wait_for(
                asyncio.gather(*(f for _, f in futures)), DELIVERY_TIMEOUT_S
            )
            env.proxy.clear_faults()
            return {pi: md.offset for (pi, _), md in zip(futures, results, strict=True)}
        finally:
            env.proxy.clear_faults()
            await asyncio.wait_for(p.stop(), OP_TIMEOUT_S)

    acked = asyncio.run(run())
    _assert_offsets(acked)
    _check_log(env, topic, env.proxy.stats())
