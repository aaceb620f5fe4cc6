"""The participant client's columnar produce (`produce_columns`) against a real broker: what
a read_committed confluent-kafka consumer reads back (keys, values, nulls, headers,
partitions by Kafka's murmur2) and what the log holds behind it (sequences continuing
across batches of rows and columns mixed, batches cut at `batch.size`), for each codec; and
a two-phase transaction of columns that is aborted leaves nothing."""

from __future__ import annotations

import time

import numpy as np
import pytest
from confluent_kafka import KafkaError, TopicPartition

from onceflow.client.errors import ConfigError
from onceflow.client.participant import BinaryColumn, TwoPhaseProducer, complete
from onceflow.client.participant_columns import Chunk, header_sections
from onceflow.client.participant_records import kafka_partition
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import consumer, create_topic
from tests.helpers.proxy import read_partition

TWO_PC = {"transaction.two.phase.commit.enable": "true"}
PARTITIONS = 3
Row = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes]] | None]


def read_rows(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> list[Row]:
    """(partition, key, value, headers) of every committed record, in each partition's order."""
    c = consumer(bootstrap, **{"isolation.level": "read_committed", "enable.partition.eof": True})
    got: list[Row] = []
    ended: set[int] = set()
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + 30
        while len(ended) < partitions and time.monotonic() < deadline:
            message = c.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None and error.code() == KafkaError._PARTITION_EOF:
                ended.add(message.partition())
                continue
            assert error is None, error
            got.append((message.partition(), message.key(), message.value(), message.headers()))
    finally:
        c.close()
    assert len(ended) == partitions, f"no end reached on every partition; read {got}"
    return got


def by_partition(rows: list[Row]) -> dict[int, list[Row]]:
    out: dict[int, list[Row]] = {p: [] for p in range(PARTITIONS)}
    for row in rows:
        out[row[0]].append(row)
    return out


@pytest.mark.broker_overrides(TWO_PC)
@pytest.mark.parametrize("compression", ["none", "lz4", "zstd"])
def test_columns_and_rows_read_back_with_kafkas_partitioning_and_sequences(
    broker: BrokerProcess, compression: str
) -> None:
    topic = create_topic(broker.bootstrap, f"columns-{compression}", PARTITIONS)
    n = 3000
    keys = [None if i % 5 == 0 else b"key-%d" % (i % 23) for i in range(n)]
    values = [None if i % 11 == 0 else b"v%05d" % i + b"x" * (i % 300) for i in range(n)]
    headers = [[("i", b"%d" % i)] if i % 7 == 0 else [] for i in range(n)]
    settings = {"batch.size": 20_000, "compression.type": compression}
    expected: dict[int, list[Row]] = {p: [] for p in range(PARTITIONS)}
    sticky, sent = 0, 0  # the keyless partition, and the bytes that went there so far
    with TwoPhaseProducer(broker.bootstrap, f"columns-{compression}", **settings) as producer:
        producer.init()
        producer.begin()
        for start in range(0, n, 700):  # columns of 700 rows, one row produced between them
            stop = min(start + 700, n)
            producer.produce_columns(
                topic,
                BinaryColumn.of(values[start:stop]),
                keys=BinaryColumn.of(keys[start:stop]),
                headers=header_sections(headers[start:stop]),
            )
            # keyless rows go to one partition until batch.size bytes went there (KIP-794)
            keyless = sticky % PARTITIONS
            sizes = Chunk.checked(
                BinaryColumn.of(values[start:stop]),
                BinaryColumn.of(keys[start:stop]),
                header_sections(headers[start:stop]),
                0,
            ).record_sizes()
            for i in range(start, stop):
                k = keys[i]
                p = kafka_partition(k, PARTITIONS) if k is not None else keyless
                expected[p].append((p, k, values[i], headers[i] or None))
                sent += int(sizes[i - start]) if p == keyless else 0
            if sent >= settings["batch.size"]:
                sticky, sent = keyless + 1, 0
            producer.produce(topic, b"row-%d" % start, key=b"r", headers=[("row", b"1")])
            p = kafka_partition(b"r", PARTITIONS)
            expected[p].append((p, b"r", b"row-%d" % start, [("row", b"1")]))
        producer.commit()
        pid = producer.producer_id
    assert by_partition(read_rows(broker.bootstrap, topic)) == expected
    for p in range(PARTITIONS):
        logged = [r for r in read_partition(broker.bootstrap, topic, p).records if r.sequence >= 0]
        assert [r.sequence for r in logged] == list(range(len(logged)))
        assert {r.producer_id for r in logged} == {pid}


@pytest.mark.broker_overrides(TWO_PC)
def test_explicit_partitions_and_a_batch_size_cut(broker: BrokerProcess) -> None:
    # A batch over batch.size (+ one record) would be refused: MESSAGE_TOO_LARGE.
    limit = {"max.message.bytes": str(50_000 + 300)}
    topic = create_topic(broker.bootstrap, "columns-partitions", PARTITIONS, limit)
    n = 5000
    values = BinaryColumn.of([b"%06d" % i + b"." * 200 for i in range(n)])
    wanted = np.array([i % 4 - 1 for i in range(n)], np.int64)  # -1: by key (none: sticky)
    with TwoPhaseProducer(broker.bootstrap, "columns-partitions", batch_size=50_000) as producer:
        producer.init()
        producer.begin()
        with pytest.raises(ConfigError, match="partitions"):
            producer.produce_columns(topic, values, partition=np.full(n, 3, np.int64))
        producer.produce_columns(topic, values, partition=wanted)
        prepared = producer.prepare()
    assert complete(prepared, True, bootstrap_servers=broker.bootstrap)
    got = by_partition(read_rows(broker.bootstrap, topic))
    numbers = {p: [int(v[:6]) for _, _, v, _ in rows if v] for p, rows in got.items()}
    for p in (1, 2):
        assert [i for i in numbers[p] if i % 4 - 1 == p] == [i for i in range(n) if i % 4 - 1 == p]
    assert sorted(i for nums in numbers.values() for i in nums) == list(range(n))
    for nums in numbers.values():
        assert nums == sorted(nums)


@pytest.mark.broker_overrides(TWO_PC)
def test_an_aborted_prepared_transaction_of_columns_leaves_nothing(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, "columns-abort", PARTITIONS)
    values = BinaryColumn.of([b"x" * 100] * 20_000)
    with TwoPhaseProducer(broker.bootstrap, "columns-abort") as producer:
        producer.init()
        producer.begin()
        producer.produce_columns(topic, values)
        prepared = producer.prepare()
    assert complete(prepared, False, bootstrap_servers=broker.bootstrap)
    assert read_rows(broker.bootstrap, topic) == []


@pytest.mark.broker_overrides(TWO_PC)
def test_keyless_columns_stay_on_a_partition_until_a_batch_is_full(broker: BrokerProcess) -> None:
    """As Kafka's partitioner since KIP-794: keyless records move to the next partition
    once `batch.size` bytes went to the one they use, so the batches they make are full."""
    topic = create_topic(broker.bootstrap, "columns-sticky", PARTITIONS)
    calls = [BinaryColumn.of([b"%d" % c + b"." * 999] * 100) for c in range(7)]  # ~100 KB
    with TwoPhaseProducer(broker.bootstrap, "columns-sticky", batch_size=250_000) as producer:
        producer.init()
        producer.begin()
        for values in calls:
            producer.produce_columns(topic, values)
        producer.commit()
    first_byte = {
        p: sorted({v[:1] for _, _, v, _ in rows if v})
        for p, rows in by_partition(read_rows(broker.bootstrap, topic)).items()
    }
    # Three calls (300 KB) pass 250 KB: calls 0-2 on one partition, 3-5 on the next, 6 after.
    assert first_byte == {0: [b"0", b"1", b"2"], 1: [b"3", b"4", b"5"], 2: [b"6"]}
